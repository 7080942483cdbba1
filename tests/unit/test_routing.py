"""Which table each topic (or record) goes to when one connector writes several tables (connector/routing.py,
participant/route.py), and the per-table configuration keys."""
from __future__ import annotations

import json

import pytest

from connector.app.roles import stall_s
from connector.config import config_from_dict
from connector.errors import ConfigError
from connector.routing import UNROUTABLE, Route, plan, table_of_topic
from coordinator.progress import ProgressSettings
from participant.backlog import BacklogSettings
from participant.route import RecordRouter

BASE = {"name": "shop", "kafka.bootstrap.servers": "127.0.0.1:9092", "target.base.path": "/tmp/tables"}
TOPICS = ["shop.orders-v2", "shop_orders_v2", "payments", "refunds", "1st", "clicks-a", "clicks-b", "misc"]
LAYOUTS = {
    "template, map, route": {"target.table.name": "${topic}", "table.name.map": "payments:money,refunds:money",
                             "route.field": "kind", "route.topics": "clicks-a,clicks-b", "route.tables": "ev,audit"},
    "prefixed template": {"target.table.name": "raw_${topic}", "table.name.map": "payments:money"},
    "fixed table, one renamed": {"target.table.name": "main", "table.name.map": "payments:money"},
    "template only": {"target.table.name": "${topic}"},
    "every topic routed": {"target.table.name": "main", "route.field": "kind", "route.tables": "ev,audit"},
}


def test_a_template_names_tables_after_topics_with_illegal_characters_replaced():
    assert table_of_topic("${topic}", "shop.orders-v2") == "shop_orders_v2"
    assert table_of_topic("${topic}", "1st") == "_1st"
    assert table_of_topic("raw_${topic}", "1st") == "raw_1st"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_regex_connector_gives_each_table_exactly_the_topics_the_named_connector_does(layout):
    """A table's pipeline of a regex connector finds its topics itself (topics created later too): its own regex
    must match exactly the topics that go to it."""
    named = plan(config_from_dict({**BASE, "kafka.topic.names": ",".join(TOPICS), **LAYOUTS[layout]}, env={}))
    by_regex = plan(config_from_dict({**BASE, "kafka.topic.regex": ".*", **LAYOUTS[layout]}, env={}), TOPICS)
    assert {p.table: set(p.cfg.kafka_topic_names) for p in named} == \
        {p.table: {t for t in TOPICS if p.cfg.is_source_topic(t)} for p in by_regex}
    fed = [t for p in named for t in p.cfg.kafka_topic_names if p.route is None]
    assert len(fed) == len(set(fed)), "a topic that is not routed feeds one table"


def test_each_table_gets_its_own_name_group_and_overrides():
    cfg = config_from_dict({**BASE, "kafka.topic.names": "payments,refunds,misc,clicks-a",
                            **LAYOUTS["template, map, route"], "route.topics": "clicks-a",
                            "table.money.write.mode": "upsert", "table.money.record.key.fields": "id",
                            "table.money.partition.field.name": "day"}, env={})
    tables = {p.table: p.cfg for p in plan(cfg)}
    assert sorted(tables) == ["audit", "ev", "misc", "money"]
    money = tables["money"]
    assert (money.name, money.kafka_group_id, money.kafka_topic_names) == \
        ("shop.money", "lakesink-shop.money", ("payments", "refunds"))
    assert (money.write_mode, money.record_key_fields, money.partition_field_name) == ("upsert", ("id",), ("day",))
    assert tables["misc"].write_mode == "append" and tables["misc"].table_path == "/tmp/tables/misc"
    single = config_from_dict({**BASE, "kafka.topic.names": "misc", "target.table.name": "events"}, env={})
    assert [(p.table, p.cfg) for p in plan(single)] == [("events", single)]


