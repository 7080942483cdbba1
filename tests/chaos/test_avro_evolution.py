"""Avro schema evolution under two crashes: records serialized by confluent-kafka's AvroSerializer against the
registry (`value.converter=avro`, `schema.evolution=true`) go through the writer schemas v1 -> v2 (an optional field
with a default, a field with a non-null default, an int widened to a long) -> v3 (a field added inside a record),
while `lakesink run` is SIGKILLed twice: once with the first v2 transaction staged and not committed, once right
after the Delta commit of the first v3 transaction (before any ACK). Then an incompatible v4 (a string field turned
into an int: the registry server accepts it, it checks no compatibility) and more v3 records.

What must hold (docs/configuration.md, "Types of Avro, Protobuf and JSON Schema records"): every record of
v1-v3 once in the table and nothing else; each record read with its own writer schema, so the v1 rows read the
columns v2 and v3 added as null (also the one whose Avro default is not null); the int column widened to bigint in
the commit that first carried a long, the values written before intact; the nested field present; the v4 records in
the dead-letter topic as `TypeMismatch` naming the column, both types, the record's writer schema id and one that
gave the column its type.

The int -> long widening needs Delta's type widening (`delta.enableTypeWidening=true`), a table property lakesink does
not set on a table it creates: the table is created first with Spark DDL, as test_typed_records.py's widening test
does, and lakesink evolves it from there. delta-rs refuses to read the data of a table with the typeWidening reader
feature, so the rows are read with Spark, offset by offset; delta-rs reads only the Delta log here (schema, files,
txn version). `lakesink verify` audits the table as well: it reads a widened table's data files itself.

The kills are placed deterministically: the process stops itself (LAKESINK_FAULT_ACTION=pause) at each of its steps
of one kind; the test looks at the log, the staged files and the committed offsets while it is stopped, and resumes
it or kills it."""
from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.app.verify_table import read_committed
from connector.config import load_config
from testkit import LakesinkProcess, chaos_config, files_in_flight, open_table, wait_until
from testkit.chaos import stopped_again
from testkit.kafka import read_topic
from testkit.pipeline import CLASS, MESSAGE

pytestmark = pytest.mark.chaos

PARTITIONS = 2
STAGED = "participant.after-staging"
COMMITTED = "coordinator.after-delta-commit"
V1 = range(0, 800)  # produced before lakesink starts
V2 = range(800, 1400)  # produced once V1 is committed; the first transaction of them is killed staged
V3 = range(1400, 2000)  # produced once V2 is committed; the first commit of them is killed after the Delta commit
V3_MORE = range(2000, 2100)  # after the restart, before v4: the process has seen v3 when v4 comes
V4 = range(2100, 2200)  # incompatible: dead-lettered
V3_TAIL = range(2200, 2900)  # after the v4 records
TOTAL = V3_TAIL.stop


# --- the four writer schemas ----------------------------------------------------------------------------------

def _schema(version: int) -> dict:
    address = [{"name": "city", "type": "string"}]
    if version >= 3:  # v3: a nested field, optional
        address.append({"name": "zip", "type": ["null", "int"], "default": None})
    fields = [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int" if version == 1 else "long"},  # v2: widened, as BACKWARD compatibility allows
        {"name": "label", "type": "int" if version == 4 else "string"},  # v4: incompatible
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": address}},
    ]
    if version >= 2:  # v2: an optional field, and one whose default is not null
        fields += [{"name": "note", "type": ["null", "string"], "default": None},
                   {"name": "level", "type": "int", "default": 3}]
    return {"type": "record", "name": "Reading", "namespace": "lakesink.chaos", "fields": fields}


_INTS = (0, -1, 1, 2 ** 31 - 1, -2 ** 31, 127, -128, 32_767, -32_768)
_LONGS = (2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 63, 0, -1, 2 ** 53 + 1)


