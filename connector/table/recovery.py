"""What a table says a connector committed last (its offsets, recovered from the manifest of its txn version), and
the epoch claim that fences older coordinators (docs/ARCHITECTURE.md, "The protocol", step 1).

JVM-free: `lakesink verify` and `lakesink status` read the committed offsets here too; the claim's commit is the
caller's (connector/table/sink.py).
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from connector.errors import CommitError
from connector.protocol.messages import DecodeError, Offsets, decode_offsets, split_version, txn_version
from connector.storage.store import Store
from connector.table.snapshot import TableSnapshot
from connector.table.state import Manifests, read_commit_metadata

log = logging.getLogger(__name__)

CLAIM_ATTEMPTS = 10


@dataclass(frozen=True)
class Recovered:
    """What the table says was committed last."""

    version: int | None  # txn version of the last lakesink commit, None when there is none
    offsets: Offsets
    table_version: int | None  # Delta table version, None when the table does not exist
    # the Kafka topic id of each topic the offsets belong to (none in a table of an older lakesink)
    topic_ids: dict[str, str] = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        return split_version(self.version)[0] if self.version is not None else 0


@dataclass(frozen=True)
class Recovery:
    """Connector `manifests.app_id`'s committed state in the table `snapshot` reads."""

    snapshot: TableSnapshot
    manifests: Manifests

    @classmethod
    def of(cls, store: Store, table_path: str, app_id: str) -> "Recovery":
        return cls(TableSnapshot(store, table_path), Manifests(store, app_id))

    @property
    def app_id(self) -> str:
        return self.manifests.app_id

    @property
    def table_path(self) -> str:
        return self.snapshot.table_path

    @property
    def store(self) -> Store:
        return self.manifests.store

    def recover(self) -> Recovered:
        """Committed offsets from the table. Read-only: a manifest above the txn version was not committed *yet*
        and may be the write-ahead manifest of a coordinator between steps 1 and 3 right now, so it is left
        alone (claim_epoch claims an epoch above every manifest instead; prune_manifests removes old ones)."""
        dt = self.snapshot.delta()
        if dt is None:
            return Recovered(None, {}, None)
        version = dt.transaction_version(self.app_id)
        if version is None:
            version = self.expired_txn_version(dt)
            if version is None:
                return Recovered(None, {}, dt.version())
        offsets, topic_ids = self.committed_at(version, dt.version())
        return Recovered(version, offsets, dt.version(), topic_ids)

    def expired_txn_version(self, dt) -> int | None:
        """The connector's last committed txn version when the table no longer reports its txn: a table with
        delta.setTransactionRetentionDuration forgets txns older than that (delta-rs already when it reads them), so
        a connector stopped for longer finds none. Its newest manifest whose commit is in the table's history is the
        last commit (the claim that follows restores the txn). None when no manifest was ever committed."""
        versions = self.manifests.versions()
        if not versions:
            return None
        committed = set()
        for entry in dt.history():
            meta = read_commit_metadata(entry.get("userMetadata"))
            if meta is not None:
                committed.add((meta.get("epoch"), meta.get("txn"), meta.get("instance")))
        for version in reversed(versions):
            manifest = self.manifests.read(version) or {}
            if (manifest.get("epoch"), manifest.get("txn"), manifest.get("instance")) in committed:
                log.warning("%s no longer reports connector %s's txn (expired under "
                            "delta.setTransactionRetentionDuration); its last commit, txn version %d, is in the "
                            "table's history: recovering its offsets from that manifest", self.table_path,
                            self.app_id, version)
                return version
        return None

    def offsets_at(self, version: int, latest_table_version: int) -> Offsets:
        """The offsets committed with txn version `version`: those of its manifest, except for an epoch claim
        that a commit of the older coordinator overtook (it landed between the claimer's recovery and its claim,
        so the claim carried older offsets forward): then that commit's. Read-only."""
        return self.committed_at(version, latest_table_version)[0]

    def committed_at(self, version: int, latest_table_version: int) -> tuple[Offsets, dict[str, str]]:
        """(offsets, topic ids) committed with txn version `version` (offsets_at); the topic ids are those the
        offsets were read from ({} in a manifest of an older lakesink)."""
        manifest = self.manifests.read(version)
        if manifest is None:
            raise CommitError(
                f"table {self.table_path} records lakesink txn version {version} for connector {self.app_id!r} "
                f"but its manifest {self.manifests.path(version)} is missing: the _lakesink folder was removed or "
                f"the table was copied without it; restore it, or start a new connector name (with "
                f"rename.policy=ignore) to re-ingest.",
                permanent=True)
        if manifest.get("txn") == 0 and manifest.get("base_table_version") is not None:
            overtaking = self._overtaking_commit(version, manifest.get("base_version"),
                                                 manifest["base_table_version"], latest_table_version)
            if overtaking is not None:
                log.warning("the epoch claim %d carried the offsets of txn version %s forward, but txn version %d "
                            "was committed in between: its offsets are the committed ones", version,
                            manifest.get("base_version"), overtaking)
                return self.committed_at(overtaking, latest_table_version)
        ids = manifest.get("topic_ids")
        topic_ids = {str(k): str(v) for k, v in ids.items()} if isinstance(ids, dict) else {}
        try:
            return decode_offsets(manifest["offsets"]), topic_ids
        except (KeyError, DecodeError) as exc:
            raise CommitError(f"manifest {self.manifests.path(version)} holds no readable offsets ({exc}): restore "
                              f"it from a backup of the table's _lakesink folder", permanent=True) from None

    def _overtaking_commit(self, claim: int, base: int | None, base_table_version: int,
                           latest_table_version: int) -> int | None:
        """The connector's last txn version committed after the claimer's recovery (Delta version
        `base_table_version`) and before the claim itself, unless that is still `base`. None as well when the
        log of those versions was cleaned up (the claim is long settled: its claimer checked it at once)."""
        last = base
        for v in range(base_table_version + 1, latest_table_version + 1):
            try:
                txn = self.store.delta_table(version=v).transaction_version(self.app_id)
            except Exception:  # noqa: BLE001 - that version's log is gone
                return None
            if txn == claim:
                return last if last != base else None
            last = txn
        return None

    def safe_txn_version(self) -> int | None:
        """The connector's txn version in the table, None as well when it cannot be read."""
        try:
            return self.snapshot.txn_version(self.app_id)
        except Exception:  # noqa: BLE001
            return None

    def claim_epoch(self, recovered: Recovered, commit: Callable[..., object],
                    recover: Callable[[], Recovered] | None = None) -> int:
        """Fence older coordinators: commit an empty append at `epoch << 32` carrying the offsets forward, with
        `epoch` above the table's and above every manifest's (a crashed or live coordinator's write-ahead manifest
        of a newer epoch is never reused). Before the table exists there is nothing to fence; the commit that
        creates it is put-if-absent. A claim that loses Delta's conflict check to a commit of the coordinator it
        fences (ConcurrentTransactionException: both set this connector's txn version) is claimed again from a
        fresh recovery (`recover`, by default `self.recover`). The claim records the topic ids with the offsets.
        `commit`: the commit recipe (connector/table/sink.py DeltaTableSink.commit)."""
        attempt = 1
        while True:
            epoch = max(recovered.epoch, self.manifests.highest_epoch()) + 1
            if recovered.table_version is None:
                return epoch
            version = txn_version(epoch, 0)
            try:
                commit(version, recovered.offsets, (), claim_base=recovered, topic_ids=recovered.topic_ids)
                log.info("claimed epoch %d on %s (txn version %d)", epoch, self.table_path, version)
                return epoch
            except CommitError as exc:
                if attempt >= CLAIM_ATTEMPTS or self.safe_txn_version() == recovered.version:
                    raise  # not overtaken by another commit: a real failure
                log.warning("epoch claim %d lost to a concurrent commit (%s); recovering and claiming again",
                            version, exc)
                time.sleep(random.uniform(0.1, 1.0))  # off the rhythm of the other coordinator's commits
                recovered = (recover or self.recover)()
                attempt += 1
