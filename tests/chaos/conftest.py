"""Chaos tests: lakesink processes killed and paused at protocol steps, then restarted, drained and audited."""
from __future__ import annotations

import pytest

from testkit.chaos import Cluster


@pytest.fixture
def cluster_of(tmp_path):
    """`cluster_of(config)` -> a Cluster whose processes are all killed (resumed first, if paused) at teardown."""
    made: list[Cluster] = []

    def make(config) -> Cluster:
        c = Cluster(tmp_path, config)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
