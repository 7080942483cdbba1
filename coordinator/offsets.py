"""What the coordinator reads from Kafka and the table for a START: the committed offsets recovered (the table's
history checked), the partitions expected, where each START's offsets must move (offset.reset.policy, applied by the
pure coordinator/resets.py), where a first start of kafka.auto.offset.reset=latest begins, and each partition's lag
for PROGRESS. Every Kafka lookup of the coordinator goes through the one admin client held here.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connector.kafka.watermarks import lag, list_offsets, topic_ids
from connector.protocol.messages import Offsets, TopicPartition
from connector.table import history
from coordinator.resets import OffsetCheck, TopicIds, offset_resets
from coordinator.state import CoordinatorState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetSettings:
    topic_regex: str | None
    reset_policy: str
    read_committed: bool
    """The workers' consumers read committed records only (their isolation.level): the end they read up to."""
    auto_offset_reset: str
    rename_policy: str
    restore_policy: str
    select_topics: Callable[[Iterable[str]], list[str]]
    """The source topics among the topics that exist (LakesinkConfig.source_topics)."""

    @classmethod
    def from_config(cls, cfg) -> "OffsetSettings":
        return cls(cfg.kafka_topic_regex, cfg.offset_reset_policy,
                   cfg.consumer_overrides.get("isolation.level", "read_committed") == "read_committed",
                   cfg.kafka_auto_offset_reset, cfg.rename_policy, cfg.restore_policy, cfg.source_topics)


class SourceOffsets:
    """The offsets a START needs, read through one admin client, made when first needed and released by close()."""

    def __init__(self, settings: OffsetSettings, admin: Callable[[], AdminClient]) -> None:
        """`admin`: makes the admin client (AdminClient over the connector's Kafka settings)."""
        self.settings = settings
        self._make_admin = admin
        self._admin_client: AdminClient | None = None
        self._resets_warned: set[tuple[TopicPartition, int]] = set()  # (partition, committed) warned about
        self._regex_topics: set[str] | None = None  # the topics kafka.topic.regex matched at the last START

    @property
    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            self._admin_client = self._make_admin()
        return self._admin_client

    def close(self) -> None:
        self._admin_client = None

    def recover(self, sink):
        """The committed offsets, after the table's history is checked (connector/table/history.py): a connector
        with no offsets in a table holding another's of its topics (rename.policy), a RESTORE that took rows of its
        commits away (restore.policy: stop, or the offsets to read again from, which the claim then commits). Before
        the claim, which would hide both."""
        recovered = sink.recover()
        history.check_rename(sink.recovery, recovered, self.source_topics(), self.settings.rename_policy,
                             self.settings.auto_offset_reset)
        return history.check_restore(sink.recovery, recovered, self.settings.restore_policy)

    def partitions(self, state: CoordinatorState) -> list[TopicPartition]:
        """The expected partitions, re-read from Kafka metadata at every START. With kafka.topic.regex, a partition
        of a matching topic joins once a worker holds it or it has a committed offset: a topic created while
        running is waited for only when a worker's subscription has found it too."""
        md = self._metadata()
        out: list[TopicPartition] = []
        topics = self.settings.select_topics(md.topics)
        if self.settings.topic_regex is not None:
            self._note_topics(set(topics))
        for topic in topics:
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                log.warning("source topic %s is not available (%s); it takes no part in this txn", topic,
                            tmd.error if tmd else "missing")
                continue
            found = [(topic, p) for p in sorted(tmd.partitions)]
            if self.settings.topic_regex is not None:
                committed = state.committed_offsets
                found = [tp for tp in found if tp in committed or state.owner_of(tp) is not None]
            out.extend(found)
        return out

    def source_topics(self) -> list[str]:
        """The source topics now: kafka.topic.names, or the topics kafka.topic.regex matches (read from Kafka's
        metadata only then)."""
        if self.settings.topic_regex is None:
            return self.settings.select_topics(())
        return self.settings.select_topics(self._metadata().topics)

    def _metadata(self):
        """The cluster's metadata. An admin client that does not get it is dropped, and the next call makes a new
        one: a client may have lost every broker for good (connector/kafka/reach.py)."""
        try:
            return self._admin.list_topics(timeout=30)
        except KafkaException:
            self._admin_client = None
            raise

    def _note_topics(self, topics: set[str]) -> None:
        """Log the topics that began or stopped matching kafka.topic.regex (created, deleted) since the last START."""
        if self._regex_topics is not None:
            for topic in sorted(topics - self._regex_topics):
                log.info("topic %s matches kafka.topic.regex %r: it joins once a worker holds it", topic,
                         self.settings.topic_regex)
            for topic in sorted(self._regex_topics - topics):
                log.warning("topic %s, sunk through kafka.topic.regex, no longer exists; its committed offsets stay in "
                            "the table and the other topics go on", topic)
        self._regex_topics = topics

    def check(self, offsets: Offsets, recorded_ids: TopicIds | None = None) -> OffsetCheck:
        """Before every START: the partitions whose offset Kafka no longer holds (below the log start, above the
        end, or of a topic whose id is not `recorded_ids`' one: deleted and created again), moved as
        offset.reset.policy says (or OffsetOutOfRangeError with `fail`), and the topic ids now. The end is what a
        worker's consumer reads up to (its isolation.level)."""
        ids = topic_ids(self._admin, {t for t, _ in offsets})
        known = {tp: o for tp, o in offsets.items() if o is not None}
        if not known:
            return OffsetCheck((), ids)
        low = list_offsets(self._admin, known, earliest=True)
        high = list_offsets(self._admin, known, read_committed=self.settings.read_committed)
        resets = offset_resets(known, low, high, self.settings.reset_policy, recorded_ids or {}, ids)
        for reset in resets:
            if (reset.topic_partition, reset.committed) not in self._resets_warned:
                log.warning("offset.reset.policy=%s: skipping %s", self.settings.reset_policy, reset.describe())
        self._resets_warned = {(reset.topic_partition, reset.committed) for reset in resets}
        return OffsetCheck(tuple(resets), ids)

    def ends(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """kafka.auto.offset.reset=latest: where partitions starting with their topic for the first time start."""
        out = list_offsets(self._admin, partitions, read_committed=self.settings.read_committed)
        if out:
            log.info("kafka.auto.offset.reset=latest: %s start at their end (their topic's first start)",
                     ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(out.items())))
        return out

    def lags(self, offsets: Offsets) -> Mapping[TopicPartition, int | None]:
        """Each partition's lag behind `offsets` (None: its end was not read within 2 s)."""
        return lag(offsets, list_offsets(self._admin, offsets, timeout_s=2.0))
