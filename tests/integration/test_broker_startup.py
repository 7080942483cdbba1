"""A broker that does not come up in time gives one clear sentence and leaves no process behind."""
from __future__ import annotations

import pytest

from connector.errors import SetupError
from connector.kafka_local import LocalKafka

pytestmark = pytest.mark.integration


def test_broker_not_up_in_time_is_reported_and_stopped(tmp_path):
    broker = LocalKafka(tmp_path, startup_timeout_s=0.5)
    with pytest.raises(SetupError, match=r"did not answer on 127\.0\.0\.1:\d+ within 0.5 s: see .*server\.log"):
        broker.start()
    assert broker.proc is None
