"""The dead-letter producer: records lakesink cannot write go to one Kafka topic, and count as handled only once
the broker has confirmed each of them with a delivery report without error (`confirm`).

A record too large for the topic is produced cut to fit, with the header `__lakesink.truncated` holding its
original size (key, value and headers, in bytes): the limit is the smaller of the producer's
`message.max.bytes` and the topic's `max.message.bytes`, read once from the broker; a record the broker still
refuses as too large is produced again, cut further, so a large record never blocks the topics behind it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from connector.errors import LakesinkError
from connector.kafka.clients import CONNECTION_PREFIXES, KafkaClients, is_fatal

log = logging.getLogger(__name__)

TOPIC_HEADER = "__connect.errors.topic"
PARTITION_HEADER = "__connect.errors.partition"
OFFSET_HEADER = "__connect.errors.offset"
CONNECTOR_HEADER = "__connect.errors.connector.name"
CLASS_HEADER = "__connect.errors.exception.class.name"
MESSAGE_HEADER = "__connect.errors.exception.message"
SOURCE_HEADERS = (TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER)
"""Kafka Connect's headers that say where a dead-letter record came from: topic, partition, offset."""
MESSAGE_MAX_BYTES = 4096
"""The most bytes of an error's message (UTF-8) that `__connect.errors.exception.message` holds."""
TRUNCATED_HEADER = "__lakesink.truncated"
"""Set on a dead-letter record that was cut to fit its topic: the record's original size in bytes, in decimal."""
KEPT_HEADERS = frozenset({*SOURCE_HEADERS, CONNECTOR_HEADER, CLASS_HEADER, TRUNCATED_HEADER})
"""Headers never cut: they say where the record came from (at-least-once readers deduplicate on them)."""

BATCH_OVERHEAD = 61
"""Bytes of a Kafka record batch (format v2) around its records."""
RECORD_OVERHEAD = 36
"""Upper bound of a record's own framing: length, attributes, timestamp and offset deltas, key and value lengths."""
HEADER_OVERHEAD = 10
"""Upper bound of one header's framing: the lengths of its name and value."""
BROKER_MAX_MESSAGE_BYTES = 1048588
"""The broker's default `message.max.bytes`, which a topic without `max.message.bytes` of its own gets."""
PRODUCER_MESSAGE_MAX_BYTES = 1000000
"""librdkafka's default `message.max.bytes`."""
DELIVERY_TIMEOUT_MS = 30000
"""The dead-letter producer's `message.timeout.ms` unless `producer.message.timeout.ms` is set: every record gets
its delivery report within it, so `confirm` ends with a verdict on each."""
CUT_ATTEMPTS = 4
"""How many times one record is produced again, cut further, after the broker refused it as too large."""

_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})

Headers = list[tuple[str, bytes | None]]


class DeadLetterError(LakesinkError):
    """Dead-letter records were not confirmed by the broker: whatever covers their offsets must not be reported."""

    def __init__(self, topic: str, failed: Sequence[int], total: int, first_error: str):
        self.topic = topic
        self.failed = tuple(failed)
        """Positions, in produce order since the previous confirm, of the records not confirmed."""
        super().__init__(f"{len(self.failed)} of {total} record(s) produced to dead-letter topic {topic} were not "
                         f"confirmed by the broker (first error: {first_error}); check that the topic exists and "
                         f"this producer may write to it")


