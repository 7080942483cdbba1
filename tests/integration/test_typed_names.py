"""Typed records (Kafka Connect JSON with schemas) whose field names Delta's plain mode refuses, at the top level and
inside a struct, under each `field.name.policy` (connector/schema/names.py; participant/convert/values.py
`TypedFit._named`), end to end on the real broker and real Delta tables, read back with Spark:

- `error`: each record whose schema has such a name is dead-lettered naming the field and the policy;
- `sanitize`: the names with `_` for each refused character, at every depth, in a plain table;
- `column_mapping`: a new table is created with column mapping and keeps the names, at every depth; a plain table
  that already exists takes no such name: those records are dead-lettered naming the field.

In every case the connector keeps running: the good records after them are committed too."""
from __future__ import annotations

import json

import deltalake
import pytest

from connector.schema.names import sanitized
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import Sink, dead_letter_config, drain
from testkit.waiting import DRAIN_S

pytestmark = pytest.mark.integration

TOP, DEEP = "top name", "deep (x)=1"

PLAIN = {"type": "struct", "optional": False, "name": "shop.Plain", "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "v", "type": "string", "optional": True}]}
TOP_LEVEL = {"type": "struct", "optional": False, "name": "shop.Top", "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": TOP, "type": "string", "optional": True}]}
NESTED = {"type": "struct", "optional": False, "name": "shop.Nested", "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "inner", "type": "struct", "optional": True, "fields": [
        {"field": DEEP, "type": "int32", "optional": True}]}]}


def generated(start: int, count: int) -> list[tuple[dict, dict]]:
    """(schema, payload): every third record with a refused top-level name, every third with a refused nested one."""
    out = []
    for i in range(start, start + count):
        if i % 3 == 0:
            out.append((TOP_LEVEL, {"id": i, TOP: f"t{i}"}))
        elif i % 3 == 1:
            out.append((NESTED, {"id": i, "inner": {DEEP: i}}))
        else:
            out.append((PLAIN, {"id": i, "v": f"v{i}"}))
    return out


def produce(bootstrap: str, topic: str, records: list[tuple[dict, dict]]) -> dict[tuple[str, int], int]:
    """The records in the JSON converter's layout, round-robin over 2 partitions; each partition's end offset."""
    coords = produce_records(bootstrap, topic, [
        (payload["id"] % 2, str(payload["id"]).encode(),
         json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode())
        for schema, payload in records])
    return offset_ends(coords, topic)


@pytest.mark.parametrize("policy, plain_table", [("error", False), ("sanitize", False), ("column_mapping", False),
                                                 ("column_mapping", True)])
def test_typed_records_follow_the_name_policy_at_every_depth(kafka_bootstrap, make_topic, tmp_path, spark, policy,
                                                            plain_table):
    table = tmp_path / "tables" / f"typed_{policy}"
    if plain_table:
        spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, v STRING) USING delta")
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = dead_letter_config("typed-names", kafka_bootstrap, topic, table, dlq, **{
        "field.name.policy": policy, "value.converter.schemas.enable": "true"})
    first, later = generated(0, 30), generated(30, 12)
    refused = policy == "error" or plain_table
    ends = produce(kafka_bootstrap, topic, first)  # before the start: the first txn, which makes the table, has them
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, ends, "the records with refused names", DRAIN_S)
        drain(sink, cfg, produce(kafka_bootstrap, topic, later), "the records after them", DRAIN_S)

    df = spark.read.format("delta").load(str(table))
    rows = {r["id"]: r.asDict(recursive=True) for r in df.collect()}
    configuration = dict(deltalake.DeltaTable(str(table)).metadata().configuration or {})
    generated_all = first + later
    if refused:
        assert sorted(rows) == [p["id"] for s, p in generated_all if s is PLAIN]
        assert all(rows[i]["v"] == f"v{i}" for i in rows)
        assert "delta.columnMapping.mode" not in configuration
        letters = read_topic(kafka_bootstrap, dlq, len(generated_all) - len(rows))
        by_id = {json.loads(m.value())["payload"]["id"]: dict(m.headers()) for m in letters}
        assert sorted(by_id) == [p["id"] for s, p in generated_all if s is not PLAIN]
        for i, headers in by_id.items():
            message = headers["__connect.errors.exception.message"].decode()
            name = TOP if i % 3 == 0 else f"inner.{DEEP}"
            assert f"field '{name}'" in message and "field.name.policy" in message, message
        return
    assert sorted(rows) == [p["id"] for _, p in generated_all]
    top, deep = (sanitized(TOP), sanitized(DEEP)) if policy == "sanitize" else (TOP, DEEP)
    assert {"id", "v", top, "inner"} <= set(df.columns)
    assert [f.name for f in df.schema["inner"].dataType.fields] == [deep]
    for i, row in rows.items():
        assert row[top] == (f"t{i}" if i % 3 == 0 else None)
        assert row["inner"] == ({deep: i} if i % 3 == 1 else None)
        assert row["v"] == (f"v{i}" if i % 3 == 2 else None)
    if policy == "sanitize":
        assert "delta.columnMapping.mode" not in configuration
    else:
        assert configuration.get("delta.columnMapping.mode") == "name"
    assert read_topic(kafka_bootstrap, dlq, 0, timeout_s=3) == []
