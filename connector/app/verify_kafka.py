"""`lakesink verify`'s reading of Kafka (connector/app/verify.py): the source partitions read only inside the
ranges the table misses, and the dead-letter topic, to classify each missing offset."""
from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from connector.app.verify_analysis import I64, SAMPLES, PartitionReport, no_offsets, width
from connector.config import LakesinkConfig
from connector.errors import SetupError
from participant.route import RecordRouter

MERGE_DISTANCE = 10_000
"""Missing ranges closer than this many offsets are read from Kafka in one pass instead of one seek each."""


# --- Kafka: classify the missing offsets ---------------------------------------------------------------

class KafkaCheck:
    """Reads the source partitions (read_committed) only inside missing ranges, and the dead-letter topic."""

    def __init__(self, cfg: LakesinkConfig, budget: int, timeout_s: float = 15.0):
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        from connector.kafka.clients import KafkaClients

        self._kafka = KafkaClients.of(cfg)
        self._admin = AdminClient(self._kafka.config("admin"))
        # verify's own settings over the consumer.* keys: it reads only what a worker may commit (read_committed)
        self._consumer = Consumer({**self._kafka.config("consumer"), "group.id": f"lakesink-verify-{uuid.uuid4().hex}",
                                   "enable.auto.commit": False, "enable.auto.offset.store": False,
                                   "isolation.level": "read_committed", "enable.partition.eof": False,
                                   "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        self.budget = budget
        self.timeout_s = timeout_s
        self.records_read = 0

    def reachable(self) -> str | None:
        """None when the broker answers, else why not (a refused login or certificate named as such)."""
        from connector.kafka.clients import check_connection

        try:
            check_connection(self._kafka, self.timeout_s)
            return None
        except SetupError as exc:
            return str(exc)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        from confluent_kafka import TopicPartition

        from connector.protocol.channel import watermarks

        try:
            low, high = watermarks(self._consumer, TopicPartition(topic, partition), self.timeout_s)
        except Exception:  # noqa: BLE001 - a partition that no longer exists has no watermarks
            return None
        return low, high

    def _read(self, topic: str, partition: int, start: int, end: int, on_batch) -> int:
        """Feed `on_batch` every batch Kafka delivers (read_committed) from `start` until the position reaches
        `end`, the record budget runs out or nothing moves for timeout_s. Returns where reading stopped."""
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(topic, partition, start)])
        position, idle_since = start, time.monotonic()
        try:
            while position < end and self.records_read < self.budget:
                batch = [m for m in self._consumer.consume(10_000, timeout=0.5) if m.error() is None]
                self.records_read += len(batch)
                if batch:
                    on_batch(batch)
                current = self._consumer.position([TopicPartition(topic, partition)])[0].offset
                if current > position:
                    position, idle_since = current, time.monotonic()
                elif time.monotonic() - idle_since > self.timeout_s:
                    break
        finally:
            self._consumer.unassign()
        return min(position, end)

    def delivered(self, topic: str, partition: int, start: int, end: int, router: RecordRouter | None = None
                  ) -> tuple[pa.Array, pa.Array, int]:
        """Offsets in [start, end) Kafka delivers with read_committed: those the table takes (all of them without
        `router`), those `router` leaves to another table, and where reading stopped (end unless the record budget
        ran out or the partition stalled)."""
        taken: list[int] = []
        elsewhere: list[int] = []

        def collect(batch) -> None:
            ours, others = split_routed([m for m in batch if start <= m.offset() < end], router)
            taken.extend(ours)
            elsewhere.extend(others)

        reached = self._read(topic, partition, start, end, collect)
        return pa.array(taken, I64), pa.array(elsewhere, I64), reached

    def dead_lettered(self, dlq_topic: str, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], pa.Array]:
        """Source offsets named by the context headers of the dead-letter topic's records, per wanted partition."""
        md = self._admin.list_topics(topic=dlq_topic, timeout=self.timeout_s).topics.get(dlq_topic)
        out: dict[tuple[str, int], list[int]] = {k: [] for k in wanted}

        def collect(batch) -> None:
            for m in batch:  # the dead-letter topic holds failed records only: small
                coord = _dlq_coordinates(m.headers())
                if coord is not None and coord[:2] in out:
                    out[coord[:2]].append(coord[2])

        if md is not None and md.error is None:
            for p in sorted(md.partitions):
                marks = self.watermarks(dlq_topic, p)
                if marks is not None and marks[1] > marks[0]:
                    self._read(dlq_topic, p, marks[0], marks[1], collect)
        return {k: pa.array(sorted(set(v)), I64) for k, v in out.items()}

    def close(self) -> None:
        self._consumer.close()


def split_routed(msgs: list, router: RecordRouter | None) -> tuple[list[int], list[int]]:
    """The offsets of `msgs` (one partition's, in offset order) that the table takes: the records `router` keeps
    and those it answers for as record errors (all of them without a router); and the offsets of the others,
    which another table takes."""
    if router is None or not msgs:
        return [m.offset() for m in msgs], []
    kept, failures = router.pick(msgs)
    taken = {m.offset() for m in kept} | {f.offset for f in failures}
    return sorted(taken), [m.offset() for m in msgs if m.offset() not in taken]


