"""A Debezium-style schema change under a crash: records typed by their Kafka Connect schema
(`value.converter.schemas.enable=true`, `schema.evolution=true`) switch mid-stream to a schema with a new optional
column (an ALTER TABLE ADD COLUMN upstream), and `lakesink run` is SIGKILLed while the first transaction carrying
that column is staged and not committed. The restarted process sinks the rest: every offset exactly once, decimals
and timestamps exact, the rows before the change read the new column as null, the rows after it have it.

The kill is placed deterministically: the process stops itself (LAKESINK_FAULT_ACTION=pause) after each partition's
staging; the test looks at the table and the staged files while it is stopped, and resumes it or kills it."""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.app.verify_table import read_columns
from testkit import LakesinkProcess, chaos_config, exactly_once, files_in_flight, open_table
from testkit.chaos import expected_ranges, stopped_again

pytestmark = pytest.mark.chaos

PARTITIONS = 2
STEP = "participant.after-staging"
FIRST = 1000  # the first part, old schema, produced before lakesink starts
OLD_TAIL = 200  # more old-schema records, produced in one go with the first new-schema ones: the switch
NEW_BEFORE_KILL = 600  # new-schema records produced before the kill
NEW_AFTER_KILL = 600  # new-schema records produced while lakesink is dead
TOTAL = FIRST + OLD_TAIL + NEW_BEFORE_KILL + NEW_AFTER_KILL

_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amount"},
    {"type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
     "field": "at"},
]
OLD_SCHEMA = {"type": "struct", "fields": _FIELDS, "optional": False, "name": "shop.orders.Value"}
# Debezium after ALTER TABLE orders ADD COLUMN note text: the new column, optional, last
NEW_SCHEMA = {**OLD_SCHEMA, "fields": _FIELDS + [{"type": "string", "optional": True, "field": "note"}]}

# Edge values first (each lands in both schemas' ranges through the modulo), the rest drawn from i.
_AMOUNTS = (0, 1, -1, 9_999_999_999, -9_999_999_999, 10, -128, 128, 32_767, -32_768, 100)  # unscaled, scale 2
_STAMPS_MS = (0, -1, 1, 999, -86_400_000 * 365 * 30 - 7, 1_700_000_000_123, 253_402_300_799_999,
              -62_135_596_800_000)  # 1970, just before, 9999-12-31T23:59:59.999, 0001-01-01


def _amount(i: int) -> int:
    return _AMOUNTS[i % 97] if i % 97 < len(_AMOUNTS) else (i * 7_919_993 % 20_000_000_001) - 10_000_000_000


def _stamp_ms(i: int) -> int:
    return _STAMPS_MS[i % 89] if i % 89 < len(_STAMPS_MS) else 1_600_000_000_000 + i * 86_400_123 + i % 1000


def _note(i: int) -> str | None:
    return None if i % 10 == 3 else f"note {i}: ünïcødé, \"quoted\"" if i % 10 else ""  # null, empty, text


def _value(i: int, new: bool) -> bytes:
    """Kafka Connect JsonConverter's record: the unscaled decimal as big-endian two's-complement bytes in base64,
    the timestamp as milliseconds since the epoch."""
    unscaled = _amount(i)
    payload = {"id": i, "amount": base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big",
                                                                        signed=True)).decode(),
               "at": _stamp_ms(i)}
    if new:
        payload["note"] = _note(i)
    record = {"schema": NEW_SCHEMA if new else OLD_SCHEMA, "payload": payload}
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