class DeadLetter(NamedTuple):
    """One record for the dead-letter topic, in the order `DeadLetterProducer.produce` takes it."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


def dead_letter(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None,
                timestamp_ms: int | None, *, context: bool, connector: str, error_class: str, message: str,
                source: tuple[str, int, int] | None, reasons: Sequence[tuple[str, bytes | None]] = ()) -> DeadLetter:
    """The dead-letter record of a record lakesink cannot write: its key, value, headers and timestamp as they were,
    then `reasons` (headers of lakesink's own), then, with `context` (errors.deadletterqueue.context.headers.enable),
    Kafka Connect's `__connect.errors.*` headers in Connect's order: where it came from (`source`: topic, partition,
    offset, when known), the connector, the error's class and its message (at most MESSAGE_MAX_BYTES of UTF-8)."""
    out = [*(headers or []), *reasons]
    if context:
        if source is not None:
            topic, partition, offset = source
            out += [(TOPIC_HEADER, topic.encode()), (PARTITION_HEADER, str(partition).encode()),
                    (OFFSET_HEADER, str(offset).encode())]
        out += [(CONNECTOR_HEADER, connector.encode()), (CLASS_HEADER, error_class.encode()),
                (MESSAGE_HEADER, message.encode("utf-8", "replace")[:MESSAGE_MAX_BYTES])]
    return DeadLetter(key, value, out, timestamp_ms or 0)


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """An upper bound of the bytes one record takes in a record batch, framing included."""
    return (RECORD_OVERHEAD + len(key or b"") + len(value or b"")
            + sum(HEADER_OVERHEAD + len(name.encode()) + len(v or b"") for name, v in headers))


def payload_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """The record's key, value and header bytes: what `__lakesink.truncated` reports."""
    return len(key or b"") + len(value or b"") + sum(len(name.encode()) + len(v or b"") for name, v in headers)


@dataclass(frozen=True)
class Fitted:
    key: bytes | None
    value: bytes | None
    headers: Headers
    original_size: int | None = None
    """The original payload size when the record was cut, else None."""

    @property
    def size(self) -> int:
        return BATCH_OVERHEAD + record_size(self.key, self.value, self.headers)


def fit(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]],
        limit: int) -> Fitted | None:
    """The record as it is when it fits a batch of at most `limit` bytes; otherwise cut to fit, with the header
    `__lakesink.truncated`: first its value, then its key, then the values of its headers from the last to the
    first, never those of `KEPT_HEADERS`. None when even that does not fit."""
    headers = list(headers)
    if BATCH_OVERHEAD + record_size(key, value, headers) <= limit:
        return Fitted(key, value, headers)
    original = payload_size(key, value, headers)
    headers = [h for h in headers if h[0] != TRUNCATED_HEADER] + [(TRUNCATED_HEADER, str(original).encode())]
    over = BATCH_OVERHEAD + record_size(key, value, headers) - limit

    def cut(data: bytes | None) -> bytes | None:
        nonlocal over
        if data is None or over <= 0:
            return data
        take = min(len(data), over)
        over -= take
        return data[:len(data) - take]

    value = cut(value)
    key = cut(key)
    for i in range(len(headers) - 1, -1, -1):
        name, data = headers[i]
        if name not in KEPT_HEADERS:
            headers[i] = (name, cut(data))
    if over > 0:
        return None
    return Fitted(key, value, headers, original)


@dataclass(eq=False)
class _Delivery:
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int
    attempts: int = 0
    sent_size: int = 0
    done: bool = False
    error: str | None = None
    code: int | None = None