def _n(i: int, version: int) -> int:
    if version == 1:
        return _INTS[i % 53] if i % 53 < len(_INTS) else (i * 7_919 % 2 ** 31) - 2 ** 30
    return _LONGS[i % 47] if i % 47 < len(_LONGS) else i * 2 ** 33 + i


def _note(i: int) -> str | None:
    return None if i % 4 == 0 else "" if i % 4 == 1 else f"note {i}: ünïcødé"


def _zip(i: int) -> int | None:
    return None if i % 5 == 0 else 10_000 + i


def _record(i: int, version: int) -> dict:
    record = {"id": i, "n": _n(i, version), "label": i if version == 4 else f"label {i}",
              "address": {"city": f"city {i % 13}"}}
    if version >= 2:
        record.update(note=_note(i), level=i % 7)
    if version >= 3:
        record["address"]["zip"] = _zip(i)
    return record


def _row(i: int, version: int) -> dict:
    """What the table's row of record i holds (as Spark reads it): null in every column its writer schema lacks."""
    return {"id": i, "n": _n(i, version), "label": f"label {i}",
            "address": {"city": f"city {i % 13}", "zip": _zip(i) if version >= 3 else None},
            "note": _note(i) if version >= 2 else None, "level": i % 7 if version >= 2 else None}


class _Producer:
    """Serializes record i with its version's writer schema (registered under `<topic>-value`), produces it to
    partition i % PARTITIONS and keeps where each landed (from its delivery report)."""

    def __init__(self, bootstrap: str, topic: str, registry_url: str):
        from confluent_kafka import Producer
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        client = SchemaRegistryClient({"url": registry_url})
        self.serializers = {v: AvroSerializer(client, json.dumps(_schema(v)), conf={"auto.register.schemas": True})
                            for v in (1, 2, 3, 4)}
        self.context = SerializationContext(topic, MessageField.VALUE)
        self.landed: dict[tuple[int, int], int] = {}  # (partition, offset) -> i
        self.version: dict[int, int] = {}  # i -> its writer schema's version
        self.schema_id: dict[int, int] = {}  # version -> the id the registry gave its schema

    def send(self, ids: range, version: int) -> None:
        def delivered(err, msg, i):
            assert err is None, f"record {i} not delivered: {err}"
            self.landed[(msg.partition(), msg.offset())] = i

        for i in ids:
            value = self.serializers[version](_record(i, version), self.context)
            self.schema_id.setdefault(version, int.from_bytes(value[1:5], "big"))  # magic byte, then the id
            self.version[i] = version
            self.producer.produce(self.topic, key=str(i).encode(), value=value, partition=i % PARTITIONS,
                                  on_delivery=lambda err, msg, i=i: delivered(err, msg, i))
        assert self.producer.flush(60) == 0, "records still queued after 60 s"
        assert len(self.landed) == len(self.version), f"{len(self.landed)} delivery reports, {len(self.version)} sent"

    def ends(self) -> dict[tuple[str, int], int]:
        counts = Counter(p for p, _ in self.landed)
        return {(self.topic, p): counts[p] for p in range(PARTITIONS)}


# --- the table, through its Delta log only (delta-rs refuses its data once typeWidening is on) ---------------

def _committed(cfg) -> dict[tuple[str, int], int]:
    """The offsets the table's last lakesink commit covers (its manifest), read-only."""
    return {tp: o or 0 for tp, o in read_committed(cfg.table_path, cfg.name).offsets.items()}


def _fields(table) -> dict[str, pa.Field]:
    return {f.name: f for f in pa.schema(open_table(table).schema().to_arrow())}


def _staged_with(table, column: str) -> list[str]:
    """The data files of the transaction in flight (staged, not in the table) whose schema has `column`."""
    root = Path(table.root.key)
    return [name for name in files_in_flight(table) if column in pq.read_schema(root / name).names]


def _has_zip(table) -> bool:
    address = _fields(table).get("address")
    return address is not None and address.type.get_field_index("zip") >= 0


