"""The keyed-write rules in process: topics, `Produced` records produced with their partitions and timestamps,
an in-process sink, its committed offsets, the table read back, and the comparison with the fold of
testkit/keyed_fold.py and the dead letters it expects."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

from testkit import DRAIN_S, create_topic, wait_until
from testkit.keyed_fold import Outcome, Produced, Rules, decode, fold, order_dependent, txns_between


META_PREFIXES = ("_kafka_", "_cdc_")
SOFT_COLUMNS = ("_deleted", "_deleted_at")


def make_topics(admin, count: int, partitions: int) -> list[str]:
    """Topics whose names sort in the order of their index (the rules break timestamp ties by topic name)."""
    stem = f"keyed-{uuid.uuid4().hex[:10]}"
    names = [f"{stem}-{chr(ord('a') + i)}" for i in range(count)]
    for name in names:
        create_topic(admin, name, partitions)
    return names


def produce(bootstrap: str, records: list[Produced]) -> None:
    """Every record to its partition with its timestamp, in order; the broker's offsets must be the planned ones."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []
    offsets: list[tuple[str, int, int]] = []

    def delivered(err, msg):
        if err is not None:
            failures.append(str(err))
        else:
            offsets.append((msg.topic(), msg.partition(), msg.offset()))

    for r in records:
        producer.produce(r.topic, key=r.key, value=r.value, partition=r.partition, timestamp=r.timestamp,
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0, "records still queued after 30 s"
    assert not failures, failures
    planned = sorted(r.coordinates for r in records)
    assert sorted(offsets) == planned, f"the broker's offsets differ from the plan: {sorted(offsets)} vs {planned}"


def ends_of(records: list[Produced]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for r in records:
        out[(r.topic, r.partition)] = max(out.get((r.topic, r.partition), 0), r.offset + 1)
    return out


def committed(table: Path, name: str) -> dict[tuple[str, int], int]:
    """The table's committed offsets, as recovery reads them (a fresh snapshot every call)."""
    from connector.table.sink import DeltaTableSink

    if not (table / "_delta_log").exists():
        return {}
    return {tp: o or 0 for tp, o in DeltaTableSink(str(table), name).recover().offsets.items()}


def committed_history(table: Path, name: str) -> list[dict[tuple[str, int], int]]:
    """The offsets committed with each of the connector's commits, oldest first: each Delta commit's txn action
    names the connector's txn version, whose offsets recovery reads (DeltaTableSink.offsets_at)."""
    from connector.table.sink import DeltaTableSink

    versions, latest = [], -1
    for path in sorted((table / "_delta_log").glob("*.json")):
        latest = max(latest, int(path.stem))
        for line in path.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn.get("appId") == name:
                versions.append(txn["version"])
    reader = DeltaTableSink(str(table), name)
    return [reader.offsets_at(v, latest) for v in versions]


def expected(records: list[Produced], rules: Rules, table: Path, name: str) -> Outcome:
    """The fold of `records` cut into the txns the sink committed (see keyed_fold.boundary_dependent for why)."""
    return fold(records, rules, txns_between(records, committed_history(table, name)))


def reached(table: Path, name: str, ends: dict[tuple[str, int], int]) -> bool:
    got = committed(table, name)
    return all(got.get(tp, 0) >= end for tp, end in ends.items())


def settings_for(rules: Rules, name: str, bootstrap: str, topics: list[str], table: Path, dlq: str,
                 **extra) -> dict[str, str]:
    out = {"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": ",".join(topics),
           "control.topic.name": f"control-{name}", "target.base.path": str(table.parent),
           "target.table.name": table.name, "transaction.interval.ms": "1000",
           "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000",
           "schema.evolution": "true", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
           "errors.deadletterqueue.context.headers.enable": "true",
           "write.mode": "upsert", "record.key.fields": ",".join(rules.key_fields),
           "delete.enabled": str(rules.delete_enabled).lower(), "delete.mode": "soft" if rules.soft_delete else "hard",
           "upsert.missing.fields": rules.missing_fields, "value.envelope": rules.envelope}
    if rules.order_field:
        out["upsert.order.field"] = rules.order_field
    out.update({k: str(v) for k, v in extra.items()})
    return out


class InProcess:
    """A coordinator (on the session's Spark) and a worker in this process (test_table_features.Sink)."""

    def __init__(self, spark, settings: dict[str, str]):
        from connector.config import config_from_dict
        from testkit.pipeline import Sink

        self.cfg = config_from_dict(settings)
        self.sink = Sink(self.cfg, spark)

    def __enter__(self):
        self.sink.__enter__()
        return self

    def __exit__(self, *exc):
        self.sink.__exit__(*exc)

    def drain(self, table: Path, ends, what: str) -> None:
        def done():
            assert not self.sink.errors, {role: repr(e) for role, e in self.sink.errors.items()}
            return reached(table, self.cfg.name, ends)

        wait_until(done, DRAIN_S, what, interval_s=0.5)


def user_columns(names) -> list[str]:
    return [n for n in names if not n.startswith(META_PREFIXES) and n not in SOFT_COLUMNS]


def table_rows(spark, table: Path, key_names: tuple[str, ...], soft: bool) -> dict[tuple, dict]:
    """Live rows read with Spark: key -> user columns; a key twice is a failure."""
    frame = spark.read.format("delta").load(str(table))
    rows: dict[tuple, dict] = {}
    for r in frame.collect():
        d = r.asDict(recursive=True)
        if soft and d.get("_deleted"):
            continue
        key = tuple((n, d[n]) for n in key_names)
        assert key not in rows, f"key {key} twice in the table: {rows[key]} and {d}"
        rows[key] = {n: d[n] for n in user_columns(d)}
    return rows


def dead_letters(bootstrap: str, dlq: str, expected: int) -> dict[tuple[str, int, int], str]:
    """(topic, partition, offset) -> error class of every dead letter (a record dead-lettered again counts once)."""
    from testkit.kafka import read_topic

    letters = read_topic(bootstrap, dlq, expected, timeout_s=30)
    out = {}
    for m in letters:
        h = {k: v.decode() for k, v in m.headers() or []}
        out[(h["__connect.errors.topic"], int(h["__connect.errors.partition"]), int(h["__connect.errors.offset"]))] = \
            h.get("__connect.errors.exception.class.name", "")
    return out


def compare(got: dict[tuple, dict], want: Outcome, records: list[Produced], rules: Rules) -> None:
    """Table == fold, column by column (a column the table lacks, or the fold never set, is null); a failure names
    each differing key with the records of that key."""
    problems = []
    for key in sorted(set(got) | set(want.rows), key=repr):
        g, w = got.get(key), want.rows.get(key)
        if g is None or w is None or any(g.get(c) != w.get(c) for c in set(g) | set(w)):
            problems.append((key, w, g))
    if not problems:
        return
    lines = [f"{len(problems)} key(s) differ from the fold ({rules}):"]
    for key, w, g in problems[:8]:
        lines.append(f"  key {key}: expected {w}, got {g}; its records:")
        lines += [f"    txn {want.txn_of.get(r.coordinates)}: {r!r}" for r in records
                  if getattr(decode(r, rules), "key", None) == key]
    raise AssertionError("\n".join(lines))


def check_letters(bootstrap: str, dlq: str, want: Outcome) -> None:
    got = dead_letters(bootstrap, dlq, len(want.errors))
    assert set(got) == set(want.errors), (f"dead letters {sorted(set(got) - set(want.errors))} not record errors by "
                                          f"the rules; record errors {sorted(set(want.errors) - set(got))} not "
                                          f"dead-lettered")
    wrong = {c: (got[c], sorted(want.errors[c])) for c in got if got[c] not in want.errors[c]}
    assert not wrong, f"dead letters with another error class than the rules': {wrong}"


def sink_debezium(spark, admin, bootstrap, tables, rules: Rules, build, extra: dict) -> tuple:
    topic = make_topics(admin, 1, 2)[0]
    dlq = make_topics(admin, 1, 1)[0]
    records, chunk = build(topic)
    assert order_dependent(records, rules) is None, "the stream itself leaves the order open"
    table = tables / f"cdc_{uuid.uuid4().hex[:8]}"
    name = f"cdc-{uuid.uuid4().hex[:8]}"
    with InProcess(spark, settings_for(rules, name, bootstrap, [topic], table, dlq, **extra)) as sink:
        produce(bootstrap, records[:chunk])
        sink.drain(table, ends_of(records[:chunk]), "the snapshot committed")
        produce(bootstrap, records[chunk:])
        sink.drain(table, ends_of(records), "every offset committed")
    want = expected(records, rules, table, name)
    check_letters(bootstrap, dlq, want)
    return records, want, table
