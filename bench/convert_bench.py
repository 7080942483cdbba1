"""JSON conversion throughput: the batch fast path of participant.convert against a per-record baseline.

    .venv/bin/python bench/convert_bench.py [--records 200000] [--batch 20000] [--repeat 3]

Converts the same records (about 200 bytes of JSON each) in batches with
  - Converter.convert on confluent-kafka Message objects (what a worker does; meta data columns on),
  - Converter.convert_raw with and without meta data columns (no Message accessors; the parse alone),
  - the baseline: json.loads per record, then pa.Table.from_pylist per batch (no meta data columns),
and prints records/s and MB/s of value bytes (best of --repeat runs) and the speed-up over the baseline.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from participant.convert import Converter  # noqa: E402


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
    args = parser.parse_args(argv)

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