def _dlq_coordinates(headers) -> tuple[str, int, int] | None:
    from connector.kafka.deadletter import SOURCE_HEADERS

    found = {k: v for k, v in (headers or []) if k in SOURCE_HEADERS and v is not None}
    try:
        return (found[SOURCE_HEADERS[0]].decode(), int(found[SOURCE_HEADERS[1]]), int(found[SOURCE_HEADERS[2]]))
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def _clip(starts: pa.Array, ends: pa.Array, low: int, high: int) -> tuple[pa.Array, pa.Array]:
    if not len(starts):
        return starts, ends
    s, e = pc.max_element_wise(starts, low), pc.min_element_wise(ends, high)
    keep = pc.greater(e, s)
    return s.filter(keep), e.filter(keep)


def _windows(starts: pa.Array, ends: pa.Array) -> list[tuple[int, int]]:
    """Merge ranges closer than MERGE_DISTANCE into read windows (a loop over ranges, not records)."""
    out: list[tuple[int, int]] = []
    for s, e in zip(starts.to_pylist(), ends.to_pylist()):
        if out and s - out[-1][1] < MERGE_DISTANCE:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def classify_missing(reports: list[PartitionReport], kafka: KafkaCheck, cfg: LakesinkConfig,
                     marks: dict[tuple[str, int], tuple[int, int]], router: RecordRouter | None = None,
                     table_dead: dict[tuple[str, int], pa.Array] | None = None) -> list[str]:
    """Split every report's missing offsets into expired / not-in-kafka / elsewhere (records `router`, a routed
    table's, leaves to another table) / dead-lettered (in the dead-letter topic, or in the dead-letter table:
    `table_dead`, its offsets by partition) / gaps / unchecked."""
    notes: list[str] = []
    candidates: dict[tuple[str, int], pa.Array] = {}
    for rep in reports:
        if not rep.missing:
            continue
        wm = marks.get(rep.key)
        if wm is None:
            notes.append(f"{rep.topic}-{rep.partition}: no such partition in Kafka; {rep.missing} missing offset(s) "
                         f"left unchecked")
            continue
        low, high = wm
        s_in, e_in = _clip(rep._starts, rep._ends, low, high)
        rep.expired = width(*_clip(rep._starts, rep._ends, -1, low))
        rep.not_in_kafka = width(*_clip(rep._starts, rep._ends, high, 2 ** 63 - 1))
        if rep.not_in_kafka:
            notes.append(f"{rep.topic}-{rep.partition}: committed offset {rep.committed} is beyond the partition's end "
                         f"{high}: was the topic deleted and re-created?")
        checked = 0
        found: list[pa.Array] = []
        away: list[pa.Array] = []
        for a, b in _windows(s_in, e_in):
            got, other, reached = kafka.delivered(rep.topic, rep.partition, a, b, router)
            found.append(got)
            away.append(other)
            checked += width(*_clip(s_in, e_in, a, reached))
            if reached < b:
                notes.append(f"{rep.topic}-{rep.partition}: stopped reading Kafka at offset {reached} (record budget "
                             f"or a stalled fetch); offsets past it stay unchecked")
                break
        # a delivered offset inside the missing ranges that the table lacks is one of the missing ones
        got = pa.concat_arrays(found) if found else no_offsets()
        present = pc.unique(got.filter(pc.invert(pc.is_in(got, value_set=rep._present))))
        other = pa.concat_arrays(away) if away else no_offsets()
        rep.elsewhere = len(pc.unique(other.filter(pc.invert(pc.is_in(other, value_set=rep._present)))))
        rep.not_in_kafka += checked - len(present) - rep.elsewhere
        rep.unchecked = rep.missing - rep.expired - rep.not_in_kafka - len(present) - rep.elsewhere
        if len(present):
            candidates[rep.key] = present.take(pc.sort_indices(present))
    if candidates:
        by_key = {r.key: r for r in reports}
        dlq = cfg.errors_deadletterqueue_topic_name
        dead = kafka.dead_lettered(dlq, set(candidates)) if dlq else {}
        if dlq and not cfg.errors_deadletterqueue_context_headers_enable:
            notes.append("errors.deadletterqueue.context.headers.enable=false: dead-lettered records carry no source "
                         "coordinates, so records in Kafka but not in the table cannot be matched to the DLQ")
        for key, present in candidates.items():
            rep = by_key[key]
            letters = [a for a in (dead.get(key), (table_dead or {}).get(key)) if a is not None]
            in_dlq = pc.is_in(present, value_set=pa.concat_arrays([a.cast(pa.int64()) for a in letters])
                              if letters else no_offsets())
            rep.dead_lettered = int(pc.sum(in_dlq).as_py() or 0)
            real = present.filter(pc.invert(in_dlq))
            rep.gaps = len(real)
            rep.gap_samples = real.slice(0, SAMPLES).to_pylist()
    return notes
