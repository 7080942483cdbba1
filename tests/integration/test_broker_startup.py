"""A broker that does not come up in time gives one clear sentence and leaves no process behind."""
from __future__ import annotations

import pytest

from connector.errors import SetupError
from connector.local.kafka import LocalKafka, new_cluster_id

pytestmark = pytest.mark.integration


def test_broker_not_up_in_time_is_reported_and_stopped(tmp_path):
    broker = LocalKafka(tmp_path, startup_timeout_s=0.5)
    with pytest.raises(SetupError, match=r"did not answer on 127\.0\.0\.1:\d+ within 0.5 s: see .*server\.log"):
        broker.start()
    assert broker.proc is None


def test_broker_formats_and_starts_with_a_cluster_id_that_starts_with_a_dash(tmp_path):
    """The id is passed as `--cluster-id=<id>`, so even one that looks like an option is taken as the id."""
    cluster_id = "-" + new_cluster_id()[1:]
    with LocalKafka(tmp_path, cluster_id=cluster_id) as broker:
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert md.cluster_id == cluster_id
        assert md.brokers
