"""The append bench's records (bench/append.py), also produced by bench/many_tables.py and bench/worker_memory.py:
~200-byte JSON values, or the same rows in a schema registry format, and a backlog of them produced as fast as
the client goes."""
from __future__ import annotations

import json
import time

from bench.harness import fast_producer

_KINDS = ("click", "view", "purchase", "scroll", "search")
_COUNTRIES = ("DE", "FR", "NL", "ES", "IT", "PL", "SE", "PT")
_DEVICES = ("mobile", "desktop", "tablet")
_TEMPLATE = ('{"id":%d,"ts":%d,"user":"user-%06d","session":"%016x","kind":"%s","page":"/products/%05d",'
             '"amount":%d.%02d,"currency":"EUR","country":"%s","device":"%s","ok":%s,"tags":["t%d","t%d"]}')


def make_value(i: int, ts_ms: int) -> bytes:
    """One JSON record of about 200 bytes; `ts` is the produce time in ms since the epoch."""
    return (_TEMPLATE % (i, ts_ms, i % 100_000, (i * 2654435761) & 0xFFFFFFFFFFFFFFFF, _KINDS[i % 5],
                         i % 50_000, i % 1000, i % 100, _COUNTRIES[i % 8], _DEVICES[i % 3],
                         "true" if i % 7 else "false", i % 13, i % 17)).encode()


ROW_FIELDS = (("id", "long"), ("ts", "long"), ("user", "string"), ("session", "string"), ("kind", "string"),
              ("page", "string"), ("amount", "double"), ("currency", "string"), ("country", "string"),
              ("device", "string"), ("ok", "boolean"), ("tags", "strings"))
"""make_value's fields as bench/registry_rows.py kinds: the types plain JSON's inference gives them, so every
format fills the same table."""


def make_row(i: int, ts_ms: int) -> dict:
    """make_value's record as a dict (for the schema registry formats)."""
    return {"id": i, "ts": ts_ms, "user": "user-%06d" % (i % 100_000),
            "session": "%016x" % ((i * 2654435761) & 0xFFFFFFFFFFFFFFFF), "kind": _KINDS[i % 5],
            "page": "/products/%05d" % (i % 50_000), "amount": float("%d.%02d" % (i % 1000, i % 100)),
            "currency": "EUR", "country": _COUNTRIES[i % 8], "device": _DEVICES[i % 3], "ok": bool(i % 7),
            "tags": ["t%d" % (i % 13), "t%d" % (i % 17)]}


NESTED_FIELDS = (("id", "long"), ("ts", "long"),
                 ("user", ("record", (("name", "string"), ("session", "string"), ("country", "string")))),
                 ("event", ("record", (("kind", "string"), ("page", "string"), ("device", "string"),
                                       ("ok", "boolean")))),
                 ("amount", "double"), ("currency", "string"), ("tags", "strings"),
                 ("items", ("records", (("sku", "string"), ("qty", "long"), ("price", "double")))))
"""make_nested_row's fields: records within the record, and an array of records (bench/registry_rows.py kinds)."""


def make_nested_row(i: int, ts_ms: int) -> dict:
    """Record i of the nested shape: make_row's values grouped into a user and an event record, and one to three
    line items (an array of records)."""
    return {"id": i, "ts": ts_ms,
            "user": {"name": "user-%06d" % (i % 100_000), "session": "%016x" % ((i * 2654435761) & 0xFFFFFFFFFFFFFFFF),
                     "country": _COUNTRIES[i % 8]},
            "event": {"kind": _KINDS[i % 5], "page": "/products/%05d" % (i % 50_000), "device": _DEVICES[i % 3],
                      "ok": bool(i % 7)},
            "amount": float("%d.%02d" % (i % 1000, i % 100)), "currency": "EUR",
            "tags": ["t%d" % (i % 13), "t%d" % (i % 17)],
            "items": [{"sku": "sku-%04d" % ((i + k) % 5000), "qty": 1 + (i + k) % 4,
                       "price": float("%d.%02d" % ((i * 3 + k) % 200, (i + k) % 100))} for k in range(1 + i % 3)]}


SHAPES = {"flat": (ROW_FIELDS, make_row), "nested": (NESTED_FIELDS, make_nested_row)}
"""The bench's row shapes (`bench/run.py --shape`): their fields and the function making record i."""


def value_writer(fmt: str, registry_url: str | None, topic: str, envelope: str = "none", shape: str = "flat"):
    """`(i, ts_ms) -> value bytes` of the bench's record i in `fmt`: make_value for json, the record as Kafka Connect's
    JsonConverter writes it for connect (testkit/connect_writer.py), else as the format's confluent-kafka serializer
    writes it (its schema registered in the registry at `registry_url` under `<topic>-value` with the first record).
    `envelope="debezium"`: each record is the row of a Debezium change event (op c, its source position i + 1).
    `shape="nested"`: make_nested_row's records, in json (compact `json.dumps`), avro, protobuf or json_schema, no
    envelope."""
    if shape != "flat":
        fields, make = SHAPES[shape]
        if envelope != "none" or fmt == "connect":
            raise ValueError(f"the {shape} rows are written in json, avro, protobuf or json_schema, without envelope")
        if fmt == "json":
            dumps = json.JSONEncoder(separators=(",", ":")).encode
            return lambda i, ts_ms: dumps(make(i, ts_ms)).encode()
        from bench.registry_rows import RowSerializer, registry_client

        serialize = RowSerializer(fmt, "BenchEvent", fields, registry_client(registry_url), topic)
        return lambda i, ts_ms: serialize(make(i, ts_ms))
    if fmt == "json" and envelope == "none":
        return make_value
    if fmt in ("json", "connect"):
        from testkit.connect_writer import ConnectWriter

        write = ConnectWriter(ROW_FIELDS, "debezium" if envelope == "debezium" else "plain", schemas=fmt == "connect")
        return lambda i, ts_ms: write(make_row(i, ts_ms), i + 1)
    from bench.registry_rows import RowSerializer, registry_client

    serialize = RowSerializer(fmt, "BenchEvent", ROW_FIELDS, registry_client(registry_url), topic, envelope)
    return lambda i, ts_ms: serialize(make_row(i, ts_ms), i + 1)


def sss_schema():
    """make_value's record as Spark Structured Streaming's from_json reads it."""
    from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, StringType, StructField,
                                   StructType)

    s = StringType()
    return StructType([StructField("id", LongType()), StructField("ts", LongType()), StructField("user", s),
                       StructField("session", s), StructField("kind", s), StructField("page", s),
                       StructField("amount", DoubleType()), StructField("currency", s), StructField("country", s),
                       StructField("device", s), StructField("ok", BooleanType()),
                       StructField("tags", ArrayType(s))])


def produce_backlog(bootstrap: str, topic: str, records: int, partitions: int, write=make_value) -> dict:
    """`records` records round-robin over the partitions, as fast as the client goes; record i's value is
    `write(i, ts_ms)` (a value_writer)."""
    producer = fast_producer(bootstrap)
    started = time.time()
    ts = int(started * 1000)
    nbytes = 0
    produce = producer.produce
    for i in range(records):
        if i % 10_000 == 0:
            ts = int(time.time() * 1000)
            producer.poll(0)
        value = write(i, ts)
        nbytes += len(value)
        while True:
            try:
                produce(topic, value, str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered to {topic}")
    seconds = time.time() - started
    return {"records": records, "bytes": nbytes, "seconds": seconds}