def test_each_table_keeps_its_own_transaction_interval_and_size_limits():
    """table.<table>.transaction.interval.ms (and commit.max.records / commit.max.bytes) set one table's cadence: its
    coordinator's interval, its workers' backlog weighing and its /health stall bound follow it; the other tables
    keep the connector's."""
    cfg = config_from_dict({**BASE, "kafka.topic.names": "fast,slow,misc", "target.table.name": "${topic}",
                            "transaction.interval.ms": "5000", "commit.max.records": "1000",
                            "table.fast.transaction.interval.ms": "1000", "table.slow.transaction.interval.ms": "20000",
                            "table.slow.commit.max.records": "0", "table.slow.commit.max.bytes": "4096"}, env={})
    tables = {p.table: p.cfg for p in plan(cfg)}
    own = {table: (c.transaction_interval_ms, c.commit_max_records, c.commit_max_bytes) for table, c in tables.items()}
    default_bytes = cfg.commit_max_bytes
    assert own == {"fast": (1000, 1000, default_bytes), "slow": (20000, 0, 4096), "misc": (5000, 1000, default_bytes)}
    for table, c in tables.items():
        interval_ms = own[table][0]
        assert ProgressSettings.from_config(c).interval_s == interval_ms / 1000
        assert BacklogSettings.from_config(c) == BacklogSettings(c.name, *own[table][1:], interval_ms)
        assert stall_s(c) == (interval_ms + c.coordinator_writestatus_timeout_ms) / 1000
    assert cfg.warnings() == []


@pytest.mark.parametrize("extra, problem", [
    ({"table.slow.transaction.interval.ms": "0"}, "table.slow.transaction.interval.ms: expected a positive"),
    ({"table.slow.commit.max.records": "-1"}, "table.slow.commit.max.records: expected a non-negative"),
    ({"table.slow.transaction.intervall.ms": "1"}, "unknown key 'table.slow.transaction.intervall.ms'"),
])
def test_a_bad_table_interval_is_one_clear_problem(extra, problem):
    with pytest.raises(ConfigError) as error:
        config_from_dict({**BASE, "kafka.topic.names": "slow", "target.table.name": "${topic}", **extra}, env={})
    assert len(error.value.problems) == 1 and error.value.problems[0].startswith(problem), error.value.problems


def test_a_table_interval_of_a_single_table_connector_is_said_to_have_no_effect():
    cfg = config_from_dict({**BASE, "kafka.topic.names": "slow", "target.table.name": "events",
                            "table.events.transaction.interval.ms": "20000"}, env={})
    assert cfg.transaction_interval_ms == 60000
    assert [w for w in cfg.warnings() if "table.events.transaction.interval.ms has no effect" in w], cfg.warnings()


def test_an_explicit_group_id_gets_the_table_as_a_suffix():
    cfg = config_from_dict({**BASE, "kafka.topic.names": "a,b", "target.table.name": "${topic}",
                            "kafka.group.id": "team-sink"}, env={})
    assert [p.cfg.kafka_group_id for p in plan(cfg)] == ["team-sink.a", "team-sink.b"]


@pytest.mark.parametrize("extra, problem", [
    ({"table.money.write.mod": "upsert"}, "unknown key 'table.money.write.mod'"),
    ({"table.money.write.mode": "sideways"}, "table.money.write.mode: expected one of"),
    ({"table.money.delete.enabled": "true"}, "table.money: delete.enabled=true needs write.mode=upsert"),
    ({"route.field": "kind"}, "route.tables: required with route.field"),
    ({"route.field": "kind", "route.tables": "a", "route.field.default": "b"}, "route.field.default: 'b' is not"),
    ({"route.tables": "a"}, "route.tables needs route.field"),
    ({"route.field": "kind", "route.tables": "a", "route.topics": "nope"}, "route.topics: nope not in"),
    ({"route.field": "kind", "route.tables": "a", "value.converter": "string"}, "route.field needs value.converter"),
    ({"table.name.map": "payments"}, "table.name.map: expected topic:table pairs"),
    ({"target.table.name": "raw-${topic}"}, "target.table.name: expected an identifier"),
])
def test_bad_routing_keys_are_one_clear_problem_each(extra, problem):
    with pytest.raises(ConfigError) as error:
        config_from_dict({**BASE, "kafka.topic.names": "payments", "target.table.name": "${topic}", **extra}, env={})
    assert len(error.value.problems) == 1 and error.value.problems[0].startswith(problem), error.value.problems


