"""Decimals as Kafka Connect's AvroConverter writes them, end to end: a Connect Decimal whose schema has no
`connect.decimal.precision` (a JDBC source's NUMERIC without precision) is Avro `bytes` with logicalType decimal
and precision 64 (AvroData's CONNECT_AVRO_DECIMAL_PRECISION_DEFAULT); with the parameter, that precision. Records
serialized by confluent-kafka's AvroSerializer against the real registry, sunk by a coordinator and a worker into a
Delta table, read back with Spark and delta-rs: a decimal(38, s) column, values exact at the edges, a value of
39 digits one record error naming its field (docs/configuration.md, "Types": Avro `decimal`)."""
from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.serialization import MessageField, SerializationContext

from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import CLASS, MESSAGE, Sink, drain_records
from testkit.readback import delta_read, spark_read
from testkit.registry import avro_serializer, registry_config
from testkit.registry_values import connect_decimal

pytestmark = pytest.mark.integration

TOP = "9" * 36 + ".99"  # 38 digits at scale 2
EDGES = [TOP, "-" + TOP, "0.00", "-0.01", "1" + "0" * 35 + ".00", "12345.67"]


def _schema(name: str) -> dict:
    """A JDBC source's row through the AvroConverter: NUMERIC without precision (scale 2 and scale 0), a
    NUMERIC(12,2) (its precision as `connect.decimal.precision`), a nullable NUMERIC."""
    return {"type": "record", "name": name, "namespace": "jdbc.public", "connect.name": f"jdbc.public.{name}",
            "fields": [{"name": "id", "type": "int"},
                       {"name": "amount", "type": connect_decimal(2)},
                       {"name": "whole", "type": connect_decimal(0)},
                       {"name": "priced", "type": connect_decimal(2, 12)},
                       {"name": "maybe", "type": ["null", connect_decimal(4)], "default": None}]}


def _row(i: int) -> dict:
    amount = Decimal(EDGES[i % len(EDGES)])
    return {"id": i, "amount": amount, "whole": Decimal(("-" if i % 2 else "") + "9" * 38) if i < 2 else Decimal(i),
            "priced": Decimal("-9999999999.99") if i == 3 else Decimal(i).scaleb(-2),
            "maybe": None if i % 3 == 0 else Decimal(f"-{i}.0001")}


def test_connect_decimals_without_precision_land_as_decimal_38_exactly_and_39_digits_are_record_errors(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    dlq = f"dlq-{topic}"
    table = tmp_path / "tables" / "numeric"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.avro.AvroConverter", "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq})
    serialize, _ = avro_serializer(schema_registry.url, _schema("Numeric"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows = [_row(i) for i in range(12)]
    too_wide = [{**_row(20), "id": 20, "amount": Decimal("1" + "0" * 36 + ".00")},  # 39 digits
                {**_row(21), "id": 21, "whole": Decimal("-" + "9" * 39)},
                {**_row(22), "id": 22, "maybe": Decimal("1" + "0" * 34 + ".0000")}]
    records = [(0, None, serialize(row, ctx)) for row in rows[:6] + too_wide + rows[6:]]
    coords = produce_records(kafka_bootstrap, topic, records)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the decimal records handled")

    types, got = spark_read(spark, table)
    assert {k: v for k, v in types.items() if not k.startswith("_kafka_")} == {
        "id": "int", "amount": "decimal(38,2)", "whole": "decimal(38,0)", "priced": "decimal(12,2)",
        "maybe": "decimal(38,4)"}
    columns = ("id", "amount", "whole", "priced", "maybe")
    assert sorted(({k: r[k] for k in columns} for r in got), key=lambda r: r["id"]) == rows
    delta_types, arrow_schema, delta_rows = delta_read(table)
    assert {k: delta_types[k] for k in columns[1:]} == {
        "amount": "decimal(38,2)", "whole": "decimal(38,0)", "priced": "decimal(12,2)", "maybe": "decimal(38,4)"}
    assert arrow_schema.field("amount").type == pa.decimal128(38, 2)
    assert sorted(({k: r[k] for k in columns} for r in delta_rows), key=lambda r: r["id"]) == rows
    assert str(next(r["amount"] for r in delta_rows if r["id"] == 0)) == TOP

    letters = read_topic(kafka_bootstrap, dlq, 3)
    reasons = sorted((int(dict(m.headers())["__connect.errors.offset"]), dict(m.headers())[CLASS].decode(),
                      dict(m.headers())[MESSAGE].decode().split(" holds ")[0]) for m in letters)
    assert reasons == [(6, "ConnectSchemaMismatch", "field 'amount'"), (7, "ConnectSchemaMismatch", "field 'whole'"),
                       (8, "ConnectSchemaMismatch", "field 'maybe'")]
