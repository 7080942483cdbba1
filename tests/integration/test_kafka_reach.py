"""A client cut off from every broker is told apart from a cluster that is away (connector/kafka/reach.py), with
real clients and the suite's broker: a consumer that reaches no broker while a new client of the connector's
settings reaches the cluster is cut off; a consumer that reaches the broker is not; nor is one when the new client
reaches nothing either (the cluster is away: replacing the client would not help); and the probe never has the broker
create the topic it names."""
from __future__ import annotations

import uuid

from confluent_kafka import Consumer

from connector.kafka.clients import KafkaClients
from connector.kafka.reach import cut_off
from connector.local.ports import free_port
from testkit import create_topic

PROBE_S = 2.0


def consumer_of(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"reach-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "log_level": 0})


def test_a_consumer_that_reaches_no_broker_while_the_cluster_answers_is_cut_off(kafka_bootstrap, make_topic):
    topic = make_topic(partitions=1)
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there: the client knows no broker that answers
    lost = consumer_of(nowhere)
    live = consumer_of(kafka_bootstrap)
    try:
        assert cut_off(lost, KafkaClients(kafka_bootstrap), topic, timeout_s=PROBE_S)
        assert not cut_off(live, KafkaClients(kafka_bootstrap), topic, timeout_s=PROBE_S)
        assert not cut_off(lost, KafkaClients(nowhere), topic, timeout_s=PROBE_S)  # the cluster itself is away
    finally:
        lost.close()
        live.close()


def test_the_probe_of_a_topic_that_does_not_exist_leaves_it_so(kafka_bootstrap, admin):
    """The new client's metadata request names the topic; the suite's broker, as Kafka's default, creates a topic on
    first use for a client that lets it: lakesink's admin clients never do. The broker hands such a creation to its
    controller before it answers, so a creation of the topic with three partitions after the probe fails (the topic
    exists) or finds one partition (the broker's default) if the probe's request created it."""
    missing = f"reach-missing-{uuid.uuid4().hex[:8]}"
    lost = consumer_of(f"127.0.0.1:{free_port()}")
    try:
        assert cut_off(lost, KafkaClients(kafka_bootstrap), missing, timeout_s=PROBE_S)
    finally:
        lost.close()
    create_topic(admin, missing, 3)