class _Msg:
    def __init__(self, topic: str, offset: int, value: bytes | None, key: bytes | None = None):
        self._topic, self._offset, self._value, self._key = topic, offset, value, key

    def topic(self): return self._topic  # noqa: E704
    def partition(self): return 0  # noqa: E704
    def offset(self): return self._offset  # noqa: E704
    def timestamp(self): return (1, 1000)  # noqa: E704
    def key(self): return self._key  # noqa: E704
    def value(self): return self._value  # noqa: E704
    def headers(self): return None  # noqa: E704


def _records(topic: str, kinds: list) -> list[_Msg]:
    """JSON records with these `kind`s (None: without the field; ...: a tombstone)."""
    return [_Msg(topic, i, None if k is ... else json.dumps({"id": i, **({} if k is None else {"kind": k})}).encode())
            for i, k in enumerate(kinds)]


def test_each_record_of_a_routed_topic_lands_in_exactly_one_table_or_one_record_error():
    kinds = ["ev", "audit", "other", None, 7, ..., "ev"]
    msgs = _records("clicks", kinds) + [_Msg("clicks", 7, b"{not json")]
    taken: dict[str, list[int]] = {}
    errors: list[int] = []
    for table in ("ev", "audit"):
        router = RecordRouter(Route("kind", frozenset({"clicks"}), ("ev", "audit"), None, table), "json", False, False,
                              None)
        kept, failures = router.pick(msgs)
        taken[table] = [m.offset() for m in kept]
        errors += [f.offset for f in failures]
        assert all(f.error_class == UNROUTABLE and "route.field 'kind'" in f.error_message for f in failures)
    assert taken == {"ev": [0, 6], "audit": [1]}
    assert sorted(errors) == [2, 3, 4, 5, 7], "the first table answers for records naming none, once"
    other = RecordRouter(Route("kind", frozenset({"clicks"}), ("ev", "audit"), None, "ev"), "json", False, False, None)
    assert other.pick([_Msg("orders", 0, b"{}")])[0][0].offset() == 0, "a topic that is not routed is taken whole"


def test_with_a_default_the_default_table_takes_the_records_naming_none():
    route = Route("kind", None, ("ev", "audit"), "audit", "audit")
    msgs = _records("t", ["ev", "zzz", None, ...])
    kept, failures = RecordRouter(route, "json", False, False, None).pick(msgs)
    assert [m.offset() for m in kept] == [1, 2], "a tombstone without a key names no table, not the default"
    assert [(f.offset, f.error_class) for f in failures] == [(3, UNROUTABLE)]
    wrapped = [_Msg("t", 0, json.dumps({"schema": {}, "payload": {"kind": "ev"}}).encode())]
    ev = RecordRouter(Route("kind", None, ("ev", "audit"), "audit", "ev"), "json", True, False, None)
    assert len(ev.pick(wrapped)[0]) == 1, "a Connect JSON value routes by its payload"


# --- deletes: their table from the before-image or the Kafka key, never the default ------------------------------

def _pick_all(msgs: list, tables: tuple[str, ...], default: str | None, field: str, schemas: bool = False,
              debezium: bool = False) -> tuple[dict[str, list[int]], dict[int, str]]:
    """Each table's kept offsets, and the record errors (offset -> message) of every table's router."""
    kept: dict[str, list[int]] = {}
    errors: dict[int, str] = {}
    for table in tables:
        router = RecordRouter(Route(field, None, tables, default, table), "json", schemas, debezium, None)
        taken, failures = router.pick(msgs)
        kept[table] = [m.offset() for m in taken]
        for f in failures:
            assert f.error_class == UNROUTABLE and f.offset not in errors, (f.offset, f.error_message)
            errors[f.offset] = f.error_message
    return kept, errors


