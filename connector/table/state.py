"""lakesink's own state in a table: the manifests of its commits, the file lists of large write statuses, the names
of a txn, and the user metadata every lakesink commit carries (docs/ARCHITECTURE.md, "A WRITE-STATUS").

JVM-free, like connector/table/snapshot.py: participants stage and report with it, and so does the coordinator.
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, replace

from connector.errors import CommitError
from connector.protocol.messages import StagedFile, WriteStatus, decode_files, encode_files, split_version
from connector.storage.store import Store

log = logging.getLogger(__name__)

META_DIR = "_lakesink"
KEEP_MANIFESTS = 100
STATUS_INLINE_BYTES = 256 << 10
"""A WRITE-STATUS whose file list is larger names an object holding it instead (the control topic's records are
limited to 1 MB by default)."""


def state_prefix(connector: str) -> str:
    """`_lakesink/<connector>` in the table: this connector's manifests and large write statuses, apart from any
    other connector's that writes to the same table (Delta and VACUUM ignore paths that start with `_`)."""
    return f"{META_DIR}/{connector}"


def txn_tag(epoch: int, txn: int) -> str:
    return f"e{epoch:06d}-t{txn:08d}"


def _parse_tag(name: str) -> tuple[int, int] | None:
    try:
        e, t = name.split("-")
        return int(e[1:]), int(t[1:])
    except ValueError:
        return None


def commit_metadata(epoch: int, txn: int, instance: str, connector: str) -> str:
    """The user metadata of a lakesink commit (Delta's `commitInfo.userMetadata`): whose commit it is, which txn."""
    return json.dumps({"lakesink": {"epoch": epoch, "txn": txn, "instance": instance, "connector": connector}})


def read_commit_metadata(user_metadata: str | None) -> dict | None:
    """The `lakesink` object of a commit's user metadata (epoch, txn, instance, connector: commit_metadata), None for
    another writer's commit."""
    try:
        meta = json.loads(user_metadata or "{}").get("lakesink")
    except (ValueError, AttributeError):
        return None
    if isinstance(meta, dict) and isinstance(meta.get("epoch"), int) and isinstance(meta.get("txn"), int):
        return meta
    return None


@dataclass(frozen=True)
class Manifests:
    """The write-ahead manifests of one connector's commits, `_lakesink/<connector>/commits/<version>.json`."""

    store: Store
    app_id: str

    @property
    def prefix(self) -> str:
        return f"{state_prefix(self.app_id)}/commits"

    @property
    def where(self) -> str:
        """Where the manifests are, for messages."""
        return f"{self.store.root.delta_uri}/{self.prefix}"

    def path(self, version: int) -> str:
        return f"{self.prefix}/{version:020d}.json"

    def read(self, version: int) -> dict | None:
        data = self.store.read_bytes(self.path(version))
        return None if data is None else json.loads(data)

    def versions(self) -> list[int]:
        names = (info.base_name for info in self.store.list(self.prefix))
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def highest_epoch(self) -> int:
        """The newest epoch any coordinator has written a manifest for, committed or not (0 when none)."""
        versions = self.versions()
        return split_version(versions[-1])[0] if versions else 0

    def prune(self, keep: int = KEEP_MANIFESTS) -> None:
        versions = self.versions()
        for v in versions[:-keep]:
            self.store.delete(self.path(v))


# --- write statuses ------------------------------------------------------------------------------------------------

def status_files(store: Store, app_id: str, files: list[StagedFile], schemas: tuple[str, ...],
                 topic_partition: tuple[str, int], worker: str, tag: str, inline_bytes: int = STATUS_INLINE_BYTES
                 ) -> tuple[tuple[StagedFile, ...], tuple[str, ...], str | None]:
    """(files, schemas, files_ref) for a WRITE-STATUS: as they are, or, when they would make the message
    larger than `inline_bytes`, none of them and the name of an object in the table location holding them."""
    body = json.dumps({"files": encode_files(tuple(files)), "schemas": list(schemas)}).encode()
    if len(body) <= inline_bytes:
        return tuple(files), tuple(schemas), None
    topic, partition = topic_partition
    ref = f"{state_prefix(app_id)}/status/{tag}/{topic}-{partition}-{worker}-{uuid.uuid4().hex[:8]}.json"
    store.write_file(ref, body)
    log.info("the file list of %s-%d (%d files, %d bytes) is in %s", topic, partition, len(files), len(body), ref)
    return (), (), ref


def resolve(store: Store, table_path: str, statuses: tuple[WriteStatus, ...]) -> tuple[WriteStatus, ...]:
    """The statuses with every file list read from the object a status names instead."""
    out = []
    for s in statuses:
        if s.files_ref is not None:
            data = store.read_bytes(s.files_ref)
            if data is None:
                raise CommitError(f"the file list {s.files_ref} of {s.topic}-{s.partition}'s WRITE-STATUS is "
                                  f"missing from {table_path}")
            body = json.loads(data)
            s = replace(s, files=decode_files(body["files"]), schemas=tuple(body["schemas"]), files_ref=None)
        out.append(s)
    return tuple(out)
