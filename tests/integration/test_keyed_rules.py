"""The keyed-write rules (docs/ARCHITECTURE.md, "The keyed-write rules") on a real broker, real Delta tables and
Spark: generated keyed streams are produced with explicit partitions and record timestamps, sunk with
`write.mode=upsert` until every offset is committed, and the table read back with Spark must equal the reference fold
of testkit/keyed_fold.py, which is written from the rules table alone; the records the fold calls record errors must be
exactly the dead letters.

- a hypothesis property over keyed streams: primitive Kafka keys (`3` with values carrying `id`) and object keys,
  composite and empty `record.key.fields`, partial documents, explicit nulls, tombstones with and without an order
  field, a top-level and a nested order field whose values arrive out of order, changes without an order value or a
  key, keys that move partition, two topics into one table, `upsert.missing.fields` keep and null;
- one such stream with the worker and the coordinator SIGKILLed mid-stream (processes of their own);
- Debezium PostgreSQL (JSON converter with schemas: the fixtures' shape, a TOASTed text and bytea column) and MySQL
  (schemaless) streams: snapshot reads, updates, deletes followed by tombstones, the unavailable-value placeholder,
  and one key's events delivered out of source order across two partitions;
- a table keyed on and partitioned by a timestamp column, sunk by a process whose host time zone (and JVM's) is
  America/New_York, across daylight-saving changes: a second upsert of a key updates its row.

The fold is given the txns the sink committed (each commit's offsets, read from the table's log): the rules make
the table depend on txn boundaries in three cases (keyed_fold.boundary_dependent), and a test that ignored them
would fail on correct behaviour. Excluded from generation: partitions' timestamps that go backwards (the rules
exclude them) and streams where, within one txn, "newer" is no order (keyed_fold.order_dependent: a tombstone
without an order value in a cycle with changes that have one), where no table can be expected. Both are counted in
the report.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from connector.jvm.spark import DRIVER_JAVA_OPTIONS
from testkit import DRAIN_S, LakesinkProcess, chaos_config, wait_until
from testkit.keyed_fold import (
    MISSING_KEY,
    UNAVAILABLE,
    UNAVAILABLE_BYTES_B64,
    Outcome,
    Produced,
    Rules,
    boundary_dependent,
    fold,
    order_dependent,
    source_position,
)
from testkit.keyed_rules import (
    InProcess,
    check_letters,
    committed,
    compare,
    ends_of,
    expected,
    make_topics,
    produce,
    reached,
    settings_for,
    sink_debezium,
    table_rows,
    user_columns,
)

pytestmark = pytest.mark.integration

MAX_EXAMPLES = int(os.environ.get("LAKESINK_KEYED_EXAMPLES", "3"))
BASE_TS = (int(time.time()) - 3600) * 1000
"""Record timestamps start an hour ago (CreateTime, kept by the broker)."""
MERGE_JAVA_OPTIONS = DRIVER_JAVA_OPTIONS
"""A coordinator process of these tests runs a few MERGEs and exits: the quick JIT, one GC thread. With two tests
side by side on two cores the full JIT's compiling cost more than it saved (the kills and New York tests: 120 s and
100 s against 86 s and 80 s)."""
REJECTED: list[str] = []
"""Generated streams left out: a txn's fold would depend on the order its records are folded in
(keyed_fold.order_dependent)."""
TIMINGS: list[str] = []
BOUNDARY_DEPENDENT: list[int] = []
"""Sunk streams whose table depends on where txns begin and end (keyed_fold.boundary_dependent): checked against
the fold of the txns the sink committed."""


# --- producing and sinking ---------------------------------------------------------------------------------------


# --- generated keyed streams -------------------------------------------------------------------------------------

KEY_IDS = range(6)
TENANTS = ("a", "b")
NAMES = ("ann", "bob", "cy", None)
NOTES = ("x", "y", "z")


@dataclass
class Plan:
    rules: Rules
    topics: int
    partitions: int
    records: list[Produced]
    """With placeholder topic names `t-a`, `t-b` (sorted like the real ones)."""
    chunk: int
    """Records produced before the first drain; the rest after it."""
    rejected: int = 0

    def on(self, topics: list[str]) -> list[Produced]:
        index = {f"t-{chr(ord('a') + i)}": name for i, name in enumerate(topics)}
        return [Produced(index[r.topic], r.partition, r.offset, r.timestamp, r.key, r.value) for r in self.records]

    def __repr__(self) -> str:
        lines = [f"Plan({self.rules}, topics={self.topics}, partitions={self.partitions}, chunk={self.chunk}"]
        lines += [f"  {r!r}" for r in self.records]
        return "\n".join(lines) + ")"


def _key_bytes(draw, rules: Rules, ident: dict, tombstone: bool) -> bytes | None:
    """The Kafka key of a record of key `ident`: an object, or a primitive where the rules map one."""
    if rules.key_fields == ("id",):
        form = draw(st.sampled_from(["object", "primitive", "primitive"] + ([] if tombstone else ["null"])))
    else:
        form = draw(st.sampled_from(["object"] * 5 + ["primitive"]))  # a primitive: MissingKey for these
    if form == "null":
        return None
    if form == "primitive":
        return json.dumps(ident["id"]).encode()
    return json.dumps(ident).encode()


@st.composite
def plans(draw, min_records: int = 20, max_records: int = 60) -> Plan:
    key_fields = draw(st.sampled_from([("id",), ("id",), ("tenant", "id"), ()]))
    order_field = draw(st.sampled_from([None, "v", "meta.version"]))
    rules = Rules(key_fields=key_fields, order_field=order_field, delete_enabled=True,
                  missing_fields=draw(st.sampled_from(["keep", "null"])),
                  soft_delete=True if order_field else draw(st.booleans()))
    topics, partitions = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    clocks = {(t, p): BASE_TS for t in range(topics) for p in range(partitions)}
    offsets = {tp: 0 for tp in clocks}
    sequence = 0
    records = []
    for _ in range(draw(st.integers(min_records, max_records))):
        t, p = draw(st.integers(0, topics - 1)), draw(st.integers(0, partitions - 1))
        clocks[(t, p)] += draw(st.sampled_from([0, 1000, 1000, 2000, 5000]))  # never backwards
        ident = {"id": draw(st.sampled_from(KEY_IDS))}
        if "tenant" in key_fields:
            ident = {"tenant": draw(st.sampled_from(TENANTS)), **ident}
        kind = draw(st.sampled_from(["upsert"] * 7 + ["tombstone"] * 2 + ["bad"]))
        if kind == "bad":
            kind = "no-order" if order_field and draw(st.booleans()) else "no-key"
        sequence += 1
        value = None
        if kind != "tombstone":
            value = {}
            if kind == "no-key":
                pass  # neither the value nor the Kafka key has the key fields: MissingKey
            elif draw(st.integers(0, 9)) < (8 if key_fields else 5):
                value.update(ident)  # else the key fields come from the Kafka key
            if order_field:
                order = sequence + draw(st.integers(-4, 4))  # mostly rising, now and then out of order
                slot = "v" if order_field == "v" else "meta"
                if kind == "no-order":
                    if draw(st.booleans()):
                        value[slot] = None  # null; else absent: MissingOrderValue either way
                elif slot == "v":
                    value["v"] = order
                else:
                    value["meta"] = {"version": order, "src": draw(st.sampled_from(["app", "job"]))}
            for name in draw(st.lists(st.sampled_from(["name", "amount", "note"]), unique=True, max_size=3)):
                value[name] = {"name": draw(st.sampled_from(NAMES)),
                               "amount": draw(st.one_of(st.none(), st.integers(-50, 50))),
                               "note": draw(st.sampled_from(NOTES))}[name]
        if kind == "no-key":
            key = None if draw(st.booleans()) else (json.dumps({"other": 1}) if key_fields else "7").encode()
        else:
            key = _key_bytes(draw, rules, ident, tombstone=kind == "tombstone")
            if key is None and "id" not in value:
                value.update(ident)
        records.append(Produced(f"t-{chr(ord('a') + t)}", p, offsets[(t, p)], clocks[(t, p)], key,
                                None if value is None else json.dumps(value).encode()))
        offsets[(t, p)] += 1
    chunk = draw(st.integers(len(records) // 3, 2 * len(records) // 3))
    plan = Plan(rules, topics, partitions, records, chunk)
    if order_dependent(records, rules, seed=len(records)) is not None:
        REJECTED.append(repr(plan))
        assume(False)
    return plan


def _settings(max_examples: int):
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None, print_blob=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


def key_names(rules: Rules) -> tuple[str, ...]:
    return rules.key_fields or ("id",)


def run_plan(plan: Plan, spark, admin, bootstrap: str, base: Path) -> tuple[list[Produced], Outcome, dict]:
    topics = make_topics(admin, plan.topics, plan.partitions)
    dlq = make_topics(admin, 1, 1)[0]
    records = plan.on(topics)
    table = base / f"keyed_{uuid.uuid4().hex[:8]}"
    name = f"keyed-{uuid.uuid4().hex[:8]}"
    settings_ = settings_for(plan.rules, name, bootstrap, topics, table, dlq)
    first, rest = records[:plan.chunk], records[plan.chunk:]
    marks = [time.monotonic()]
    with InProcess(spark, settings_) as sink:
        produce(bootstrap, first)
        sink.drain(table, ends_of(first), "the first chunk committed")
        marks.append(time.monotonic())
        produce(bootstrap, rest)
        sink.drain(table, ends_of(records), "every offset committed")
        marks.append(time.monotonic())
    marks.append(time.monotonic())
    TIMINGS.append(" / ".join(f"{b - a:.1f}" for a, b in zip(marks, marks[1:])))
    want = expected(records, plan.rules, table, name) if table.exists() else fold(records, plan.rules)
    if boundary_dependent(records, plan.rules, seed=len(records)) is not None:
        BOUNDARY_DEPENDENT.append(len(records))
    got = table_rows(spark, table, key_names(plan.rules), plan.rules.soft_delete) if table.exists() else {}
    compare(got, want, records, plan.rules)
    check_letters(bootstrap, dlq, want)
    return records, want, got


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return tmp_path_factory.mktemp("keyed-tables")


def test_generated_keyed_streams_end_as_the_fold_of_the_rules(spark, admin, kafka_bootstrap, tables, report):
    runs: list[str] = []

    @_settings(MAX_EXAMPLES)
    @given(plan=plans())
    def run(plan):
        started = time.monotonic()
        records, want, _ = run_plan(plan, spark, admin, kafka_bootstrap, tables)
        runs.append(f"{len(records)} records, {len(want.rows)} live keys, {len(want.errors)} record errors, "
                    f"{plan.rules.key_fields or '(kafka key)'} order={plan.rules.order_field} "
                    f"missing={plan.rules.missing_fields} soft={plan.rules.soft_delete} topics={plan.topics} "
                    f"partitions={plan.partitions}: {time.monotonic() - started:.0f} s "
                    f"(first chunk / rest / stop: {TIMINGS[-1] if TIMINGS else '?'} s)")

    REJECTED.clear()
    BOUNDARY_DEPENDENT.clear()
    run()
    report(f"keyed rules property: {len(runs)} streams sunk ({'; '.join(runs)}); {len(BOUNDARY_DEPENDENT)} of them "
           f"depend on txn boundaries; {len(REJECTED)} generated streams left out (a txn's fold depends on its "
           f"records' order)")


# --- with SIGKILLs -----------------------------------------------------------------------------------------------

def test_a_keyed_stream_with_kills_ends_as_the_fold(spark, admin, kafka_bootstrap, tmp_path_factory, report):
    """The worker and the coordinator (processes of their own) are SIGKILLed while the stream is sunk; the table
    still equals the fold: no change lost, none applied twice, none applied out of its position."""

    @_settings(1)
    @given(plan=plans(min_records=90, max_records=120).filter(
        lambda p: p.rules.order_field is not None and p.topics == 2))
    def run(plan):
        base = tmp_path_factory.mktemp("keyed-kills")
        topics = make_topics(admin, plan.topics, plan.partitions)
        dlq = make_topics(admin, 1, 1)[0]
        records = plan.on(topics)
        name = f"keyed-kill-{uuid.uuid4().hex[:6]}"
        table = base / "tables" / "events"
        props = settings_for(plan.rules, name, kafka_bootstrap, topics, table, dlq)
        for k in ("name", "kafka.bootstrap.servers", "kafka.topic.names", "target.base.path", "target.table.name",
                  "transaction.interval.ms", "coordinator.writestatus.timeout.ms", "consumer.session.timeout.ms"):
            props.pop(k)
        config = chaos_config(base, kafka_bootstrap, ",".join(topics), name=name,
                              **{**props, "spark.driver.extraJavaOptions": MERGE_JAVA_OPTIONS})
        procs: list[LakesinkProcess] = []

        def start(role: str) -> LakesinkProcess:
            p = LakesinkProcess(role, config, base / f"{len(procs):02d}-{role}.log", env={"LAKESINK_FAULT": ""})
            p.role = role
            procs.append(p)
            return p

        def alive(*ps):
            for p in ps:
                assert p.alive(), f"{p.role} exited ({p.proc.returncode}):\n{p.tail()}"

        try:
            third = len(records) // 3
            produce(kafka_bootstrap, records[:third])
            worker, coordinator = start("worker"), start("coordinator")
            wait_until(lambda: alive(worker, coordinator) or committed(table, name), DRAIN_S, "a first commit")
            produce(kafka_bootstrap, records[third:2 * third])
            worker.kill()  # SIGKILL of the process group, mid-stream
            worker = start("worker")
            before = committed(table, name)
            wait_until(lambda: alive(worker, coordinator) or committed(table, name) != before, DRAIN_S,
                       "a commit after the worker's restart")
            produce(kafka_bootstrap, records[2 * third:])
            time.sleep(0.5)  # the coordinator dies with records in flight (a moment, not a wait for a condition)
            coordinator.kill()
            coordinator = start("coordinator")
            wait_until(lambda: alive(worker, coordinator) or reached(table, name, ends_of(records)), DRAIN_S * 2,
                       f"offsets {ends_of(records)} committed")
        finally:
            for p in procs:
                p.__exit__(None, None, None)
        want = expected(records, plan.rules, table, name)
        got = table_rows(spark, table, key_names(plan.rules), plan.rules.soft_delete)
        compare(got, want, records, plan.rules)
        check_letters(kafka_bootstrap, dlq, want)
        report(f"keyed rules with a worker and a coordinator SIGKILL: {len(records)} records, {len(want.rows)} live "
               f"keys, {len(want.errors)} dead letters, table equals the fold")

    run()


# --- the reference fold itself, on the rules table's own examples (no broker) ------------------------------------

def _r(partition: int, offset: int, ts: int, key, value, topic: str = "t") -> Produced:
    return Produced(topic, partition, offset, ts, None if key is None else json.dumps(key).encode(),
                    None if value is None else json.dumps(value).encode())


def test_the_fold_follows_the_rules_table_examples():
    by_id = Rules(key_fields=("id",))
    # a primitive key maps to the one key field, also for a tombstone; a value's key field wins over the key
    out = fold([_r(0, 0, 1, 123, {"id": 123, "email": "x"}), _r(0, 1, 2, 7, {"email": "y"}), _r(0, 2, 3, 123, None)],
               by_id)
    assert out.rows == {(("id", 7),): {"id": 7, "email": "y"}} and not out.errors
    # a primitive key with a composite key, a key found nowhere, a primitive key with no record.key.fields
    out = fold([_r(0, 0, 1, 5, None), _r(0, 1, 1, None, {"x": 1})], Rules(key_fields=("tenant", "id")))
    assert {c: set(k) for c, k in out.errors.items()} == {("t", 0, 0): {MISSING_KEY}, ("t", 0, 1): {MISSING_KEY}}
    assert set(fold([_r(0, 0, 1, 5, {"id": 5})], Rules()).errors) == {("t", 0, 0)}
    # keep: a change sets what it carries; null: the record is the whole row
    stream = [_r(0, 0, 1, 1, {"id": 1, "a": 1, "b": 2}), _r(0, 1, 2, 1, {"id": 1, "b": None, "c": 3})]
    assert fold(stream, by_id).rows == {(("id", 1),): {"id": 1, "a": 1, "b": None, "c": 3}}
    assert fold(stream, Rules(key_fields=("id",), missing_fields="null")).rows == \
        {(("id", 1),): {"id": 1, "b": None, "c": 3}}
    # no order value: MissingOrderValue; a nested order field
    ordered = Rules(key_fields=("id",), order_field="meta.version", soft_delete=True)
    out = fold([_r(0, 0, 1, 1, {"id": 1, "meta": {"version": 2}, "a": "new"}),
                _r(1, 0, 5, 1, {"id": 1, "meta": {"version": 1}, "a": "old"}),
                _r(1, 1, 6, 1, {"id": 1, "a": "none"}), _r(1, 2, 6, 1, {"id": 1, "meta": None})], ordered)
    assert out.rows[(("id", 1),)]["a"] == "new" and set(out.errors) == {("t", 1, 1), ("t", 1, 2)}
    # a tombstone deletes the row its partition wrote before it, never a row a newer change wrote
    out = fold([_r(0, 0, 1, 1, {"id": 1, "meta": {"version": 5}}), _r(0, 1, 2, 1, None),
                _r(0, 2, 3, 2, {"id": 2, "meta": {"version": 5}}), _r(1, 0, 1, 2, {"id": 2, "meta": {"version": 9}}),
                _r(0, 3, 4, 2, None)], ordered)
    assert list(out.rows) == [(("id", 2),)] and out.rows[(("id", 2),)]["meta"] == {"version": 9}
    # between topic-partitions: the record timestamp, then the topic, then the partition
    out = fold([_r(1, 0, 10, 1, {"id": 1, "w": "p1"}), _r(0, 0, 11, 1, {"id": 1, "w": "p0-later"}),
                _r(1, 1, 20, 2, {"id": 2, "w": "topic t"}), _r(0, 0, 20, 2, {"id": 2, "w": "topic s"}, topic="s"),
                _r(1, 2, 30, 3, {"id": 3, "w": "partition 1"}), _r(0, 1, 30, 3, {"id": 3, "w": "partition 0"})],
               by_id)
    assert {k[0][1]: v["w"] for k, v in out.rows.items()} == {1: "p0-later", 2: "topic t", 3: "partition 1"}
    # Debezium source positions: MySQL's binlog file sequence, then pos and row as numbers
    assert source_position({"connector": "mysql", "file": "mysql-bin.000010", "pos": 4, "row": 0}) > \
        source_position({"connector": "mysql", "file": "mysql-bin.000009", "pos": 99999, "row": 3})
    assert source_position({"connector": "mysql", "file": "mysql-bin.000003", "pos": 10230, "row": 0}) > \
        source_position({"connector": "mysql", "file": "mysql-bin.000003", "pos": 9850, "row": 0})


# --- Debezium ----------------------------------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
PG_COLUMNS = (("id", "int32", False), ("first_name", "string", False), ("last_name", "string", False),
              ("email", "string", False), ("notes", "string", True), ("photo", "bytes", True))
"""inventory.customers with a TOASTable text and bytea column (REPLICA IDENTITY DEFAULT)."""


def _pg_schemas() -> tuple[dict, dict]:
    """The key and value schemas of the fixture's connector (Debezium 2.5 PostgreSQL, JSON converter with
    schemas), the row struct extended by `notes` and `photo`."""
    first = json.loads((FIXTURES / "postgres-customers-with-schema.jsonl").read_text().splitlines()[0])
    key_schema, value_schema = first["key"]["schema"], json.loads(json.dumps(first["value"]["schema"]))
    row = [{"type": t, "optional": optional, **({"default": 0} if name == "id" else {}), "field": name}
           for name, t, optional in PG_COLUMNS]
    for f in value_schema["fields"]:
        if f["field"] in ("before", "after"):
            f["fields"] = row
    return key_schema, value_schema


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()


def _pg_event(op: str, key: int, row: dict | None, lsn: int, previous_lsn: int | None, tx: int, ts_ms: int,
              snapshot: str = "false") -> dict:
    source = {"version": "2.5.4.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": ts_ms,
              "snapshot": snapshot, "db": "postgres",
              "sequence": json.dumps([None if previous_lsn is None else str(previous_lsn), str(lsn)]),
              "schema": "inventory", "table": "customers", "txId": tx, "lsn": lsn, "xmin": None}
    before, after = ({"id": key}, None) if op == "d" else (None, row)
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms + 101,
            "transaction": None}


def _debezium_records(topic: str, events: list[tuple[int, int, dict, dict | None]], wrap) -> list[Produced]:
    """(partition, timestamp offset in s, key, event or None) -> records with planned offsets."""
    offsets: dict[int, int] = {}
    out = []
    for partition, second, key, event in events:
        k, v = wrap(key, event)
        out.append(Produced(topic, partition, offsets.get(partition, 0), BASE_TS + 1000 * second,
                            json.dumps(k).encode(), None if v is None else json.dumps(v).encode()))
        offsets[partition] = offsets.get(partition, 0) + 1
    return out


def _customer(key: int, first: str, last: str, email: str, notes: str, photo: bytes) -> dict:
    return {"id": key, "first_name": first, "last_name": last, "email": email, "notes": notes, "photo": _b64(photo)}


def postgres_stream(topic: str) -> tuple[list[Produced], int]:
    """A snapshot of four customers, updates with TOAST placeholders (in the txn of the row's snapshot and in a
    later one), a delete and its tombstone, an insert, and two updates of 1004 delivered against source order: the
    newer (lsn) on partition 0 with an earlier timestamp. Returns the records and the size of the first chunk."""
    key_schema, value_schema = _pg_schemas()
    L0, ts = 34054016, 1700000000000
    toast = {"notes": UNAVAILABLE, "photo": UNAVAILABLE_BYTES_B64}
    sally = _customer(1001, "Sally", "Thomas", "sally.thomas@acme.com", "N-1001 " * 300, b"P1001")
    events = [
        (0, 0, 1001, _pg_event("r", 1001, sally, L0, None, 780, ts, "first")),
        (1, 0, 1002, _pg_event("r", 1002, _customer(1002, "George", "Bailey", "gbailey@foobar.com", "N-1002",
                                                    b"P1002"), L0, None, 780, ts, "true")),
        (0, 1, 1003, _pg_event("r", 1003, _customer(1003, "Edward", "Walker", "ed@walker.com", "N-1003 " * 300,
                                                    b"P1003"), L0, None, 780, ts, "true")),
        (1, 1, 1004, _pg_event("r", 1004, _customer(1004, "Anne", "Kretchmar", "annek@noanswer.org", "N-1004",
                                                    b"P1004"), L0, None, 780, ts, "last")),
        (0, 2, 1001, _pg_event("u", 1001, {**sally, "email": "sally@example.org", **toast}, 34056104, L0, 781,
                               ts + 60_000)),
        # the second chunk, in a later txn
        (1, 3, 1003, _pg_event("u", 1003, {"id": 1003, "first_name": "Edward", "last_name": "Walker-Smith",
                                           "email": "ed@walker.com", **toast}, 34056200, 34056104, 782, ts + 90_000)),
        (1, 4, 1002, _pg_event("d", 1002, None, 34058240, 34056200, 783, ts + 120_000)),
        (1, 4, 1002, None),
        (0, 5, 1005, _pg_event("c", 1005, _customer(1005, "Jo", "Doe", "jo@doe.org", "N-1005", b"P1005"), 34060392,
                               34058240, 784, ts + 180_000)),
        (0, 6, 1004, _pg_event("u", 1004, {**_customer(1004, "Anne", "K2", "annek@noanswer.org", "N-1004", b""),
                                           "photo": UNAVAILABLE_BYTES_B64}, 34064000, 34062000, 786, ts + 240_000)),
        (1, 7, 1004, _pg_event("u", 1004, _customer(1004, "Anne", "K1", "k1@noanswer.org", "N-1004", b"P1004"),
                               34062000, 34060392, 785, ts + 230_000)),
        (0, 8, 1005, _pg_event("u", 1005, _customer(1005, "Jo", "Doe", "jo@doe.org", "N-1005b", b"P1005b"), 34066000,
                               34064000, 787, ts + 300_000)),
    ]

    def wrap(key, event):
        value = None if event is None else {"schema": value_schema, "payload": event}
        return {"schema": key_schema, "payload": {"id": key}}, value

    return _debezium_records(topic, events, wrap), 5


def _mysql_event(op: str, row: dict, file: int, pos: int, row_no: int, ts_ms: int, snapshot: str = "false",
                 gtid: str | None = None) -> dict:
    source = {"version": "2.5.4.Final", "connector": "mysql", "name": "mysql-server-1", "ts_ms": ts_ms,
              "snapshot": snapshot, "db": "inventory", "sequence": None, "table": "products", "server_id": 223344,
              "gtid": gtid, "file": f"mysql-bin.{file:06d}", "pos": pos, "row": row_no, "thread": 7, "query": None}
    return {"before": row if op == "d" else None, "after": None if op == "d" else row, "source": source, "op": op,
            "ts_ms": ts_ms + 236, "transaction": None}


def mysql_stream(topic: str) -> tuple[list[Produced], int]:
    """A snapshot of four products, then updates whose source positions contradict Kafka order across the two
    partitions: binlog positions that sort differently as text (9850 < 10230), a rotated binlog file (000004 after
    000003 whatever the pos), rows of one event (row 10 after row 9, but of one binlog second: positions of one
    second do not decide, docs/ARCHITECTURE.md "MySQL positions across a failover", so Kafka order does); a delete
    with its tombstone and an insert."""
    ts, gtid = 1700000000000, "3E11FA47-71CA-11E1-9E33-C80AA9429562:{}"

    def product(key, name, description, quantity):
        return {"id": key, "name": name, "description": description, "quantity": quantity}

    scooter = product(1, "scooter", "Small 2-wheel scooter", 10)
    events = [
        (0, 0, 1, _mysql_event("r", scooter, 3, 154, 0, ts, "first")),
        (1, 0, 2, _mysql_event("r", product(2, "car battery", "12V car battery", 4), 3, 154, 0, ts, "true")),
        (0, 1, 3, _mysql_event("r", product(3, "drill bits", "12-pack of drill bits", 7), 3, 154, 0, ts, "true")),
        (1, 1, 4, _mysql_event("r", product(4, "hammer", "12oz carpenter's hammer", 3), 3, 154, 0, ts, "last")),
        (1, 2, 1, _mysql_event("u", {**scooter, "quantity": 8}, 3, 10230, 0, ts + 2000, gtid=gtid.format(24))),
        (0, 3, 1, _mysql_event("u", {**scooter, "quantity": 9}, 3, 9850, 0, ts + 1000, gtid=gtid.format(23))),
        # the second chunk
        (1, 4, 2, _mysql_event("d", product(2, "car battery", "12V car battery", 4), 3, 11000, 0, ts + 3000)),
        (1, 4, 2, None),
        (0, 5, 3, _mysql_event("u", product(3, "drill bits", "drill bits v2", 7), 4, 154, 0, ts + 5000)),
        (1, 6, 3, _mysql_event("u", product(3, "drill bits", "stale", 7), 3, 20000, 0, ts + 4000)),
        (1, 6, 4, _mysql_event("u", product(4, "hammer", "12oz carpenter's hammer", 5), 4, 500, 10, ts + 6000)),
        (0, 7, 4, _mysql_event("u", product(4, "hammer", "12oz carpenter's hammer", 6), 4, 500, 9, ts + 6000)),
        (0, 8, 5, _mysql_event("c", product(5, "rocks", "box of assorted rocks", 30), 4, 700, 0, ts + 7000)),
    ]
    return _debezium_records(topic, events, lambda key, event: ({"id": key}, event)), 6


def _positions_sort_like_the_source(frame, want: Outcome) -> None:
    """`_cdc_source_position` is a string that sorts in source position order: compared between the live rows, each
    holding the position of the change that wrote it."""
    assert "_cdc_source_position" in frame.columns, frame.columns
    held = {(("id", r["id"]),): r["_cdc_source_position"] for r in frame.collect()}
    keys = sorted(want.positions, key=lambda k: want.positions[k].order)
    for a, b in zip(keys, keys[1:]):
        pa_, pb = want.positions[a].order, want.positions[b].order
        sa, sb = held.get(a), held.get(b)
        assert isinstance(sa, str) and isinstance(sb, str), (a, sa, b, sb)
        assert (sa < sb) if pa_ < pb else (sa == sb), \
            f"_cdc_source_position does not sort like the source: {a} at {pa_} holds {sa!r}, {b} at {pb} holds {sb!r}"


def test_debezium_postgresql_stream(spark, admin, kafka_bootstrap, tables):
    rules = Rules(envelope="debezium", soft_delete=True, missing_fields="null", bytes_fields=frozenset({"photo"}))
    records, want, table = sink_debezium(spark, admin, kafka_bootstrap, tables, rules, postgres_stream,
                                          {"value.converter.schemas.enable": "true",
                                           "key.converter.schemas.enable": "true"})
    frame = spark.read.format("delta").load(str(table))
    assert not want.errors
    live = {k[0][1]: v for k, v in want.rows.items()}
    # the oracle agrees with what Debezium's stream means before it judges the table
    assert sorted(live) == [1001, 1003, 1004, 1005]
    assert live[1001]["email"] == "sally@example.org" and live[1001]["notes"] == "N-1001 " * 300
    assert live[1003]["last_name"] == "Walker-Smith" and live[1003]["photo"] == _b64(b"P1003")
    assert live[1004]["last_name"] == "K2" and live[1004]["photo"] == _b64(b"P1004")
    assert live[1005]["notes"] == "N-1005b"
    got = {}
    for row in frame.collect():
        d = row.asDict()
        if d.get("_deleted"):
            continue
        d["photo"] = None if d.get("photo") is None else _b64(bytes(d["photo"]))
        assert (("id", d["id"]),) not in got, f"key {d['id']} twice"
        got[(("id", d["id"]),)] = {n: d[n] for n in user_columns(d)}
    compare(got, want, records, rules)
    _positions_sort_like_the_source(frame.where("NOT _deleted"), want)


def test_debezium_mysql_stream(spark, admin, kafka_bootstrap, tables):
    rules = Rules(key_fields=("id",), envelope="debezium")
    records, want, table = sink_debezium(spark, admin, kafka_bootstrap, tables, rules, mysql_stream, {})
    assert not want.errors
    live = {k[0][1]: v for k, v in want.rows.items()}
    assert sorted(live) == [1, 3, 4, 5]
    assert (live[1]["quantity"], live[3]["description"], live[4]["quantity"]) == (8, "drill bits v2", 6)
    compare(table_rows(spark, table, ("id",), False), want, records, rules)
    _positions_sort_like_the_source(spark.read.format("delta").load(str(table)), want)


# --- a host time zone other than UTC -----------------------------------------------------------------------------

ZONE = "America/New_York"
INSTANTS = ("2024-03-10T06:59:59.123456Z",  # 01:59:59 EST, just before the spring-forward gap
            "2024-03-10T07:30:00Z",  # 03:30 EDT, just after it
            "2024-11-03T05:30:00Z",  # 01:30 EDT ...
            "2024-11-03T06:30:00Z")  # ... and 01:30 EST: one local wall time, two instants
LOCAL = ("2024-03-10T02:30:00", "2024-11-03T01:30:00")  # zone-less: a wall time New York skips, one it repeats


def _utc_text(micros: int) -> str:
    import datetime as dt

    t = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{t.microsecond:06d}" if t.microsecond else "") + "Z"


def time_zone_stream(topic: str) -> list[list[Produced]]:
    """Three chunks over keys (device, ts): inserts; partial updates of every key (and one new key); tombstones of
    two keys (their timestamp from the Kafka key) and one more update."""
    offsets: dict[int, int] = {}
    second = 0

    def rec(partition, key, value):
        nonlocal second
        second += 1
        r = Produced(topic, partition, offsets.get(partition, 0), BASE_TS + 1000 * second, json.dumps(key).encode(),
                     None if value is None else json.dumps(value).encode())
        offsets[partition] = offsets.get(partition, 0) + 1
        return r

    keys = [{"device": d, "ts": t} for d in ("d1", "d2") for t in INSTANTS]
    first = [rec(i % 2, k, {**k, "reading": 1, "local": LOCAL[i % 2], "note": f"n{i}"}) for i, k in enumerate(keys)]
    extra = {"device": "d3", "ts": INSTANTS[3]}
    second_chunk = [rec((i + 1) % 2, k, {**k, "reading": 2}) for i, k in enumerate(keys)] + \
        [rec(0, extra, {**extra, "reading": 2, "local": LOCAL[1]})]
    third = [rec(0, keys[2], None), rec(1, keys[3], None), rec(1, keys[6], {**keys[6], "reading": 3})]
    return [first, second_chunk, third]


def test_keyed_rules_on_a_timestamp_key_in_a_new_york_host_time_zone(spark, admin, kafka_bootstrap,
                                                                     tmp_path_factory, report):
    """The sink (`lakesink run`, its Python and its JVM) runs with TZ=America/New_York; the table is keyed on
    (device, ts) and partitioned by the timestamp ts, so each MERGE prunes on timestamp literals. After every chunk
    the table equals the fold: an upsert of a key updates its row (never a second row), at instants around both
    daylight-saving changes, with microseconds, and zone-less times read back as written."""
    from pyspark.sql import functions as F

    base = tmp_path_factory.mktemp("keyed-tz")
    topic = make_topics(admin, 1, 2)[0]
    dlq = make_topics(admin, 1, 1)[0]
    chunks = time_zone_stream(topic)
    rules = Rules(key_fields=("device", "ts"), soft_delete=False)
    name = f"keyed-tz-{uuid.uuid4().hex[:6]}"
    table = base / "tables" / "events"
    props = settings_for(rules, name, kafka_bootstrap, [topic], table, dlq)
    for k in ("name", "kafka.bootstrap.servers", "kafka.topic.names", "target.base.path", "target.table.name",
              "transaction.interval.ms", "coordinator.writestatus.timeout.ms", "consumer.session.timeout.ms"):
        props.pop(k)
    props["partition.field.name"] = "ts"
    props["spark.driver.extraJavaOptions"] = f"{MERGE_JAVA_OPTIONS} -Duser.timezone={ZONE}"
    config = chaos_config(base, kafka_bootstrap, topic, name=name, **props)
    records: list[Produced] = []
    with LakesinkProcess("run", config, base / "run.log", env={"TZ": ZONE, "LAKESINK_FAULT": ""}) as proc:
        for i, chunk in enumerate(chunks):
            produce(kafka_bootstrap, chunk)
            records += chunk

            def done():
                assert proc.alive(), f"lakesink run exited ({proc.proc.returncode}):\n{proc.tail()}"
                return reached(table, name, ends_of(records))

            wait_until(done, DRAIN_S, f"chunk {i + 1} committed ({proc.log_path})", interval_s=0.5)
            frame = spark.read.format("delta").load(str(table))
            assert [f.dataType.simpleString() for f in frame.schema if f.name in ("ts", "local")] == \
                ["timestamp", "timestamp_ntz"], frame.schema
            got = {}
            for row in frame.withColumn("ts_us", F.unix_micros("ts")).collect():
                d = row.asDict()
                d["ts"] = _utc_text(d.pop("ts_us"))
                d["local"] = None if d["local"] is None else d["local"].isoformat()
                key = (("device", d["device"]), ("ts", d["ts"]))
                assert key not in got, f"after chunk {i + 1}: key {key} twice in the table (the MERGE inserted it)"
                got[key] = {n: d[n] for n in user_columns(d)}
            want = expected(records, rules, table, name)
            compare(got, want, records, rules)
        assert proc.terminate() == 0, proc.tail()
    check_letters(kafka_bootstrap, dlq, want)
    report(f"keyed rules under TZ={ZONE}: {len(records)} records in 3 chunks, table keyed and partitioned on a "
           f"timestamp, {len(want.rows)} live rows, no duplicate key")