@pytest.mark.parametrize("default", [None, "audit"])
def test_a_tombstone_goes_to_the_table_its_kafka_key_names_and_without_one_is_a_record_error(default):
    wrapper = {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "kind"},
                                            {"type": "int64", "optional": False, "field": "id"}], "optional": False}
    msgs = [_Msg("t", 0, None, json.dumps({"kind": "ev", "id": 1}).encode()),
            _Msg("t", 1, None, json.dumps({"schema": wrapper, "payload": {"kind": "audit", "id": 1}}).encode()),
            _Msg("t", 2, None, json.dumps({"id": 1}).encode()),  # a key without the field
            _Msg("t", 3, None, b"42"), _Msg("t", 4, None, b"not json"), _Msg("t", 5, None, None),
            _Msg("t", 6, json.dumps({"schema": {"type": "struct"}, "payload": None}).encode(),
                 json.dumps({"kind": "ev", "id": 2}).encode()),  # the JSON converter's tombstone
            _Msg("t", 7, json.dumps({"schema": {"type": "struct"}, "payload": None}).encode(), b'{"id": 2}'),
            _Msg("t", 8, None, json.dumps({"kind": None, "id": 1}).encode())]
    kept, errors = _pick_all(msgs, ("ev", "audit"), default, "kind", schemas=True)
    assert kept == {"ev": [0, 6], "audit": [1]}
    assert sorted(errors) == [2, 3, 4, 5, 7, 8], "whatever route.field.default says"
    assert "route.field 'kind' is missing: the record is a tombstone, and its Kafka key has no such field, so the " \
           "delete names none of route.tables (ev, audit)" in errors[2]
    assert "never from route.field.default" in errors[2]
    assert "and it has no Kafka key" in errors[5]


def _debezium_events():
    """The JsonConverter's own Debezium change events (testkit/connect_records.py), routed by their row's enum
    column `size` (small, medium, large or null)."""
    from testkit.connect_records import records

    return records("debezium")


@pytest.mark.parametrize("default", [None, "medium"])
def test_debezium_deletes_go_to_the_table_their_before_image_names(default):
    events = _debezium_events()
    msgs = [_Msg("t", i, e.value, e.key) for i, e in enumerate(events)]
    kept, errors = _pick_all(msgs, ("small", "medium"), default, "size", schemas=True, debezium=True)
    sizes = {}
    for i, e in enumerate(events):
        payload = json.loads(e.value)["payload"] if e.value is not None else None
        row = payload and (payload["after"] or payload["before"])
        sizes[i] = row and row["size"]
    [delete] = [i for i, e in enumerate(events) if e.op == "d"]
    [tombstone] = [i for i, e in enumerate(events) if e.value is None]
    [truncate] = [i for i, e in enumerate(events) if e.op == "t"]
    assert sizes[delete] == "small" and delete in kept["small"], "the delete's before-image names small"
    assert tombstone not in kept["small"] + kept["medium"] and truncate not in kept["small"] + kept["medium"]
    assert "the record is a tombstone, and its Kafka key has no such field" in errors[tombstone]
    assert "a Debezium truncate (op=t), which carries no row and no key" in errors[truncate]
    others = {i: s for i, s in sizes.items() if i not in (tombstone, truncate)}
    assert kept["small"] == sorted(i for i, s in others.items() if s == "small")
    named_none = sorted(i for i, s in others.items() if s not in ("small", "medium"))  # large, or null
    assert named_none, "the events have rows naming no table"
    if default is None:
        assert kept["medium"] == sorted(i for i, s in others.items() if s == "medium")
        assert sorted(errors) == sorted([tombstone, truncate, *named_none])
    else:
        assert kept["medium"] == sorted(i for i, s in others.items() if s != "small")
        assert sorted(errors) == sorted([tombstone, truncate])


def test_a_debezium_delete_whose_before_image_lacks_the_field_takes_its_kafka_keys():
    """REPLICA IDENTITY DEFAULT: the before-image of a delete holds the key columns, the others null."""
    def delete(before: dict) -> bytes:
        return json.dumps({"before": before, "after": None, "op": "d", "source": {}}).encode()

    msgs = [_Msg("t", 0, delete({"id": 1, "kind": None}), json.dumps({"id": 1, "kind": "audit"}).encode()),
            _Msg("t", 1, delete({"id": 1, "kind": None}), json.dumps({"id": 1}).encode()),
            _Msg("t", 2, delete({"id": 1, "kind": "zzz"}), json.dumps({"id": 1}).encode())]
    kept, errors = _pick_all(msgs, ("ev", "audit"), "ev", "kind", debezium=True)
    assert kept == {"ev": [2], "audit": [0]}, "a delete that names an unknown table goes where its row went"
    assert list(errors) == [1] and "a Debezium delete (op=d) whose before-image lacks it, and its Kafka key has " \
                                   "no such field" in errors[1]
