"""What the table's history says about a connector's committed offsets, read before it resumes from them (read-only,
JVM-free; the coordinator runs both checks before its epoch claim, which would hide what they look for):

- a RESTORE of the table to a version before the connector's last commit. Delta keeps the txn (SetTransaction)
  actions through a RESTORE, so the committed offsets would resume after rows the RESTORE took away (`restore.policy`:
  stop, or read again from the offsets of the connector's last commit the restored version holds);
- another connector's state, or rows of the same topics, in a table where this connector has none: a renamed
  connector (the name is the txnAppId and the state prefix) would read its topics again (`rename.policy`).

The walk over the log is a pure function (`find_restore`) of what one commit's commitInfo says.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from connector.errors import CommitError, TableHistoryError
from connector.protocol.messages import Offsets, txn_version
from connector.schema.columns import TOPIC
from connector.table.recovery import Recovered, Recovery
from connector.table.snapshot import log_entry
from connector.table.state import META_DIR, read_commit_metadata

log = logging.getLogger(__name__)

RESTORE = "RESTORE"
UNKNOWN = -1
"""What `ours` answers for a lakesink commit it cannot tell (an older lakesink's commit whose manifest is gone)."""

RESTORE_POLICIES = ("fail", "reread")
RENAME_POLICIES = ("fail", "ignore")


@dataclass(frozen=True)
class Restored:
    """The table was RESTOREd (Delta version `restore`) to version `target` (None: to a timestamp), which holds no
    commit of this connector after `kept` (a txn version; None: no commit of it at all). `known`: whether `kept`
    could be told (the log of the versions walked is still there and each lakesink commit in it could be placed)."""

    restore: int
    target: int | None
    kept: int | None
    known: bool = True


def find_restore(commit_info: Callable[[int], dict | None], current: int, last: int,
                 ours: Callable[[dict], int | None]) -> Restored | None:
    """Whether the table at Delta version `current` still holds the commit of txn version `last` (the connector's last
    commit, which recovery resumes from). Walks the log down from `current`: a commit of the connector (`ours(info)`: its
    txn version, None for any other commit, UNKNOWN when it cannot tell) ends the walk; a RESTORE jumps to the version
    it restored to (the table's content is that version's, plus the commits after the RESTORE); other commits are
    passed over. None: the table holds `last` (no RESTORE, or one to a version at or after it); otherwise the RESTORE
    that took it away (the last one walked through) and what the restored table holds. `commit_info(version)`: that commit's commitInfo,
    None when its log file is gone (cleaned up)."""
    first: tuple[int, int | None] | None = None
    version = current
    while version >= 0:
        info = commit_info(version)
        if info is None:
            return None if first is None else Restored(*first, kept=None, known=False)
        mine = ours(info)
        if mine == UNKNOWN:
            if first is not None:
                return Restored(*first, kept=None, known=False)
            mine = None  # above the last commit, which recovery could place: another connector's
        if mine is not None:
            return None if first is None or mine == last else Restored(*first, kept=mine)
        if info.get("operation") == RESTORE:
            target = restored_to(info)
            first = (version, target)  # the last RESTORE walked through is the one that jumped over the commit
            if target is None or target >= version:
                return Restored(*first, kept=None, known=False)
            version = target
            continue
        version -= 1
    return None if first is None else Restored(*first, kept=None)


def restored_to(info: dict) -> int | None:
    """The version a RESTORE commit restored the table to; None for a RESTORE to a timestamp."""
    params = info.get("operationParameters") or {}
    try:
        return int(params.get("version"))
    except (TypeError, ValueError):
        return None


def commit_info(table: Recovery, version: int) -> dict | None:
    """The commitInfo of Delta version `version`, read from its log file ({} when it has none; None when the file is
    gone). The file, not delta-rs's history, whose entries can carry the wrong version while others commit."""
    data = table.store.read_bytes(log_entry(version))
    if data is None:
        return None
    for line in data.splitlines():
        try:
            action = json.loads(line)
        except ValueError:
            continue
        if isinstance(action, dict) and isinstance(action.get("commitInfo"), dict):
            return action["commitInfo"]
    return {}


def ours(table: Recovery, info: dict) -> int | None:
    """The txn version of a commit of `table`'s connector, None for another writer's, UNKNOWN when a commit of an
    older lakesink (no connector in its user metadata) has no manifest to tell whose it is."""
    meta = read_commit_metadata(info.get("userMetadata"))
    if meta is None:
        return None
    version = txn_version(meta["epoch"], meta["txn"])
    if "connector" in meta:
        return version if meta["connector"] == table.app_id else None
    manifest = table.manifests.read(version)
    if manifest is None:
        return UNKNOWN
    return version if manifest.get("instance") == meta.get("instance") else None


def check_restore(table: Recovery, recovered: Recovered, policy: str) -> Recovered:
    """`recovered` when the table still holds the connector's last commit. After a RESTORE that took it away:
    TableHistoryError (one line: what happened, what to do) with `policy` fail; with `reread`, the offsets (and topic
    ids) of the connector's last commit the restored table holds, from its manifest (none: the connector starts as a
    new one), which the epoch claim then commits."""
    if policy not in RESTORE_POLICIES:
        raise ValueError(f"restore.policy must be one of {', '.join(RESTORE_POLICIES)}, got {policy!r}")
    if recovered.version is None or recovered.table_version is None:
        return recovered
    found = restored(table, recovered.table_version, recovered.version)
    if found is None:
        return recovered
    what = describe(table, found, recovered.version, recovered.offsets)
    undo = f"or RESTORE the table to version {found.restore - 1} (before that RESTORE) to bring the rows back"
    if policy == "fail":
        raise TableHistoryError(
            f"{what}. Nothing was read or committed: set restore.policy=reread to read those records again from the "
            f"offsets of its last commit the restored table holds, {undo}, then start lakesink again")
    if not found.known:
        raise TableHistoryError(
            f"{what}; restore.policy=reread cannot tell which of its commits the restored table holds (a RESTORE to a "
            f"timestamp, or the log of those versions was cleaned up). Nothing was read or committed: RESTORE the "
            f"table TO VERSION AS OF a version, {undo}, then start lakesink again")
    offsets: Offsets
    if found.kept is None:
        offsets, topic_ids = {}, {}
    else:
        try:
            offsets, topic_ids = table.committed_at(found.kept, recovered.table_version)
        except CommitError as exc:
            raise TableHistoryError(
                f"{what}; restore.policy=reread needs the offsets of txn version {found.kept}, the last commit the "
                f"restored table holds, but: {exc}") from None
    log.warning("%s. restore.policy=reread: reading again from the offsets of %s: %s", what,
                f"txn version {found.kept}" if found.kept is not None else "no commit (the connector starts anew)",
                _fmt(offsets))
    return replace(recovered, offsets=offsets, topic_ids=topic_ids)


def restored(table: Recovery, current: int, last: int) -> Restored | None:
    """find_restore over the table's log: whether Delta version `current` still holds the connector's commit of txn
    version `last`."""
    return find_restore(lambda v: commit_info(table, v), current, last, lambda info: ours(table, info))


def describe(table: Recovery, found: Restored, last: int, offsets: Offsets) -> str:
    """What a RESTORE that took the connector's commit of txn version `last` (with `offsets`) away did, in one line."""
    target = f"version {found.target}" if found.target is not None else "a timestamp"
    return (f"{table.table_path} was RESTOREd (Delta version {found.restore}) to {target}, before the last commit of "
            f"connector {table.app_id} (txn version {last}): rows it committed are gone from the table, while its "
            f"committed offsets ({_fmt(offsets)}), which Delta keeps through a RESTORE, would resume after them")


@dataclass(frozen=True)
class Neighbours:
    """What a table holds of the topics of a connector that has no state in it."""

    connectors: dict[str, tuple[str, ...]]  # another connector's name -> the topics its committed offsets cover
    rows: tuple[str, ...]  # topics with rows in the table (`_kafka_topic`)

    def __bool__(self) -> bool:
        return bool(self.connectors or self.rows)


def neighbours(table: Recovery, topics: Iterable[str]) -> Neighbours:
    """The other connectors whose committed offsets (their state under `_lakesink/<name>/`) cover any of `topics`,
    and which of `topics` have rows in the table. Connectors of other topics are not neighbours: several connectors
    may share a table."""
    wanted = sorted(set(topics))
    names = set()
    for info in table.store.list(META_DIR, recursive=True):
        parts = table.store.relative(info.path).split("/")
        if len(parts) == 4 and parts[0] == META_DIR and parts[2] == "commits" and parts[1] != table.app_id:
            names.add(parts[1])
    connectors: dict[str, tuple[str, ...]] = {}
    for name in sorted(names):
        try:
            offsets = Recovery.of(table.store, table.table_path, name).recover().offsets
        except CommitError as exc:  # its state is unreadable: its rows, if any, are found below
            log.debug("the state of connector %s in %s is unreadable: %s", name, table.table_path, exc)
            continue
        shared = sorted({t for t, _ in offsets} & set(wanted))
        if shared:
            connectors[name] = tuple(shared)
    return Neighbours(connectors, _topics_with_rows(table, wanted))


def _topics_with_rows(table: Recovery, topics: list[str]) -> tuple[str, ...]:
    import pyarrow.dataset as ds

    dt = table.snapshot.delta()
    if dt is None or not topics or TOPIC not in dt.schema().to_arrow().names:
        return ()
    dataset = dt.to_pyarrow_dataset()
    found = []
    for topic in topics:  # the files' statistics skip most of the table
        if dataset.scanner(columns=[TOPIC], filter=ds.field(TOPIC) == topic).head(1).num_rows:
            found.append(topic)
    return tuple(found)


def check_rename(table: Recovery, recovered: Recovered, topics: Iterable[str], policy: str,
                 auto_offset_reset: str) -> None:
    """A connector with no committed offsets in a table that holds another connector's state or rows of its topics:
    TableHistoryError with `policy` fail (one line naming them and what to do), a WARNING with `ignore`."""
    if policy not in RENAME_POLICIES:
        raise ValueError(f"rename.policy must be one of {', '.join(RENAME_POLICIES)}, got {policy!r}")
    if recovered.version is not None or recovered.table_version is None:
        return
    found = neighbours(table, topics)
    if not found:
        return
    held = []
    if found.connectors:
        held.append("the committed offsets of lakesink connector(s) " + ", ".join(
            f"{name} ({META_DIR}/{name}/: topic(s) {', '.join(ts)})" for name, ts in found.connectors.items()))
    if found.rows:
        held.append(f"rows of topic(s) {', '.join(found.rows)} ({TOPIC})")
    shared = sorted({t for ts in found.connectors.values() for t in ts} | set(found.rows))
    what = (f"connector {table.app_id} has no committed offsets in {table.table_path}, which already holds "
            f"{' and '.join(held)}: it would read {', '.join(shared)} again from kafka.auto.offset.reset="
            f"{auto_offset_reset} (appended, every record a second time)")
    if policy == "ignore":
        log.warning("%s; rename.policy=ignore: going on", what)
        return
    rename = (f"if {table.app_id} is {' or '.join(found.connectors)} renamed, set name={next(iter(found.connectors))} "
              f"again; " if found.connectors else "")
    raise TableHistoryError(f"{what}. Nothing was read or committed: {rename}to read these topics into this table "
                            f"again knowingly, set rename.policy=ignore")


def _fmt(offsets: Offsets) -> str:
    return ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items())) or "none"
