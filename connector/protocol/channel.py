"""All control-topic I/O: create/check the topic, produce, consume, decode, filter by connector.

The coordinator and participant state machines never touch Kafka; they get decoded messages from here and
hand back what to send. Several connectors may share one control topic: messages are keyed by connector name
and every other connector's messages are dropped here (counted).
"""
from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from connector.errors import NameConflictError, ProtocolError, SetupError
from connector.kafka.clients import KafkaClients
from connector.kafka.reach import cut_off
from connector.protocol.messages import (
    Assignment,
    CommitFailed,
    DecodeError,
    EndCommit,
    Message,
    Progress,
    StartCommit,
    UnknownMessageType,
    decode,
    encode,
)
from connector.secrets import scrub, scrub_data

log = logging.getLogger(__name__)

_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
              KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN}
IGNORE_REASONS = ("other_connector", "undecodable", "unknown_type")
"""What the channel drops before any state machine sees it (its stats, control_messages_ignored_total)."""
CONTROL_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}


def control_producer_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The control producer's settings: `settings` (the `producer.*` keys' included) without a delivery timeout of
    the producer's own. A control message is given up by `ControlChannel.flush` alone, after
    CONTROL_DELIVERY_TIMEOUT_S and with an error: a shorter `producer.message.timeout.ms`, meant for the dead-letter
    producer, would have the client drop a message through a broker's restart, and the round it belongs to end by
    its timeouts without a word."""
    settings = {k: v for k, v in settings.items() if k not in ("message.timeout.ms", "delivery.timeout.ms")}
    settings["message.timeout.ms"] = int(2 * CONTROL_DELIVERY_TIMEOUT_S * 1000)
    return settings


def ensure_control_topic(admin: AdminClient, topic: str, timeout_s: float = 30.0) -> None:
    """Create the single-partition control topic when missing; refuse one with more than one partition."""
    md = admin.list_topics(topic=topic, timeout=timeout_s)
    tmd = md.topics.get(topic)
    if tmd is None or (tmd.error is not None and tmd.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1,
                                                config=CONTROL_TOPIC_CONFIG)])
        try:
            futures[topic].result(timeout_s)
            log.info("created control topic %s", topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise SetupError(f"cannot create control topic {topic!r}: {exc.args[0].str()}; create it with one "
                                 f"partition or grant this client CREATE on the cluster") from None
        tmd = _await_metadata(admin, topic, timeout_s)
    if tmd is None or tmd.error is not None:
        raise SetupError(f"control topic {topic!r} is not available: {tmd.error if tmd else 'no metadata'}")
    if len(tmd.partitions) != 1:
        raise ProtocolError(f"control topic {topic!r} has {len(tmd.partitions)} partitions; the protocol needs exactly "
                            f"one so that every role sees one order of messages: use a new single-partition topic "
                            f"(control.topic.name)")


def _await_metadata(admin: AdminClient, topic: str, timeout_s: float):
    """Metadata of a topic just created: a busy broker may still answer UNKNOWN_TOPIC_OR_PART, or a partition
    without a leader yet, for a moment."""
    deadline = time.monotonic() + timeout_s
    while True:
        tmd = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
        led = tmd is not None and tmd.error is None and tmd.partitions and all(
            p.leader >= 0 and p.error is None for p in tmd.partitions.values())
        if led or time.monotonic() > deadline:
            return tmd
        time.sleep(0.2)


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 30.0) -> tuple[int, int]:
    """(low, high) of a partition; retriable answers (a leader being elected, a broker restarting) are asked
    again until `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in _TRANSIENT) or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _read_range(consumer: Consumer, start: int, end: int, timeout_s: float):
    """The records of the assigned control partition from `start` up to `end`, errors skipped; stops early
    when the broker has nothing more within `timeout_s`."""
    position = start
    while position < end:
        batch = consumer.consume(500, timeout=timeout_s)
        if not batch:
            return
        for raw in batch:
            if raw.error() is None:
                position = raw.offset() + 1
                yield raw


def read_tail(kafka: KafkaClients | str, topic: str, connector: str, last: int = 2000,
              timeout_s: float = 10.0) -> list[Message]:
    """This connector's messages among the newest `last` of the control topic, in order, read with a consumer of
    `kafka` (or of a bootstrap address); read-only (no topic is created, no group joined, nothing produced). Empty
    when the topic does not exist."""
    consumer = Consumer(KafkaClients.to(kafka).config("consumer", {
        "group.id": f"lakesink-status-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "enable.partition.eof": False, "allow.auto.create.topics": False}))
    try:
        tmd = consumer.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            return []
        low, high = watermarks(consumer, TopicPartition(topic, 0), timeout_s)
        start = max(low, high - last)
        if high <= start:
            return []
        consumer.assign([TopicPartition(topic, 0, start)])
        out: list[Message] = []
        for raw in _read_range(consumer, start, high, timeout_s):
            if raw.key() is not None and raw.key() != connector.encode():
                continue
            try:
                msg = decode(raw.value() if raw.value() is not None else b"")
            except DecodeError:
                continue
            if msg.connector == connector:
                out.append(msg)
        return out
    finally:
        consumer.close()


def identity(table: str, topics) -> dict[str, object]:
    """What a connector writes, as its control messages carry it (`identity`): the table's location and its
    source topics. Every process of one connector has the same; two connectors that share a name do not."""
    return {"table": table, "topics": sorted(topics)}


def name_conflict(connector: str, control_topic: str, own: dict | None, other: dict | None) -> str | None:
    """The one-line error when a message of `connector` comes from a connector that writes something else: two
    connectors with one name on one control topic would take each other's messages as their own (and fence each
    other in a loop). None when they agree, or a message carries no identity (an older lakesink)."""
    if own is None or other is None or own == other:
        return None

    def what(ident: dict) -> str:
        topics = ident.get("topics")
        shown = ", ".join(map(str, topics)) if isinstance(topics, list) else "?"
        return f"table {ident.get('table', '?')}, topics {shown}"

    return (f"another connector named {connector} ({what(other)}) uses control topic {control_topic}: give each "
            f"connector its own name (this one: {what(own)}; every process of one connector needs the same table "
            f"and topics)")


def without_secrets(msg: Message) -> Message:
    """The message with the process's secret values scrubbed from its free text: a COMMIT_FAILED's error (an
    exception's text, maybe a storage client's echoing a credential), an ASSIGNMENT's registry error (it may quote
    the registry's URL, credentials included) and a PROGRESS's payload. The other fields are protocol data that no
    configuration value reaches, sent as they are."""
    if isinstance(msg, CommitFailed):
        return replace(msg, error=scrub(msg.error))
    if isinstance(msg, Assignment) and msg.registry_error is not None:
        return replace(msg, registry_error=scrub(msg.registry_error))
    if isinstance(msg, Progress):
        return replace(msg, payload=scrub_data(msg.payload))
    return msg


CONTROL_DELIVERY_TIMEOUT_S = 120.0
"""How long a role waits for a control message to be delivered before it stops: longer than a broker's restart
(an idempotent producer may wait for its producer id after one), shorter than the consumers' poll interval."""

STUCK_CLIENT_S = 20.0
"""After this long without delivering, while the broker names a leader for the control partition, the channel's
producer is taken for stuck: a client that saw the partition without a leader for a moment (a single broker
restarting, a broker fenced by its controller) may never look for the leader again. The messages it has not sent
yet go to a new producer, in their order. The channel's consumer likewise, when it reads nothing for this long
while the partition ends past its position."""


@dataclass
class ControlChannel:
    kafka: KafkaClients | str  # how its admin, producer and consumer connect (a bare bootstrap address: plaintext)
    topic: str
    connector: str
    role: str
    stats: Counter = field(default_factory=Counter)
    # this connector's `identity(...)`, stamped on every message sent; a message of this connector's name with
    # another raises NameConflictError (None: neither stamped nor checked)
    identity: dict | None = None

    def __post_init__(self) -> None:
        if self.identity is not None:  # sent on every message: a secret in a table's location or a topic is masked
            self.identity = scrub_data(self.identity)
        self.kafka = KafkaClients.to(self.kafka)
        self._admin = self._new_admin()
        ensure_control_topic(self._admin, self.topic)
        self._producer = self._new_producer()
        self._purged: list[bytes] = []  # values of messages taken back from a stuck producer, in their order
        self._failed: list[str] = []  # why messages were not delivered (anything but a purge)
        self._consumer = self._new_consumer()
        self._tp = TopicPartition(self.topic, 0)
        self._replay: list[Message] = []
        self._read_at = self._checked_at = time.monotonic()  # the last message read; the last look at the end
        self._holding_since: float | None = None  # since when the producer holds undelivered messages
        self._producer_checked_at = 0.0

    def open(self, replay_last: int = 0) -> "ControlChannel":
        """Start reading at the end; with `replay_last` > 0 first return this connector's newest START-COMMIT
        among that many latest messages, followed by its END-COMMIT if one was sent (a worker joining mid-txn, or
        whose channel opened after the START)."""
        low, high = watermarks(self._consumer, self._tp)
        if replay_last > 0 and high > low:
            self._replay = self._latest_start(max(low, high - replay_last), high)
        self._consumer.assign([TopicPartition(self.topic, 0, high if high >= 0 else OFFSET_END)])
        return self

    def _latest_start(self, start: int, end: int) -> list[Message]:
        self._consumer.assign([TopicPartition(self.topic, 0, start)])
        latest: list[Message] = []
        for raw in _read_range(self._consumer, start, end, 2.0):
            msg = self._decode(raw.value())
            if msg is None or msg.connector != self.connector:
                continue
            if name_conflict(self.connector, self.topic, self.identity, msg.identity):
                continue  # an earlier configuration's, or another connector's: not ours to replay
            if isinstance(msg, StartCommit):
                latest = [msg]
            elif isinstance(msg, EndCommit) and latest and (msg.epoch, msg.txn) == (latest[0].epoch, latest[0].txn):
                latest = [latest[0], msg]
        self._consumer.unassign()
        return latest

    def send(self, msg: Message, flush: bool = True) -> None:
        if msg.connector != self.connector:
            raise ProtocolError(f"{self.role} of {self.connector!r} tried to send a message of {msg.connector!r}")
        if self.identity is not None and msg.identity is None:
            msg = replace(msg, identity=self.identity)
        self._produce(encode(without_secrets(msg)))
        self.stats[f"sent_{type(msg).__name__}"] += 1
        if flush:
            self.flush()

    def _client_id(self) -> str:
        """How the broker's logs and a client's debug log name this role's control clients."""
        return "lakesink-control-" + self.role.replace(" ", "-")

    def _new_admin(self) -> AdminClient:
        return AdminClient(self.kafka.config("admin", {"client.id": self._client_id()}))

    def _new_consumer(self) -> Consumer:
        return Consumer(self.kafka.config("consumer", {
            "group.id": f"lakesink-control-{uuid.uuid4().hex}", "client.id": self._client_id(),
            "enable.auto.commit": False,
            "auto.offset.reset": "latest", "enable.partition.eof": False, "fetch.wait.max.ms": 10}))

    def _new_producer(self) -> Producer:
        return Producer(control_producer_settings(self.kafka.config("producer", {
            "acks": "all", "enable.idempotence": True, "linger.ms": 0, "client.id": self._client_id()})))

    def _produce(self, value: bytes) -> None:
        def delivered(error, _raw) -> None:
            if error is None:
                return
            if error.code() == KafkaError._PURGE_QUEUE:
                self._purged.append(value)
            else:
                self._failed.append(error.str())

        self._producer.produce(self.topic, key=self.connector.encode(), value=value, partition=0,
                               on_delivery=delivered)

    def flush(self, timeout_s: float = CONTROL_DELIVERY_TIMEOUT_S) -> None:
        """Wait until every message sent is delivered; a broker away for a while (a restart, a leader moving) is
        waited for, with a WARNING every 30 s, and only one away for `timeout_s` stops the role. A producer that
        has delivered nothing for STUCK_CLIENT_S while the broker names the partition's leader is replaced."""
        waited, warned_at, replaced_at = 0.0, 0.0, 0.0
        while True:
            step = min(10.0, timeout_s - waited)
            remaining = self._producer.flush(step)
            if self._failed:  # a message that left the queue undelivered: never taken for sent
                failed, self._failed = self._failed, []
                raise ProtocolError(f"{len(failed)} control message(s) refused by {self.topic!r}: {failed[0]}")
            if not remaining:
                return
            waited += step
            if waited >= timeout_s:
                raise ProtocolError(f"{remaining} control message(s) not delivered to {self.topic!r} within "
                                    f"{timeout_s:g} s")
            if waited - replaced_at >= STUCK_CLIENT_S and self._leader_known():
                replaced_at = waited
                self._replace_stuck_producer(waited)
            if waited - warned_at >= 30.0:
                warned_at = waited
                log.warning("%d control message(s) not delivered to %r after %.0f s: still trying (up to %.0f s)",
                            remaining, self.topic, waited, timeout_s)

    def _leader_known(self) -> bool:
        """The broker answers and names a leader for the control partition (a fresh metadata request)."""
        try:
            tmd = self._admin.list_topics(topic=self.topic, timeout=5).topics.get(self.topic)
        except KafkaException:
            self._unless_admin_cut_off()
            return False
        partition = None if tmd is None or tmd.error is not None else tmd.partitions.get(0)
        return partition is not None and partition.error is None and partition.leader >= 0

    def _replace_stuck_producer(self, waited: float) -> None:
        """Take back the messages the producer has not sent (never the ones that left it: those may be written)
        and produce them again, in their order: on a new producer when none is left in flight, else behind those
        on the same one."""
        self._purged = []
        self._producer.purge(in_queue=True, in_flight=False, blocking=True)
        self._producer.poll(0)  # the purged messages' delivery reports
        purged, self._purged = self._purged, []
        if not purged:
            return
        in_flight = len(self._producer)
        if not in_flight:
            self._producer = self._new_producer()
        for value in purged:
            self._produce(value)
        self.stats["producers_replaced" if not in_flight else "messages_requeued"] += 1
        log.warning("%d control message(s) to %r not sent after %.0f s although the broker names the partition's "
                    "leader: %s", len(purged), self.topic, waited,
                    "sending them with a new producer" if not in_flight else
                    f"queued again behind {in_flight} in flight")

    def poll(self, timeout_s: float = 0.1, max_messages: int = 500) -> list[Message]:
        """Decoded messages of this connector, in control-topic order. Garbage is counted, never raised."""
        if self._replay:
            out, self._replay = self._replay, []
            return out
        out: list[Message] = []
        self._unless_producer_stuck()
        batch = self._consumer.consume(max_messages, timeout=timeout_s)
        if batch:
            self._read_at = time.monotonic()
        else:
            self._unless_consumer_stuck()
        for raw in batch:
            err = raw.error()
            if err is not None:
                self.stats["consume_errors"] += 1
                log.debug("control topic consume error: %s", err)
                continue
            if raw.key() is not None and raw.key() != self.connector.encode():
                self.stats["other_connector"] += 1
                continue
            msg = self._decode(raw.value())
            if msg is None:
                continue
            if msg.connector != self.connector:
                self.stats["other_connector"] += 1
                continue
            conflict = name_conflict(self.connector, self.topic, self.identity, msg.identity)
            if conflict is not None:
                raise NameConflictError(conflict)
            out.append(msg)
        return out

    def _unless_producer_stuck(self) -> None:
        """For the messages sent without waiting (flush=False), which no flush watches: a producer that has held
        messages for STUCK_CLIENT_S while the broker names the leader is replaced as in flush. Looked at every
        10 s at most."""
        self._producer.poll(0)  # serves the delivery reports, so that what it still holds is what is undelivered
        now = time.monotonic()
        if not len(self._producer):
            self._holding_since = None
            return
        if self._holding_since is None:
            self._holding_since = now
        if now - self._holding_since < STUCK_CLIENT_S or now - self._producer_checked_at < 10.0:
            return
        self._producer_checked_at = now
        if self._leader_known():
            self._replace_stuck_producer(now - self._holding_since)
            self._holding_since = now

    def _unless_consumer_stuck(self) -> None:
        """A consumer that has read nothing for STUCK_CLIENT_S while the partition's end (asked of the broker
        afresh, through the admin client) lies past its position is taken for stuck: a new consumer reads on from
        that position. Looked at every 10 s at most."""
        now = time.monotonic()
        if now - self._read_at < STUCK_CLIENT_S or now - self._checked_at < 10.0:
            return
        self._checked_at = now
        try:
            position = self._consumer.position([self._tp])[0].offset
            end = self._admin.list_offsets({self._tp: OffsetSpec.latest()}, request_timeout=5)[self._tp].result(5)
        except KafkaException:
            self._unless_admin_cut_off()
            return
        if position < 0 or end.offset <= position:
            return
        quiet = now - self._read_at
        stuck, self._consumer = self._consumer, self._new_consumer()
        self._consumer.assign([TopicPartition(self.topic, 0, position)])
        self._read_at = now
        try:
            stuck.close()
        except (KafkaException, RuntimeError):
            pass  # a client that no longer answers: it is dropped all the same
        self.stats["consumers_replaced"] += 1
        log.warning("the control topic %r ends at %d but nothing was read past %d for %.0f s: reading on with a new "
                    "consumer", self.topic, end.offset, position, quiet)

    def _unless_admin_cut_off(self) -> None:
        """The admin client these checks ask failed: when it has lost every broker for good while a new client
        reaches the cluster (connector/kafka/reach.py), the next check asks a new one."""
        if cut_off(self._admin, self.kafka, self.topic):
            self._admin = self._new_admin()
            self.stats["admins_replaced"] += 1
            log.warning("the %s's admin client reaches no broker, although the cluster answers a new client: "
                        "using a new one", self.role)

    def _decode(self, value: bytes | None) -> Message | None:
        try:
            return decode(value if value is not None else b"")
        except UnknownMessageType:
            self.stats["unknown_type"] += 1
        except DecodeError:
            self.stats["undecodable"] += 1
        return None

    def close(self) -> None:
        try:
            self._producer.flush(5)
        finally:
            self._consumer.close()
