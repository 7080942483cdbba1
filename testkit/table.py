"""A lakesink table read JVM-free (delta-rs and the Delta log files), and the exactly-once audit of its source
coordinates. `table` is a local path or a connector.storage.store.Store (a local directory or an S3 prefix)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def table_store(config: Path):
    """The connector.storage.store.Store of the table a properties file names (local or S3)."""
    from connector.config import load_config
    from connector.storage.store import Store

    return Store.for_config(load_config(config))


def _store(table):
    from connector.storage.store import Location, Store

    return table if isinstance(table, Store) else Store(Location.parse(str(table)))


def open_table(table):
    """The delta-rs table at `table`, None when there is none."""
    return _store(table).delta_table()


def lakesink_commits(table) -> list[tuple[int, int, int, str]]:
    """(table version, epoch, txn, instance) of every lakesink commit in the Delta log, oldest first, read from the
    log files themselves. delta-rs's `history()` numbers its entries downwards from the version its snapshot was
    loaded at but reads commits the store has now: while a coordinator commits, every entry it returns can carry
    the wrong version."""
    from connector.table.state import read_commit_metadata

    store = _store(table)
    out = []
    for info in store.list("_delta_log"):
        name = info.path.rsplit("/", 1)[-1]
        if not (name.endswith(".json") and name[:-5].isdigit()):
            continue
        for line in (store.read_bytes(f"_delta_log/{name}") or b"").splitlines():
            lakesink = read_commit_metadata(json.loads(line).get("commitInfo", {}).get("userMetadata"))
            if lakesink is not None:
                out.append((int(name[:-5]), lakesink["epoch"], lakesink["txn"], lakesink["instance"]))
    return sorted(out)


def files_in_flight(table) -> list[str]:
    """Data files in the table location that the table does not reference (yet): a transaction written by
    participants and not committed."""
    store = _store(table)
    dt = store.delta_table()
    referenced = set() if dt is None else set(dt.get_add_actions(flatten=True).column("path").to_pylist())
    names = (store.relative(i.path) for i in store.list("", recursive=True))
    return [n for n in names if n.endswith(".parquet") and not n.startswith(("_delta_log/", "_lakesink/"))
            and n not in referenced]


def table_offsets(table) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) in the table, read with delta-rs."""
    dt = open_table(table)
    if dt is None:
        return []
    from connector.app.verify_table import read_columns

    data = read_columns(dt, ["_kafka_topic", "_kafka_partition", "_kafka_offset"])  # deletion vectors applied
    return list(zip(data.column(0).to_pylist(), data.column(1).to_pylist(), data.column(2).to_pylist()))


def audit(table, expected: dict[tuple[str, int], range]) -> dict[str, object]:
    """Compare the table's source coordinates with the produced ranges: exactly once, nothing else."""
    seen = Counter(table_offsets(table))
    want = {(t, p, o) for (t, p), r in expected.items() for o in r}
    return {
        "rows": sum(seen.values()),
        "missing": len(want - set(seen)),
        "duplicated": sum(c - 1 for c in seen.values() if c > 1),
        "unexpected": len(set(seen) - want),
    }


def exactly_once(table, expected: dict[tuple[str, int], range]) -> bool:
    a = audit(table, expected)
    return a["missing"] == 0 and a["duplicated"] == 0 and a["unexpected"] == 0
