"""Offset resets: where a START's offsets move when Kafka no longer holds them (offset.reset.policy), and which
partitions start with their topic for the first time (kafka.auto.offset.reset). Pure, like the state machine that
applies them (coordinator/state.py): the runtime reads the bounds and topic ids from Kafka
(coordinator/offsets.py)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from connector.errors import OffsetOutOfRangeError, TopicRecreatedError
from connector.protocol.messages import Offsets, TopicPartition

TopicIds: TypeAlias = Mapping[str, str]
"""Kafka topic id (AdminClient.describe_topics) by topic name: a topic deleted and created again has another."""


@dataclass(frozen=True)
class OffsetReset:
    """A START offset moved off `committed`, an offset its partition no longer holds (the partition holds
    [low, high] now), to `offset`: the log start or the end. `recreated`: (the topic id the offset was committed
    in, the topic's id now) when the topic was deleted and created again; the offset then belongs to another topic,
    whatever range the new one holds."""

    topic_partition: TopicPartition
    committed: int
    low: int
    high: int
    offset: int
    recreated: tuple[str, str] | None = None

    @property
    def below(self) -> bool:
        """Below the log start (records deleted); otherwise above the end or recreated (the offsets started over)."""
        return self.recreated is None and self.committed < self.low

    @property
    def skipped(self) -> int:
        """How many offsets are never read: below the log start, [committed, offset); where the offsets started over
        (above the end, recreated), [low, offset)."""
        return self.offset - (self.committed if self.below else self.low)

    def describe(self) -> str:
        t, p = self.topic_partition
        if self.recreated is not None:
            where = f"the topic was recreated: id {self.recreated[0]} then, {self.recreated[1]} now"
        else:
            where = "below the log start" if self.below else "above the end"
        return (f"{t}-{p} from {self.committed} ({where}; the partition holds {self.low}..{self.high}) to "
                f"{self.offset}, {self.skipped} offsets skipped")


@dataclass(frozen=True)
class OffsetCheck:
    """What the runtime's check found before a START: the resets its offsets need, and each topic's id now (a topic
    left out: its id is unknown, the one recorded stays)."""

    resets: tuple[OffsetReset, ...] = ()
    topic_ids: TopicIds = field(default_factory=dict)


RESET_POLICIES = ("fail", "earliest", "latest")


def offset_resets(offsets: Offsets, low: Mapping[TopicPartition, int], high: Mapping[TopicPartition, int],
                  policy: str, recorded_ids: TopicIds | None = None,
                  current_ids: TopicIds | None = None) -> list[OffsetReset]:
    """The partitions whose offset lies outside [low, high] (the log start and end Kafka reports now), or whose
    topic's id is not the one the offsets were committed with (`recorded_ids` vs `current_ids`: the topic was deleted
    and created again), and where `policy` moves them: `earliest` to the log start, `latest` to the end. A partition
    with no offset, or (topic ids aside) whose bounds are unknown, is left alone; a topic without a recorded id (a
    table of an older lakesink) is only range-checked. With `fail`, any such partition raises OffsetOutOfRangeError
    (TopicRecreatedError when a topic was recreated)."""
    if policy not in RESET_POLICIES:
        raise ValueError(f"offset.reset.policy must be one of {', '.join(RESET_POLICIES)}, got {policy!r}")
    recorded, current = recorded_ids or {}, current_ids or {}
    resets = []
    for tp in sorted(offsets):
        offset, lo, hi = offsets[tp], low.get(tp), high.get(tp)
        if offset is None:
            continue
        was, now = recorded.get(tp[0]), current.get(tp[0])
        if was is not None and now is not None and was != now:
            # the bounds of a topic just created are nearly always listed; if not, its start is 0 (and reading too
            # much of the new topic beats skipping any of it)
            lo = 0 if lo is None else lo
            hi = lo if hi is None else hi
            resets.append(OffsetReset(tp, offset, lo, hi, lo if policy == "earliest" else hi, recreated=(was, now)))
            continue
        if lo is None or hi is None or lo <= offset <= hi:
            continue
        resets.append(OffsetReset(tp, offset, lo, hi, lo if policy == "earliest" else hi))
    if resets and policy == "fail":
        raise _reset_refused(resets)
    return resets


def _reset_refused(resets: list[OffsetReset]) -> OffsetOutOfRangeError:
    """The one-line error of offset.reset.policy=fail."""
    recreated: dict[str, list[OffsetReset]] = {}
    for r in resets:
        if r.recreated is not None:
            recreated.setdefault(r.topic_partition[0], []).append(r)
    out_of_range = [r for r in resets if r.recreated is None]
    parts = [f"topic {topic} was deleted and created again since its offsets were committed: its topic id was "
             f"{rs[0].recreated[0]} then and is {rs[0].recreated[1]} now, so the committed offsets "  # type: ignore[index]
             f"{', '.join(f'{topic}-{r.topic_partition[1]}@{r.committed}' for r in rs)} belong to a topic that no "
             f"longer exists" for topic, rs in sorted(recreated.items())]
    if out_of_range:
        parts.append("committed offsets outside what their partitions hold: " + "; ".join(
            f"{r.topic_partition[0]}-{r.topic_partition[1]} committed {r.committed}, "
            f"{'log start' if r.below else 'end'} {r.low if r.below else r.high} "
            f"(the partition holds {r.low}..{r.high})" for r in out_of_range))
    if recreated:
        todo = ("set offset.reset.policy=earliest to read the new topic from its start, or latest to read it from "
                "its end, knowingly")
        return TopicRecreatedError("; ".join(parts) + f". Nothing was read from the new topic and nothing "
                                   f"committed: {todo}, or restore the old topic and start again")
    return OffsetOutOfRangeError(
        parts[0] + ". Nothing was skipped and nothing committed: set offset.reset.policy=earliest or latest to skip "
        "to the log start or end knowingly, or restore the records (or the topic) and start again")


def first_starts(offsets: Offsets, known_topics: Iterable[str]) -> list[TopicPartition]:
    """The partitions of `offsets` that start for the first time with their topic (kafka.auto.offset.reset applies
    to them): no offset, and no offset for any partition of their topic, nor a topic in `known_topics`. A partition
    without an offset of a topic that has some was added to the topic later: it starts at its beginning."""
    known = set(known_topics) | {tp[0] for tp, o in offsets.items() if o is not None}
    return [tp for tp in sorted(offsets) if offsets[tp] is None and tp[0] not in known]