def _paused_run(c, step: str, n: int, tmp_path) -> LakesinkProcess:
    run = LakesinkProcess("run", c.config, tmp_path / f"{n:02d}-run-paused-at-{step.replace('.', '-')}.log",
                          env={"LAKESINK_FAULT": step, "LAKESINK_FAULT_ACTION": "pause",
                               "LAKESINK_FAULT_TIMES": "1000000"})
    run.role, run.fault = "run", step
    c.procs.append(run)
    return run


def test_avro_evolution_v1_v2_v3_with_two_kills_and_an_incompatible_v4_dead_lettered(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, cluster_of, spark, report):
    began = time.monotonic()
    topic = make_topic(partitions=PARTITIONS)
    dlq = f"dlq-{topic}"
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{
        "value.converter": "avro", "schema.registry.url": schema_registry.url, "schema.evolution": "true",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
    cfg = load_config(config)
    c = cluster_of(config)
    table = Path(c.table.root.key)
    # only the property: every other column comes from v1's first commit (schema evolution)
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT) USING delta "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    producer = _Producer(kafka_bootstrap, topic, schema_registry.url)
    producer.send(V1, version=1)

    # run 1 stops itself after every partition's staging: v2 is produced once v1 is committed, and the process is
    # SIGKILLed while the first transaction that carries v2's columns is staged
    run = _paused_run(c, STAGED, 1, tmp_path)
    pauses, phase, deadline = 0, 1, time.monotonic() + 150
    while True:
        assert time.monotonic() < deadline, f"no first kill within 150 s (phase v{phase}, {pauses} pauses)"
        pauses = stopped_again(run, STAGED, pauses)
        if phase == 1 and _committed(cfg) == producer.ends():
            assert _fields(c.table)["n"].type == pa.int32() and "note" not in _fields(c.table)
            producer.send(V2, version=2)
            phase = 2
        elif phase == 2 and "note" not in _fields(c.table) and (staged := _staged_with(c.table, "note")):
            run.kill()  # SIGKILL to the stopped process group: the transaction that brings v2 dies staged
            break
        os.kill(run.proc.pid, signal.SIGCONT)
    assert run.proc.returncode == -signal.SIGKILL
    fields = _fields(c.table)
    assert "note" not in fields and fields["n"].type == pa.int32(), "the killed transaction changed the schema"
    at_first_kill = sum(_committed(cfg).values())

    # run 2 stops itself after every Delta commit: v3 is produced once v2 is committed, and the process is SIGKILLed
    # right after the Delta commit that first carries v3's nested field, before it ACKs
    run = _paused_run(c, COMMITTED, 2, tmp_path)
    pauses, deadline = 0, time.monotonic() + 150
    while True:
        assert time.monotonic() < deadline, f"no second kill within 150 s (phase v{phase}, {pauses} pauses)"
        pauses = stopped_again(run, COMMITTED, pauses)
        if phase == 2 and _committed(cfg) == producer.ends():
            fields = _fields(c.table)
            assert fields["n"].type == pa.int64() and {"note", "level"} <= set(fields) and not _has_zip(c.table)
            producer.send(V3, version=3)
            phase = 3
        elif phase == 3 and _has_zip(c.table):
            run.kill()
            break
        os.kill(run.proc.pid, signal.SIGCONT)
    assert run.proc.returncode == -signal.SIGKILL
    v3_at_kill = sum(_committed(cfg).values()) - V3.start  # offsets count records: all before v3 are committed
    assert 0 < v3_at_kill <= len(V3), v3_at_kill

    # run 3, no fault: v3, an incompatible v4, v3 again
    run = c.start("run")
    producer.send(V3_MORE, version=3)
    producer.send(V4, version=4)
    producer.send(V3_TAIL, version=3)

    def all_committed():
        c.assert_alive(run)
        return _committed(cfg) == producer.ends()

    wait_until(all_committed, 150, f"every offset of {topic} committed ({run.log_path})", interval_s=0.5)
    took = time.monotonic() - began

    # exactly once, read with Spark: every record of v1-v3 once, the v4 ones nowhere
    df = spark.read.format("delta").load(str(table))
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert {k: v for k, v in types.items() if not k.startswith("_kafka_")} == {
        "id": "bigint", "n": "bigint", "label": "string", "address": "struct<city:string,zip:int>",
        "note": "string", "level": "int"}, types
    rows = [r.asDict(recursive=True) for r in df.collect()]
    coordinates = Counter((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows)
    want = {(topic, p, o) for (p, o), i in producer.landed.items() if producer.version[i] != 4}
    duplicated = {k: n for k, n in coordinates.items() if n > 1}
    assert not duplicated and set(coordinates) == want, (
        f"duplicated {len(duplicated)}, missing {len(want - set(coordinates))}, "
        f"unexpected {len(set(coordinates) - want)}")
    # and as a user audits it: `lakesink verify` reads the widened table's files itself (delta-rs refuses it) and
    # finds the v4 offsets in the dead-letter topic
    audit = c.verify()
    assert f"rows={len(want)} " in audit and f"missing={len(V4)} " in audit and "gaps=0 unchecked=0" in audit, audit

    # each row as its own writer schema wrote it; v1 rows read v2's and v3's columns as null, `level` included
    # (its Avro default is a reader's, and lakesink reads each record with its writer schema)
    wrong = []
    for r in rows:
        i = producer.landed[(r["_kafka_partition"], r["_kafka_offset"])]
        version = producer.version[i]
        got = {k: r[k] for k in ("id", "n", "label", "address", "note", "level")}
        if got != _row(i, version):
            wrong.append((i, version, got, _row(i, version)))
    assert not wrong, f"{len(wrong)} rows differ from what was produced, e.g. {wrong[:3]}"
    versions = Counter(producer.version[producer.landed[(r["_kafka_partition"], r["_kafka_offset"])]] for r in rows)
    assert versions == {1: len(V1), 2: len(V2), 3: len(V3) + len(V3_MORE) + len(V3_TAIL)}, versions

    # the widening is Delta's: recorded on the column as ALTER COLUMN ... TYPE records it
    n_field = _fields(c.table)["n"]
    assert json.loads(n_field.metadata[b"delta.typeChanges"]) == [{"fromType": "integer", "toType": "long"}]

    # the v4 records, dead-lettered: the column and both types named
    letters = read_topic(kafka_bootstrap, dlq, len(V4))
    headers = [{k: (v or b"").decode() for k, v in m.headers()} for m in letters]
    lettered = {(int(h["__connect.errors.partition"]), int(h["__connect.errors.offset"])) for h in headers}
    assert len(letters) == len(V4) and lettered == {pl for pl, i in producer.landed.items() if producer.version[i] == 4}
    assert {h[CLASS] for h in headers} == {"TypeMismatch"}
    message = headers[0][MESSAGE]
    assert "column 'label'" in message and "int32" in message and "string" in message, message
    # both schema ids: the record's writer schema, and one whose `label` has the column's type (a string; the
    # process names the first writer schema it fitted to the column, v3 here: it never saw v1, which created it)
    named = {int(n) for n in re.findall(r"schema id (\d+)\b", message)}
    assert producer.schema_id[4] in named, (message, producer.schema_id)
    assert named & {producer.schema_id[v] for v in (1, 2, 3)}, (message, producer.schema_id)

    report(f"avro evolution v1->v2->v3 (+ incompatible v4): killed at {STAGED} with {len(staged)} staged v2 "
           f"file(s) ({at_first_kill} offsets committed) and at {COMMITTED} with the first v3 commit ({v3_at_kill} "
           f"v3 records); {len(rows)} rows exactly once, {len(letters)} v4 records dead-lettered, all committed "
           f"{took:.0f} s after the start")
