"""A Kafka client cut off from its cluster for good, told apart from a cluster that is away.

librdkafka drops every broker it knows that a Metadata response does not list. A broker shutting down can answer
with a list of none (it no longer counts itself among the live brokers), and in a cluster of one broker, or one
restarted whole, that leaves the client with no broker at all: it never connects again, although the cluster is back
seconds later, and it reports nothing. A group consumer so cut off never rejoins its group; a worker holding no
partition would wait for ever (docs/ARCHITECTURE.md, "Kafka clients cut off by a broker's restart").

Whether a client is cut off is asked of two clients: the client itself, whose metadata request fails, and a new
client of the same settings, whose request succeeds. When both fail, the cluster is away and the client is kept.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connector.clock import Clock
from connector.kafka.clients import KafkaClients

PROBE_TIMEOUT_S = 5.0
"""How long each of the two metadata requests may take."""


def reaches(client: Any, topic: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """`client` (a Consumer, Producer or AdminClient) gets metadata from a broker within `timeout_s`."""
    try:
        client.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException:
        return False
    return True


def cut_off(client: Any, kafka: KafkaClients, topic: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """`client` reaches no broker while a new admin client of `kafka`'s settings does: replace it. `topic` narrows
    both metadata requests to one topic (None: every topic)."""
    if reaches(client, topic, timeout_s):
        return False
    return reaches(AdminClient(kafka.config("admin")), topic, timeout_s)


class CutOffWatch:
    """When to ask `cut_off` of a client: once a symptom (no partition held, nothing read) has lasted `after_s`,
    then every `every_s` at most while it lasts."""

    def __init__(self, clock: Clock, after_s: float, every_s: float = 10.0) -> None:
        self.clock = clock
        self.after_s = after_s
        self.every_s = every_s
        self._since: float | None = None
        self._asked_at: float | None = None

    def due(self, symptom: bool) -> bool:
        now = self.clock.monotonic()
        if not symptom:
            self._since = None
            return False
        if self._since is None:
            self._since = now
        if now - self._since < self.after_s:
            return False
        if self._asked_at is not None and now - self._asked_at < self.every_s:
            return False
        self._asked_at = now
        return True

    def ask(self, symptom: bool, is_cut_off: Callable[[], bool]) -> bool:
        """`is_cut_off()` when `due(symptom)`, else False. The next ask is timed from the end of this one: while the
        cluster is away each ask waits out its metadata requests, and the caller's loop must still get its turns."""
        if not self.due(symptom):
            return False
        try:
            return is_cut_off()
        finally:
            self._asked_at = self.clock.monotonic()

    def reset(self) -> None:
        """The client was replaced: the symptom is timed afresh."""
        self._since = None
