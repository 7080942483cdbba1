"""JSON conversion throughput: the batch fast path of participant.convert against a per-record baseline.

    .venv/bin/python bench/convert_bench.py [--records 200000] [--batch 20000] [--repeat 3]
    .venv/bin/python bench/convert_bench.py --format connect [--records 200000] [--batch 20000] [--repeat 5]
    .venv/bin/python bench/convert_bench.py --format registry [--records 200000] [--batch 20000] [--repeat 3]

Converts the same records (about 200 bytes of JSON each) in batches with
  - Converter.convert on confluent-kafka Message objects (what a worker does; meta data columns on),
  - Converter.convert_raw with and without meta data columns (no Message accessors; the parse alone),
  - the baseline: json.loads per record, then pa.Table.from_pylist per batch (no meta data columns),
and prints records/s and MB/s of value bytes (best of --repeat runs) and the speed-up over the baseline.

`--format connect`: the same rows (8 fields, about 175 bytes of plain JSON each, among them a decimal and a
timestamp) as Kafka Connect's JsonConverter writes them with schemas.enable=true (`{"schema": ..., "payload": ...}`,
the decimal as base64 unscaled bytes of a Connect Decimal(10,2), the timestamp as a Connect Timestamp), converted
with value.converter.schemas.enable=true, against their plain JSON (the decimal as a JSON number, the timestamp as
epoch milliseconds) converted schemaless; both through Converter.convert_raw with meta data columns on, in batches
of --batch records (a worker converts up to 20,000 records of a partition at a time), interleaved, best of
--repeat. The last line: `connect_rps=... plain_rps=... ratio=...` (ratio = connect / plain).

`--format registry`: the same rows as plain JSON (as above) and in the Schema Registry formats, written by
confluent-kafka's own serializers (bench/registry_rows.py: AvroSerializer; ProtobufSerializer with a message class
built at run time from a FileDescriptorProto; JSONSerializer) against an in-process mock registry (`mock://<uuid>`;
a converter asks the registry once per writer schema, which the bench checks), then converted with
value.converter=avro / protobuf / json_schema through Converter.convert_raw with meta data columns on, in batches of
--batch records, interleaved, best of --repeat; each format's table is checked to hold the plain JSON rows. The
decimal is a `decimal(10,2)` in Avro, a double in Protobuf and JSON Schema (they have no decimal scalar) as in plain
JSON; the timestamp is a timestamp column in each registry format, a long in plain JSON. Prints records/s, MB/s of
value bytes and the ratio to plain JSON per format; the last line: `json_rps=... avro_rps=... protobuf_rps=...
json_schema_rps=... ratio_avro=... ratio_protobuf=... ratio_json_schema=...`.
"""
from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from participant.convert import Converter  # noqa: E402


def convert_all(converter: Converter, values: list[bytes], batch: int, name: str) -> tuple[int, pa.Table]:
    """Convert `values` in batches of `batch` (offsets from 0, keys k<offset>): rows made, and the last batch's
    table; any record failure stops the bench."""
    rows, result = 0, None
    for start in range(0, len(values), batch):
        part = values[start : start + batch]
        offsets = list(range(start, start + len(part)))
        result = converter.convert_raw("orders", 0, offsets, [1_700_000_000_000 + i for i in offsets],
                                       [b"k%d" % i for i in offsets], part)
        if result.failures:
            raise SystemExit(f"{name}: {len(result.failures)} failures, e.g. {result.failures[0]}")
        rows += result.table.num_rows
    return rows, result.table


def best_times(names, run: Callable[[str], int], repeat: int, records: int) -> dict[str, float]:
    """Each name's best time of `repeat` runs of `run(name)`, interleaved (a load change on a shared machine hits all
    alike); a run that does not make `records` rows stops the bench."""
    best = {name: float("inf") for name in names}
    for _ in range(repeat):
        for name in best:
            start = time.perf_counter()
            rows = run(name)
            best[name] = min(best[name], time.perf_counter() - start)
            if rows != records:
                raise SystemExit(f"{name}: {rows} rows for {records} records")
    return best


