"""A random keyed changelog (Debezium envelopes without the schema wrapper), its fold computed independently of
lakesink, producing it, and the table read back to compare (the chaos tests of upsert and upkeep)."""
from __future__ import annotations

import json
import threading
import time

from testkit import open_table


PARTITIONS = 2


def changelog_events(changes, order, tombstones):
    """(partition, key, value) records: Debezium envelopes without the schema wrapper, a duplicate produced twice,
    a delete followed by its tombstone when `tombstones`."""
    alive: set[int] = set()
    for key, kind, position, amount, twice in changes:
        if kind == "delete":
            before = {"id": key, "amount": None, "name": None}
            value = {"before": before, "after": None, "op": "d", "source": {"lsn": position, "ts_ms": position},
                     "ts_ms": position}
            alive.discard(key)
        else:
            op = "u" if key in alive else ("r" if position % 7 == 0 else "c")
            after = {"id": key, "amount": amount, "name": f"n{amount % 97}"}
            value = {"before": None, "after": after, "op": op, "source": {"lsn": position, "ts_ms": position},
                     "ts_ms": position}
            alive.add(key)
        for _ in range(2 if twice else 1):
            yield key % PARTITIONS, key, value
        if kind == "delete" and tombstones:
            yield key % PARTITIONS, key, None


def fold_changelog(events, order) -> dict[int, tuple]:
    """key -> (amount, name) of the rows a reader sees as live, computed independently of lakesink."""
    winner: dict[int, tuple] = {}
    offsets = [0] * PARTITIONS
    for partition, key, value in events:
        offset = offsets[partition]
        offsets[partition] += 1
        position = (value or {}).get("source", {}).get("lsn")
        rank = (position, offset) if order == "lsn-soft" else (offset,)
        if value is None:  # a tombstone: offset order only
            winner[key] = (rank, None)
            continue
        if key not in winner or rank >= winner[key][0]:
            winner[key] = (rank, value["after"])
    return {k: (row["amount"], row["name"]) for k, (_, row) in winner.items() if row is not None}


def produce_changelog(bootstrap, topic, events, pause_s: float = 0.0, stop: threading.Event | None = None,
             produced: list | None = None) -> None:
    """Produce `events` in order (a pause after each when `pause_s`) until they end or `stop` is set, every one
    acknowledged; each is appended to `produced`."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[str] = []  # a failed delivery leaves the queue too: flush() alone would not tell

    def delivered(err, msg) -> None:
        if err is not None:
            failed.append(f"{topic}-{msg.partition()}: {err}")

    for event in events:
        if stop is not None and stop.is_set():
            break
        partition, key, value = event
        producer.produce(topic, partition=partition, key=json.dumps({"id": key}).encode(),
                         value=None if value is None else json.dumps(value).encode(), on_delivery=delivered)
        if produced is not None:
            produced.append(event)
        if pause_s:
            producer.poll(0)
            time.sleep(pause_s)
    assert producer.flush(30) == 0
    assert not failed, f"{len(failed)} change(s) not delivered, the first: {failed[0]}"


def changelog_ends(events) -> dict:
    counts = [0] * PARTITIONS
    for partition, _, _ in events:
        counts[partition] += 1
    return counts


def committed_per_partition(sink) -> list[int]:
    sink.snapshot.forget()  # a fresh snapshot every time
    offsets = sink.recover().offsets
    return [next((o for (_, p), o in offsets.items() if p == partition), 0) or 0 for partition in range(PARTITIONS)]


def config_name(config) -> str:
    from connector.config import load_config

    return load_config(config).name


def changelog_rows(table, order) -> dict[int, tuple]:
    from connector.app.verify_table import read_columns

    dt = open_table(table)
    names = ["id", "amount", "name"] + (["_deleted"] if order == "lsn-soft" else [])
    data = read_columns(dt, names).to_pylist()  # deletion vectors applied
    rows = {}
    for r in data:
        if order == "lsn-soft" and r.get("_deleted"):
            continue
        assert r["id"] not in rows, f"key {r['id']} twice in the table"
        rows[r["id"]] = (r["amount"], r["name"])
    return rows