class _Producer:
    """Produces record i to partition i % PARTITIONS and keeps where each landed (from its delivery report)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.landed: dict[tuple[int, int], int] = {}  # (partition, offset) -> i
        self.new: set[int] = set()

    def send(self, ids: range, new: bool) -> None:
        def delivered(err, msg, i):
            assert err is None, f"record {i} not delivered: {err}"
            self.landed[(msg.partition(), msg.offset())] = i

        for i in ids:
            self.producer.produce(self.topic, key=str(i).encode(), value=_value(i, new), partition=i % PARTITIONS,
                                  on_delivery=lambda err, msg, i=i: delivered(err, msg, i))
            if new:
                self.new.add(i)
        assert self.producer.flush(60) == 0, "records still queued after 60 s"
        assert len(self.landed) == ids.stop, f"{len(self.landed)} delivery reports for {ids.stop} records"

    def ends(self) -> dict[int, int]:
        return {p: sum(1 for q, _ in self.landed if q == p) for p in range(PARTITIONS)}


def _columns(table) -> list[str]:
    dt_ = open_table(table)
    return [] if dt_ is None else pa.schema(dt_.schema().to_arrow()).names


def _staged_with(table, column: str) -> list[str]:
    """The data files of the transaction in flight (staged, not in the table) whose schema has `column`."""
    root = Path(table.root.key)
    return [name for name in files_in_flight(table) if column in pq.read_schema(root / name).names]


def test_new_optional_column_mid_stream_with_a_kill_in_the_first_transaction_that_has_it(
        kafka_bootstrap, make_topic, tmp_path, cluster_of, report):
    topic = make_topic(partitions=PARTITIONS)
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{"value.converter.schemas.enable": "true",
                                                                "schema.evolution": "true"})
    c = cluster_of(config)
    producer = _Producer(kafka_bootstrap, topic)
    producer.send(range(0, FIRST), new=False)

    # `lakesink run` stopping itself after every partition's staging, until the test kills it
    run = LakesinkProcess("run", config, tmp_path / "01-run-paused-at-staging.log",
                          env={"LAKESINK_FAULT": STEP, "LAKESINK_FAULT_ACTION": "pause",
                               "LAKESINK_FAULT_TIMES": "1000000"})
    run.role, run.fault = "run", STEP
    c.procs.append(run)
    pauses, phase, killed_with = 0, "old", None
    deadline = time.monotonic() + 150
    while killed_with is None:
        assert time.monotonic() < deadline, f"no kill point within 150 s (phase {phase}, {pauses} pauses)"
        pauses = stopped_again(run, STEP, pauses)
        if phase == "old" and exactly_once(c.table, expected_ranges(topic, producer.ends())):
            assert "note" not in _columns(c.table)
            # mid-stream the producer switches: the old schema's last records and the new one's first in one go
            producer.send(range(FIRST, FIRST + OLD_TAIL), new=False)
            producer.send(range(FIRST + OLD_TAIL, FIRST + OLD_TAIL + NEW_BEFORE_KILL), new=True)
            phase = "new"
        elif phase == "new" and "note" not in _columns(c.table) and (staged := _staged_with(c.table, "note")):
            killed_with = staged
            run.kill()  # SIGKILL to the stopped process group: the transaction that brings `note` dies staged
            break
        os.kill(run.proc.pid, signal.SIGCONT)
    assert run.proc.returncode == -signal.SIGKILL
    c.no_duplicates_yet()
    assert "note" not in _columns(c.table), "the killed transaction's column reached the table"
    rows_at_kill = c.rows()

    producer.send(range(FIRST + OLD_TAIL + NEW_BEFORE_KILL, TOTAL), new=True)  # the stream goes on meanwhile
    restarted = c.start("run")
    c.drain(expected_ranges(topic, producer.ends()), (restarted,))
    report(f"typed schema change: killed after {pauses} pauses at {STEP} with {len(killed_with)} staged file(s) "
           f"carrying `note` and {rows_at_kill} rows committed; after the restart {c.rows()} rows, exactly once")

    # the table's types come from the Connect schema; the column the new schema added is nullable and last
    snapshot = open_table(c.table)
    schema = pa.schema(snapshot.schema().to_arrow())
    assert [(f.name, f.type) for f in schema if not f.name.startswith("_kafka_")] == [
        ("id", pa.int64()), ("amount", pa.decimal128(10, 2)), ("at", pa.timestamp("us", tz="UTC")),
        ("note", pa.string())]
    assert schema.field("note").nullable
    referenced = set(snapshot.get_add_actions(flatten=True).column("path").to_pylist())
    assert not referenced & set(killed_with), "a file of the killed transaction is in the table"

    rows = read_columns(snapshot, ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_key", "id",
                                   "amount", "at", "note"]).to_pylist()
    assert len(rows) == TOTAL == len(producer.landed)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    wrong = []
    for row in rows:
        i = producer.landed[(row["_kafka_partition"], row["_kafka_offset"])]
        want = {"_kafka_topic": topic, "_kafka_key": str(i).encode(), "id": i,
                "amount": Decimal(_amount(i)).scaleb(-2), "at": epoch + dt.timedelta(milliseconds=_stamp_ms(i)),
                "note": _note(i) if i in producer.new else None}
        got = {k: row[k] for k in want}
        if got != want or str(got["amount"]) != str(want["amount"]):  # exact, scale included
            wrong.append((i, got, want))
    assert not wrong, f"{len(wrong)} rows differ from what was produced, e.g. {wrong[:3]}"
    old = [r for r in rows if r["id"] < FIRST + OLD_TAIL]
    new = [r for r in rows if r["id"] >= FIRST + OLD_TAIL]
    assert len(old) == FIRST + OLD_TAIL and all(r["note"] is None for r in old)
    assert len(new) == NEW_BEFORE_KILL + NEW_AFTER_KILL
    assert sum(r["note"] is not None for r in new) == sum(_note(i) is not None for i in producer.new) > 0
    c.verify()


