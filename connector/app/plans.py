"""The tables `status`, `verify` and `validate` look at: connector/routing.py's `plan`, which for a connector that
reads `kafka.topic.regex` needs the topics that exist now."""
from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connector.config import LakesinkConfig
from connector.errors import SetupError
from connector.kafka.clients import KafkaClients, check_connection
from connector.routing import TablePlan, plan


def existing_topics(cfg: LakesinkConfig, timeout_s: float) -> list[str]:
    """The names of the topics the brokers know. Raises SetupError (one line) when none answers within
    `timeout_s` or the login is refused."""
    kafka = KafkaClients.of(cfg)
    check_connection(kafka, timeout_s)  # says why a broker is unreachable; list_topics only times out
    try:
        return sorted(AdminClient(kafka.config("admin")).list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise SetupError(f"Kafka {cfg.kafka_bootstrap_servers} did not list its topics: {exc.args[0].str()}") from None


def table_plans(cfg: LakesinkConfig, timeout_s: float) -> list[TablePlan]:
    """Every table the connector writes now; the brokers are asked for the topics only when the tables come from
    them (`kafka.topic.regex` with several tables). Raises SetupError as `existing_topics` does."""
    regex_tables = cfg.many_tables and cfg.kafka_topic_regex is not None
    return plan(cfg, existing_topics(cfg, timeout_s) if regex_tables else ())