def make_values(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    cities = ["Paris", "Berlin", "Lisbon", "Oslo", "Rome", "Vienna", "Madrid", "Dublin"]
    values = []
    for i in range(count):
        record = {
            "order_id": 10_000_000 + i,
            "customer": f"customer-{rng.randrange(100_000):06d}",
            "amount": round(rng.uniform(1, 500), 2),
            "currency": "EUR",
            "paid": rng.random() < 0.9,
            "items": [rng.randrange(1000) for _ in range(rng.randrange(1, 4))],
            "address": {"city": rng.choice(cities), "zip": f"{rng.randrange(10_000, 99_999)}"},
            "created_at": f"2024-05-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00",
        }
        values.append(json.dumps(record).encode())
    return values


CONNECT_SCHEMA = {
    "type": "struct", "optional": False, "name": "shop.orders.Value",
    "fields": [
        {"type": "int64", "optional": False, "field": "order_id"},
        {"type": "string", "optional": False, "field": "customer"},
        {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amount"},
        {"type": "string", "optional": False, "field": "currency"},
        {"type": "boolean", "optional": False, "field": "paid"},
        {"type": "int32", "optional": True, "field": "qty"},
        {"type": "string", "optional": True, "field": "city"},
        {"type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
         "field": "created_at"},
    ],
}


CONNECT_FIELDS = (("order_id", "long"), ("customer", "string"), ("amount", "decimal"), ("currency", "string"),
                  ("paid", "boolean"), ("qty", "int"), ("city", "string"), ("created_at", "timestamp"))
"""The rows of --format connect and --format registry, as bench/registry_rows.py kinds."""


def make_rows(count: int, seed: int = 7) -> list[dict]:
    """The rows of --format connect and --format registry: `amount` a Decimal of 2 places, `created_at` epoch ms."""
    rng = random.Random(seed)
    cities = ["Paris", "Berlin", "Lisbon", "Oslo", "Rome", "Vienna", "Madrid", "Dublin"]
    rows = []
    for i in range(count):
        cents = rng.randrange(100, 5_000_000)
        n = rng.randrange(1_000_000)
        rows.append({
            "order_id": 10_000_000 + i,
            "customer": f"Customer {n:06d} <c{n:06d}@mail.example.com>",
            "amount": Decimal(cents).scaleb(-2),
            "currency": "EUR",
            "paid": rng.random() < 0.9,
            "qty": rng.randrange(1, 20),
            "city": rng.choice(cities),
            "created_at": 1_714_521_600_000 + rng.randrange(30 * 86_400_000),
        })
    return rows


def plain_value(row: dict) -> bytes:
    """A row as plain JSON (compact, as the JSON converter writes it): the decimal as a JSON number, the timestamp
    as epoch milliseconds."""
    cents = int(row["amount"].scaleb(2))
    text = json.dumps({**row, "amount": 0}, separators=(",", ":"))
    return text.replace('"amount":0', f'"amount":{cents // 100}.{cents % 100:02d}').encode()


def make_connect_values(count: int, seed: int = 7) -> tuple[list[bytes], list[bytes]]:
    """The same rows twice: Kafka Connect JsonConverter records with their schema, and plain JSON (compact, as
    the JSON converter writes both)."""
    schema = json.dumps(CONNECT_SCHEMA, separators=(",", ":"))
    connect, plain = [], []
    for row in make_rows(count, seed):
        cents = int(row["amount"].scaleb(2))
        unscaled = base64.b64encode(cents.to_bytes((cents.bit_length() + 8) // 8, "big", signed=True)).decode()
        connect.append(f'{{"schema":{schema},"payload":{json.dumps({**row, "amount": unscaled}, separators=(",", ":"))}}}'
                       .encode())
        plain.append(plain_value(row))
    return connect, plain


def connect_main(args: argparse.Namespace) -> int:
    connect, plain = make_connect_values(args.records)
    sizes = {"connect": sum(map(len, connect)), "plain": sum(map(len, plain))}
    tables = {}

    def run(name: str) -> int:
        values = connect if name == "connect" else plain
        converter = Converter("json", connect_meta_data=True, value_schemas=name == "connect")
        rows, tables[name] = convert_all(converter, values, args.batch, name)
        return rows

    print(f"{args.records} records in batches of {args.batch}: plain JSON {sizes['plain'] / args.records:.0f} bytes "
          f"each on average, the same rows with their Connect schema {sizes['connect'] / args.records:.0f} bytes "
          "(its schema repeated in each)")
    best = best_times(("plain", "connect"), run, args.repeat, args.records)
    typed, inferred = tables["connect"], tables["plain"]
    # the same rows: the decimal exact in one, a double in the other; the timestamp typed in one, a long in the other
    assert typed.column("amount").type == pa.decimal128(10, 2), typed.schema
    assert typed.column("created_at").type == pa.timestamp("us", tz="UTC"), typed.schema
    assert typed.column("amount").to_pylist() == [Decimal(repr(v)).quantize(Decimal("0.01"))
                                                  for v in inferred.column("amount").to_pylist()], "amounts differ"
    assert typed.column("created_at").cast(pa.int64()).to_pylist() == \
        [ms * 1000 for ms in inferred.column("created_at").to_pylist()], "timestamps differ"
    assert typed.drop_columns(["amount", "created_at"]).to_pylist() == \
        inferred.drop_columns(["amount", "created_at"]).to_pylist(), "other columns differ"  # qty: int32 / int64
    for name, label in (("plain", "plain JSON, schemas disabled"), ("connect", "Connect JSON with schemas")):
        seconds = best[name]
        print(f"{label:32s} {args.records / seconds:>12,.0f} records/s {sizes[name] / seconds / 1e6:>8.1f} MB/s")
    connect_rps, plain_rps = args.records / best["connect"], args.records / best["plain"]
    print(f"connect_rps={connect_rps:.0f} plain_rps={plain_rps:.0f} ratio={connect_rps / plain_rps:.2f}")
    return 0


REGISTRY_LABELS = {"json": "plain JSON, schemaless", "avro": "Avro", "protobuf": "Protobuf",
                   "json_schema": "JSON Schema"}


def registry_values(rows: list[dict], client, topic: str = "orders") -> dict[str, list[bytes]]:
    """The rows as plain JSON and as each registry format's confluent-kafka serializer writes them."""
    from bench.registry_rows import FORMATS, RowSerializer

    values = {"json": [plain_value(row) for row in rows]}
    for fmt in FORMATS:
        serialize = RowSerializer(fmt, "Order", CONNECT_FIELDS, client, topic)
        values[fmt] = [serialize(row) for row in rows]
    return values


def check_same_rows(name: str, typed: pa.Table, inferred: pa.Table) -> None:
    """`typed` (read with its writer schema) holds the rows of `inferred` (plain JSON): the decimal exact where the
    format has one, else the same double; the timestamp typed, in plain JSON a long of milliseconds."""
    amount = typed.column("amount")
    if pa.types.is_decimal(amount.type):
        assert amount.to_pylist() == [Decimal(repr(v)).quantize(Decimal("0.01"))
                                      for v in inferred.column("amount").to_pylist()], f"{name}: amounts differ"
    else:
        assert amount.to_pylist() == inferred.column("amount").to_pylist(), f"{name}: amounts differ"
    assert typed.column("created_at").type == pa.timestamp("us", tz="UTC"), f"{name}: {typed.schema}"
    assert typed.column("created_at").cast(pa.int64()).to_pylist() == \
        [ms * 1000 for ms in inferred.column("created_at").to_pylist()], f"{name}: timestamps differ"
    assert typed.drop_columns(["amount", "created_at"]).to_pylist() == \
        inferred.drop_columns(["amount", "created_at"]).to_pylist(), f"{name}: other columns differ"


def registry_main(args: argparse.Namespace) -> int:
    from bench.registry_rows import registry_client
    from connector.formats import registry_format
    from connector.formats.registry import RegistryReader

    client = registry_client(f"mock://convert-bench-{uuid.uuid4().hex}")
    values = registry_values(make_rows(args.records), client)
    sizes = {name: sum(map(len, v)) for name, v in values.items()}
    tables: dict[str, pa.Table] = {}
    fetches: dict[str, int] = {}

    def run(name: str) -> int:
        if name == "json":
            converter = Converter("json", connect_meta_data=True)
        else:
            reader = RegistryReader(registry_format(name), client=client)
            converter = Converter(name, connect_meta_data=True, value_registry=reader)
        rows, tables[name] = convert_all(converter, values[name], args.batch, name)
        if name != "json":
            fetches[name] = reader.fetches
        return rows

    print(f"{args.records} records in batches of {args.batch}, the same rows in each format; bytes per value: "
          + ", ".join(f"{REGISTRY_LABELS[n]} {sizes[n] / args.records:.0f}" for n in values))
    best = best_times(list(values), run, args.repeat, args.records)
    for name in ("avro", "protobuf", "json_schema"):
        check_same_rows(name, tables[name], tables["json"])
        if fetches[name] != 1:
            raise SystemExit(f"{name}: the writer schema was fetched {fetches[name]} times in a run, not once")
    rps = {name: args.records / seconds for name, seconds in best.items()}
    for name, seconds in best.items():
        types = tables[name].schema
        print(f"{REGISTRY_LABELS[name]:24s} {rps[name]:>12,.0f} records/s {sizes[name] / seconds / 1e6:>8.1f} MB/s "
              f"{rps[name] / rps['json']:>6.2f}x plain JSON   (amount {types.field('amount').type}, created_at "
              f"{types.field('created_at').type})")
    print(f"json_rps={rps['json']:.0f} avro_rps={rps['avro']:.0f} protobuf_rps={rps['protobuf']:.0f} "
          f"json_schema_rps={rps['json_schema']:.0f} ratio_avro={rps['avro'] / rps['json']:.2f} "
          f"ratio_protobuf={rps['protobuf'] / rps['json']:.2f} "
          f"ratio_json_schema={rps['json_schema'] / rps['json']:.2f}")
    return 0


def batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def best_of(repeat: int, run: Callable[[], int]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        rows = run()
        best = min(best, time.perf_counter() - start)
    return best, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", choices=("json", "connect", "registry"), default="json",
                        help="json: the JSON fast path against json.loads; connect: Kafka Connect JSON with schemas "
                             "against the same rows as plain JSON; registry: the same rows in Avro, Protobuf and "
                             "JSON Schema against plain JSON")
    args = parser.parse_args(argv)
    if args.format == "connect":
        return connect_main(args)
    if args.format == "registry":
        return registry_main(args)

    values = make_values(args.records)
    total_bytes = sum(map(len, values))
    messages = [
        Message(
            topic="orders", partition=0, offset=i, key=b"k%d" % i, value=v,
            timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + i),
        )
        for i, v in enumerate(values)
    ]
    value_batches, message_batches = batches(values, args.batch), batches(messages, args.batch)

    def fast_messages() -> int:
        converter = Converter("json", connect_meta_data=True)
        return sum(converter.convert(batch).table.num_rows for batch in message_batches)

    def fast_raw(meta: bool) -> int:
        converter = Converter("json", connect_meta_data=meta)
        rows = 0
        for start, batch in zip(range(0, args.records, args.batch), value_batches):
            offsets = list(range(start, start + len(batch)))
            stamps = [1_700_000_000_000 + i for i in offsets]
            keys = [b"k%d" % i for i in offsets]
            rows += converter.convert_raw("orders", 0, offsets, stamps, keys, batch).table.num_rows
        return rows

    def baseline() -> int:
        return sum(pa.Table.from_pylist([json.loads(v) for v in batch]).num_rows for batch in value_batches)

    print(f"{args.records} records, {total_bytes / args.records:.0f} bytes each on average, batches of {args.batch}")
    results = {}
    for name, run in [
        ("baseline: json.loads + from_pylist", baseline),
        ("fast path, convert(Message), meta on", fast_messages),
        ("fast path, convert_raw, meta on", lambda: fast_raw(True)),
        ("fast path, convert_raw, meta off", lambda: fast_raw(False)),
    ]:
        seconds, rows = best_of(args.repeat, run)
        if rows != args.records:
            raise SystemExit(f"{name}: {rows} rows for {args.records} records")
        results[name] = seconds
        print(f"{name:40s} {args.records / seconds:>12,.0f} records/s {total_bytes / seconds / 1e6:>8.1f} MB/s")
    base = results["baseline: json.loads + from_pylist"]
    for name, seconds in results.items():
        if not name.startswith("baseline"):
            print(f"speed-up of {name}: {base / seconds:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
