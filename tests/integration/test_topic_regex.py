"""`kafka.topic.regex`: every topic whose name matches is sunk into the table, one created while lakesink runs from
its first offset, and one deleted while it runs is reported while the others go on. Real broker, real Delta."""
from __future__ import annotations

import uuid
from collections import Counter

import pytest

from connector.config import config_from_dict
from testkit import create_topic, open_table
from testkit.kafka import produce_json
from testkit.pipeline import Sink, drain

pytestmark = pytest.mark.integration


def test_a_regex_sinks_its_topics_one_created_while_running_from_its_start_and_survives_one_deleted(
        kafka_bootstrap, admin, table_path, spark, caplog):
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    a, b, c = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    create_topic(admin, a, 2)
    create_topic(admin, b, 1)
    create_topic(admin, f"other-{prefix}", 1)  # does not match
    name = f"rx-{uuid.uuid4().hex[:8]}"
    cfg = config_from_dict({"name": name, "kafka.bootstrap.servers": kafka_bootstrap,
                            "kafka.topic.regex": rf"{prefix}-[a-z]", "control.topic.name": f"control-{name}",
                            "target.base.path": str(table_path.parent), "target.table.name": table_path.name,
                            "transaction.interval.ms": "1500", "topic.refresh.interval.ms": "1000",
                            "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000"})
    produced_a = produce_json(kafka_bootstrap, a, 400, 2)
    produced_b = produce_json(kafka_bootstrap, b, 100, 1)
    produce_json(kafka_bootstrap, f"other-{prefix}", 50, 1)
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {**{(a, p): n for p, n in produced_a.items()}, (b, 0): produced_b[0]},
              "the topics matching at the start", 90)
        create_topic(admin, c, 2)
        produced_c = produce_json(kafka_bootstrap, c, 300, 2)
        drain(sink, cfg, {(c, p): n for p, n in produced_c.items()}, "the topic created while running", 90)
        admin.delete_topics([b], operation_timeout=30)[b].result()
        more_a = produce_json(kafka_bootstrap, a, 200, 2, start=400)
        drain(sink, cfg, {(a, p): produced_a[p] + more_a[p] for p in produced_a}, "records after a deletion", 90)
        assert not sink.errors
    rows = open_table(cfg.table_path).to_pyarrow_table(
        columns=["_kafka_topic", "_kafka_partition", "_kafka_offset"]).to_pylist()
    coordinates = Counter((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows)
    assert max(coordinates.values()) == 1, "a record twice"
    per_topic = Counter(r["_kafka_topic"] for r in rows)
    assert per_topic == {a: 600, b: 100, c: 300}, per_topic
    assert min(o for (t, _, o) in coordinates if t == c) == 0, "the new topic from its first offset"
    assert any(f"topic {b}, sunk through kafka.topic.regex, no longer exists" in r.getMessage()
               for r in caplog.records), "the deletion is reported"
