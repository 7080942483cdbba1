"""The sweep of lakesink's own files that no table version references: data files of transactions that were
discarded (a timeout, a failed commit, a crash between a participant's write and the commit) and large write
statuses of transactions that are over.

A data file of this connector is `part-<connector>-e<epoch>-t<txn>-...` (participant.filegroup). It is deleted
only when all of these hold, so that nothing a table version references is ever deleted:
  - its txn version is below the connector's committed txn version: the txn can never commit any more (Delta
    skips a txn version at or below the committed one);
  - it is not in the table's current snapshot, and its txn is not in the table's history (a committed file
    removed later, by OPTIMIZE or DELETE, belongs to VACUUM and time travel, not to the sweep);
  - it is older than `orphan.files.retention.ms`, and younger than the oldest commit of the history read (older
    files cannot be told apart from committed ones and are left alone).
A local data file a participant was still writing when it died (`.part-...parquet.<hex>.tmp`,
connector.table.datafiles.TEMPORARY) is never part of a table: it goes by the first and the age rules alone, as do
the large write statuses and the staged dead-letter files (`_lakesink/<connector>/deadletters/e<epoch>-t<txn>-...`,
which the dead-letter table's commit copies, connector/table/dead_letter_table.py).
"""
from __future__ import annotations

import logging
import re
import time
import urllib.parse
from dataclasses import dataclass

from connector.faults import fault_point
from connector.protocol.messages import txn_version
from connector.table.datafiles import TEMPORARY, data_file_prefix
from connector.table.dead_letter_table import STAGING_DIR as DEAD_LETTER_STAGING
from connector.table.state import META_DIR, read_commit_metadata, state_prefix

log = logging.getLogger(__name__)

HISTORY_LIMIT = 2000
"""How many of the newest commits the sweep reads to tell committed files from discarded ones."""


@dataclass(frozen=True)
class SweepResult:
    deleted: int
    kept_young: int
    scanned: int


def sweep(sink, retention_s: float, now: float | None = None) -> SweepResult:
    """Delete this connector's unreferenced files under the table of `sink` (a DeltaTableSink), by the rules of
    this module. Reads the snapshot, the history and one listing of the table location."""
    now = time.time() if now is None else now
    dt = sink.delta()
    if dt is None:
        return SweepResult(0, 0, 0)
    current = dt.transaction_version(sink.app_id)
    if current is None:
        current = sink.expired_txn_version(dt)
    if current is None:
        return SweepResult(0, 0, 0)
    store = sink.store
    pattern = re.compile(re.escape(data_file_prefix(sink.app_id)) + r"e(\d+)-t(\d+)-")
    status_prefix = f"{state_prefix(sink.app_id)}/status/"
    letters_prefix = f"{state_prefix(sink.app_id)}/{DEAD_LETTER_STAGING}/"
    referenced: set[str] | None = None
    history: tuple[set[tuple[int, int]], float] | None = None
    deleted = young = scanned = 0
    for info in store.list("", recursive=True):
        relative = store.relative(info.path)
        state = relative.startswith((status_prefix, letters_prefix))  # lakesink's own, never in the table
        if relative.startswith(("_delta_log/", f"{META_DIR}/")) and not state:
            continue
        name = relative.rsplit("/", 1)[-1]
        temporary = TEMPORARY.match(name)
        if temporary is not None:
            name = temporary.group(1)
        match = pattern.match(name) if not state else (_STATUS_TAG.search(relative) if relative.startswith(
            status_prefix) else _LETTERS_TAG.match(name))
        if match is None:
            continue
        scanned += 1
        version = txn_version(int(match.group(1)), int(match.group(2)))
        if version >= current:
            continue
        modified = info.mtime.timestamp() if info.mtime is not None else now
        if now - modified < retention_s:
            young += 1
            continue
        if not state and temporary is None:
            if referenced is None:
                referenced = _snapshot_paths(dt)
            if relative in referenced:
                continue
            if history is None:
                history = _committed(dt)
            committed, oldest = history
            if (int(match.group(1)), int(match.group(2))) in committed or modified < oldest:
                continue
        fault_point("coordinator.during-sweep")
        store.delete(relative)
        deleted += 1
    if deleted:
        log.info("swept %d file(s) of connector %s that no version of %s references (older than %.0f s)", deleted,
                 sink.app_id, sink.table_path, retention_s)
    return SweepResult(deleted, young, scanned)


_STATUS_TAG = re.compile(r"/status/e(\d+)-t(\d+)/")
_LETTERS_TAG = re.compile(r"e(\d+)-t(\d+)-")


def _snapshot_paths(dt) -> set[str]:
    actions = dt.get_add_actions(flatten=True)
    paths = actions.column("path").to_pylist() if actions.num_rows else []
    return {urllib.parse.unquote(p) for p in paths} | set(paths)


def _committed(dt) -> tuple[set[tuple[int, int]], float]:
    """(epoch, txn) of every lakesink commit in the newest HISTORY_LIMIT commits, and the time of the oldest one
    read (epoch seconds; 0 when the whole history was read)."""
    entries = dt.history(HISTORY_LIMIT)
    committed: set[tuple[int, int]] = set()
    for entry in entries:
        meta = read_commit_metadata(entry.get("userMetadata"))
        if meta is not None:
            committed.add((meta["epoch"], meta["txn"]))
    if len(entries) < HISTORY_LIMIT:
        return committed, 0.0
    oldest = min((entry.get("timestamp") or 0) for entry in entries) / 1000
    return committed, oldest