class DeadLetterProducer:
    """Produces to one dead-letter topic; `confirm` says whether everything produced since the last one is in."""

    def __init__(self, kafka: KafkaClients | str, topic: str, overrides: Mapping[str, str] | None = None):
        """A producer of `kafka` (or of a bootstrap address), with `overrides` on top of its `producer.*` keys."""
        self.topic = topic
        kafka = KafkaClients.to(kafka, overrides)
        self._config = kafka.config("producer", {"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                                                 "message.timeout.ms": DELIVERY_TIMEOUT_MS})
        self._overrides = dict(kafka.overrides("producer"))
        producer_limit = int(self._config.get("message.max.bytes", PRODUCER_MESSAGE_MAX_BYTES))
        topic_limit = self._topic_limit()
        self.limit = min(producer_limit, topic_limit or BROKER_MAX_MESSAGE_BYTES)
        if "batch.size" not in self._overrides:
            self._config["batch.size"] = min(PRODUCER_MESSAGE_MAX_BYTES, self.limit)  # a batch must fit the topic
        self._delivery_timeout_s = int(self._config.get("delivery.timeout.ms",
                                                        self._config["message.timeout.ms"])) / 1000
        self._producer = Producer(self._config)
        self._batch: list[_Delivery] = []
        self._broken = False
        self.truncated = 0
        """Records produced cut to fit, since this producer started."""

    def produce(self, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]],
                timestamp_ms: int = 0) -> None:
        delivery = _Delivery(key, value, list(headers), timestamp_ms)
        self._batch.append(delivery)
        self._send(delivery, self.limit)

    def confirm(self, timeout_s: float | None = None) -> int:
        """Wait for the delivery report of every record produced since the last confirm (at most `timeout_s`,
        by default the producer's delivery timeout and a margin); returns how many there were. Raises
        DeadLetterError unless every one was delivered. Either way the next confirm covers only what follows."""
        batch, self._batch = self._batch, []
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self._delivery_timeout_s + 5)
        self._producer.flush(max(0.0, deadline - time.monotonic()))
        refreshed: int | None = None
        for d in batch:
            while d.done and d.code in _TOO_LARGE and d.attempts <= CUT_ATTEMPTS and time.monotonic() < deadline:
                if refreshed is None:
                    refreshed = self._topic_limit() or self.limit
                    self.limit = min(self.limit, refreshed)
                # A batch too large fails every record in it: a record first goes again alone, cut to the limit
                # if it is above it, and only a record refused alone is cut further.
                alone = d.attempts > 1
                self._send(d, d.sent_size // 2 if alone and d.sent_size <= self.limit else self.limit)
                self._producer.flush(max(0.0, deadline - time.monotonic()))
        failed = [i for i, d in enumerate(batch) if not d.done or d.error is not None]
        if self._broken:
            self._renew()
        if failed:
            first = batch[failed[0]]
            error = first.error if first.done else f"no delivery report within {self._delivery_timeout_s:.0f} s"
            raise DeadLetterError(self.topic, failed, len(batch), error)
        return len(batch)

    def close(self, timeout_s: float = 10.0) -> None:
        self._producer.flush(timeout_s)

    def _send(self, d: _Delivery, limit: int) -> None:
        d.attempts += 1
        d.done, d.error, d.code = False, None, None
        fitted = fit(d.key, d.value, d.headers, limit)
        if fitted is None:
            d.done, d.error = True, (f"the record does not fit in {limit} bytes even cut down to the headers that "
                                     f"say where it came from: raise max.message.bytes of topic {self.topic}")
            return
        d.sent_size = fitted.size
        if fitted.original_size is not None:
            self.truncated += 1
            log.warning("dead-letter record cut from %d to %d bytes to fit %d bytes in topic %s (header %s holds the "
                        "original size)", fitted.original_size,
                        payload_size(fitted.key, fitted.value, fitted.headers), limit, self.topic, TRUNCATED_HEADER)
        while True:
            try:
                self._producer.produce(self.topic, key=fitted.key, value=fitted.value, headers=fitted.headers,
                                       timestamp=d.timestamp_ms, on_delivery=lambda err, msg, d=d: self._report(d, err))
                break
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                self._report(d, exc.args[0])
                return
        self._producer.poll(0)

    def _report(self, d: _Delivery, error: KafkaError | None) -> None:
        d.done = True
        if error is not None:
            d.error, d.code = error.str(), error.code()
            if is_fatal(error):
                self._broken = True

    def _renew(self) -> None:
        """A fatal error leaves a librdkafka producer unusable: the next records go through a new one."""
        log.warning("the dead-letter producer of topic %s had a fatal error; replacing it", self.topic)
        self._producer.flush(0)
        self._producer = Producer(self._config)
        self._broken = False

    def _topic_limit(self) -> int | None:
        """The topic's max.message.bytes, or None when the broker does not say (e.g. the topic does not exist)."""
        admin_config = {k: v for k, v in self._config.items()
                        if k.startswith((*CONNECTION_PREFIXES, "client.", "socket."))}
        resource = ConfigResource(ResourceType.TOPIC, self.topic)
        admin = AdminClient(admin_config)  # held until the answer is in: a destroyed client fails its requests
        try:
            future = admin.describe_configs([resource], request_timeout=10)[resource]
            entry = future.result(timeout=15).get("max.message.bytes")
        except (KafkaException, ValueError, TimeoutError) as exc:
            log.info("max.message.bytes of dead-letter topic %s unknown (%s); assuming the broker default %d",
                     self.topic, exc, BROKER_MAX_MESSAGE_BYTES)
            return None
        return int(entry.value) if entry is not None and entry.value is not None else None
