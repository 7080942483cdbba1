"""Partition watermarks through the AdminClient: no consumer, no group, one request per call."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TypeAlias

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient, OffsetSpec

log = logging.getLogger(__name__)

TopicPartition: TypeAlias = tuple[str, int]
"""(topic, partition), the pair connector/protocol/messages.py names too: spelled here so that the Kafka helpers do
not import the control protocol, which is built on them."""


def list_offsets(admin: AdminClient, partitions: Iterable[TopicPartition], earliest: bool = False,
                 timeout_s: float = 5.0, read_committed: bool = True) -> dict[TopicPartition, int]:
    """The high watermark of each partition (the last stable offset, as read_committed consumers see it, unless
    `read_committed` is false), or the low watermark (the log start) with `earliest`. Partitions the broker does
    not answer for, or answers without an offset, are left out."""
    spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()
    request = {KafkaTP(t, p): spec for t, p in partitions}
    if not request:
        return {}
    out: dict[TopicPartition, int] = {}
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    try:
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout_s)
    except (KafkaException, ValueError) as exc:
        log.warning("listing offsets failed: %s", exc)
        return out
    for tp, future in futures.items():
        try:
            offset = future.result(timeout_s).offset
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout: that partition has no answer
            log.debug("no %s offset for %s-%d: %s", "earliest" if earliest else "latest", tp.topic, tp.partition, exc)
            continue
        if offset < 0:  # an answer without an offset (OFFSET_INVALID), as a broker just restarted can give
            log.debug("no %s offset for %s-%d: the broker answered %d", "earliest" if earliest else "latest",
                      tp.topic, tp.partition, offset)
            continue
        out[(tp.topic, tp.partition)] = offset
    return out


def topic_ids(admin: AdminClient, topics: Iterable[str], timeout_s: float = 5.0) -> dict[str, str]:
    """The Kafka topic id of each topic (a topic deleted and created again has another), as its text. Topics the
    broker does not answer for (missing, not authorized, a timeout) are left out."""
    names = sorted(set(topics))
    if not names:
        return {}
    out: dict[str, str] = {}
    try:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout_s)
    except (KafkaException, ValueError) as exc:
        log.warning("describing topics %s failed: %s", ", ".join(names), exc)
        return out
    for name, future in futures.items():
        try:
            topic_id = future.result(timeout_s).topic_id
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout: that topic has no answer
            log.debug("no topic id for %s: %s", name, exc)
            continue
        if topic_id is not None and str(topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA"):  # the zero Uuid: unknown
            out[name] = str(topic_id)
    return out


def lag(committed: Mapping[TopicPartition, int | None], high: Mapping[TopicPartition, int],
        low: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, int | None]:
    """high watermark - committed offset per partition; a partition with nothing committed counts from its low
    watermark (0 when unknown). None where the high watermark is unknown."""
    out: dict[TopicPartition, int | None] = {}
    for tp in sorted(set(committed) | set(high)):
        hi = high.get(tp)
        start = committed.get(tp)
        if start is None:
            start = (low or {}).get(tp, 0)
        out[tp] = None if hi is None else max(0, hi - start)
    return out
