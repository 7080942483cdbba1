"""Configuration: a Java .properties file validated into one typed, frozen LakesinkConfig.

Every key is declared once, as an annotated field of LakesinkConfig: its Python type, its `Key`
(how the text is parsed, one line of documentation) and its default. The parser, the example check
and docs/configuration.md (`python -m connector.config --markdown`) all read that one declaration.
"""

import argparse
import difflib
import os
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import javaproperties
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from connector.errors import ConfigError
from connector.secrets import REDACTED, Scrubber

OffsetReset = Literal["earliest", "latest"]
OffsetResetPolicy = Literal["fail", "earliest", "latest"]
RestorePolicy = Literal["fail", "reread"]
RenamePolicy = Literal["fail", "ignore"]
Codec = Literal["snappy", "zstd", "gzip", "lz4", "none"]
Converter = Literal["json", "string", "bytes", "avro", "protobuf", "json_schema"]
REGISTRY_CONVERTERS = ("avro", "protobuf", "json_schema")
"""Converters whose records carry a schema id and are read through a schema registry."""
Tolerance = Literal["none", "all"]
WriteMode = Literal["append", "upsert", "dedup", "changelog"]
DeleteMode = Literal["hard", "soft"]
MissingFields = Literal["keep", "null"]
Envelope = Literal["none", "debezium"]
NamePolicy = Literal["column_mapping", "sanitize", "error"]
LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

EVENT_ORDER_FIELDS = ("ts_ms", "source.ts_ms", "source.lsn")
"""upsert.order.field values that name a field of a Debezium event rather than of the row."""

PASS_THROUGH = {"consumer.": "consumer_overrides", "producer.": "producer_overrides", "spark.": "spark_conf",
                "schema.registry.": "schema_registry_settings", "value.converter.": "value_converter_settings",
                "key.converter.": "key_converter_settings"}
"""Key prefix -> the LakesinkConfig attribute that collects those keys."""

_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "token", "credential", "jaas")
"""A word of a key that contains one of these names a secret: `sasl.password`, `spark.ssl.keyStorePassword`,
`sasl.oauthbearer.client.secret`, `fs.s3a.session.token`, `spark.kubernetes.authenticate.oauthToken`."""
_RECORD_KEY_NEIGHBOURS = frozenset({"record", "message", "partition", "primary", "sort", "row", "converter",
                                    "deserializer", "serializer", "field", "fields", "schema", "schemas", "columns"})
"""Words beside `key` that make it a record's key, not a cryptographic one: `record.key.fields`, `key.converter`."""
_NOT_A_SECRET_ENDINGS = ("file", "source", "location", "path", "dir", "url", "uri", "endpoint", "host", "port", "type", "class",
                         "provider", "providers", "binding", "algorithm", "mechanism", "method", "enabled", "enable",
                         "size", "length", "bits", "timeout", "seconds")
"""A key whose last word ends so names where or what kind a secret is, or a setting about it, never the secret
itself: `ssl.keystore.location`, `sasl.oauthbearer.token.endpoint.url`, `fs.s3a.aws.credentials.provider`,
`fs.s3a.encryption.algorithm`, `spark.io.encryption.keySizeBits`. Masking those would hide paths and class
names from the very errors that need them (and scrub every `true` or `256` from the logs)."""
_NOT_A_SECRET_LAST_WORDS = frozenset({"id", "ms"})
"""`aws.access.key.id` and `sasl.oauthbearer.client.id` identify credentials without being them."""
_ENV_REF = re.compile(r"\$\{env:([^}]*)\}")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_KAFKA_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OWNED_BY_LAKESINK = {
    "consumer.bootstrap.servers": "kafka.bootstrap.servers",
    "producer.bootstrap.servers": "kafka.bootstrap.servers",
    "consumer.group.id": "kafka.group.id",
    "consumer.auto.offset.reset": "kafka.auto.offset.reset",
    "consumer.group.instance.id": "worker.id",
}


def is_secret(key: str) -> bool:
    """True when a key's value must never be logged or shown: the one definition every output path relies on.

    Secret: a word containing password, passwd, passphrase, secret, token, credential or jaas; a cryptographic `key`
    (an access, secret, account, encryption, private or API key: `fs.s3a.access.key`, `fs.s3a.encryption.key`,
    `fs.azure.account.key.<account>.dfs.core.windows.net`, `ssl.key.pem`, `apiKey`); an Azure SAS
    (`fs.azure.sas.<container>.<account>...`); librdkafka's `sasl.oauthbearer.config`. Not secret: a key whose last
    word names a location, kind or setting (_NOT_A_SECRET_ENDINGS) or is `id` or `ms`, and a record's key
    (`record.key.fields`, `key.converter`). Also applied to `${env:VAR}` names, whose words are separated by `_`."""
    words = _words(key)
    if words[-2:] == ["user", "info"] or words[-1:] == ["userinfo"]:  # basic.auth.user.info: user:password
        return True
    if not words or words[-1] in _NOT_A_SECRET_LAST_WORDS or words[-1].endswith(_NOT_A_SECRET_ENDINGS):
        return False
    if any(part in word for word in words for part in _SECRET_PARTS):
        return True
    if "sas" in words or words[-2:] == ["oauthbearer", "config"]:
        return True
    return any(word == "key" and not _RECORD_KEY_NEIGHBOURS.intersection(words[max(0, i - 1):i + 2])
               for i, word in enumerate(words))


def _words(key: str) -> list[str]:
    """The lower-case words of a key, separated by any of `.`, `_`, `-`; a trailing `key` is a word of its own
    (`apiKey` -> api key, `partitionKey` -> partition key), a leading one is not (`keyStore`, `keySizeBits`)."""
    return [word for word in re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])key\b", ".key", key.lower())) if word]


@dataclass(frozen=True)
class Kind:
    """How the text of a value is parsed. `parse` raises ValueError("expected ..., got '...'")."""

    label: str
    parse: Callable[[str], Any]


@dataclass(frozen=True)
class Key:
    """Field metadata that makes a LakesinkConfig attribute a configuration key."""

    kind: Kind
    doc: str
    derived_default: str | None = None


def _integer(label: str, expected: str, low: int, high: int | None = None) -> Kind:
    def parse(text: str) -> int:
        if not _INTEGER.fullmatch(text) or int(text) < low or (high is not None and int(text) > high):
            raise ValueError(f"expected {expected}, got {text!r}")
        return int(text)

    return Kind(label, parse)


def _choice(options: Sequence[str], aliases: Mapping[str, str] | None = None) -> Kind:
    lookup = {option.lower(): option for option in options}
    lookup.update({alias.lower(): option for alias, option in (aliases or {}).items()})

    def parse(text: str) -> str:
        try:
            return lookup[text.lower()]
        except KeyError:
            raise ValueError(f"expected one of {', '.join(options)}, got {text!r}") from None

    return Kind(" | ".join(options), parse)


def _matching(label: str, pattern: re.Pattern[str], expected: str) -> Kind:
    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(f"expected {expected}, got {text!r}")
        return text

    return Kind(label, parse)


def _parse_bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _parse_text(text: str) -> str:
    if not text:
        raise ValueError("expected a value, got ''")
    return text


def _split(text: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in text.split(","))
    if "" in items:
        raise ValueError(f"expected comma-separated names without empty entries, got {text!r}")
    return items


def _parse_topics(text: str) -> tuple[str, ...]:
    if not text:
        raise ValueError("expected at least one topic name, got ''")
    topics = tuple(TOPIC.parse(topic) for topic in _split(text))
    repeated = sorted({topic for topic in topics if topics.count(topic) > 1})
    if repeated:
        raise ValueError(f"topic {repeated[0]!r} is listed more than once")
    return topics


def _parse_fields(text: str) -> tuple[str, ...]:
    return _split(text) if text else ()


def _parse_regex(text: str) -> str | None:
    if not text:
        return None
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"expected a regular expression (Python's syntax), got {text!r}: {exc}") from None
    return text


def _parse_optional_topic(text: str) -> str | None:
    return TOPIC.parse(text) if text else None


def _parse_optional_text(text: str) -> str | None:
    return text or None


def _parse_endpoint(text: str) -> str | None:
    if not text:
        return None
    if not re.fullmatch(r"https?://[^/\s]+/?", text):
        raise ValueError(f"expected an http:// or https:// URL of host[:port], got {text!r}")
    return text.rstrip("/")


TEXT = Kind("string", _parse_text)
OPTIONAL_TEXT = Kind("string", _parse_optional_text)
ENDPOINT = Kind("URL", _parse_endpoint)
BOOL = Kind("bool", _parse_bool)
NAME = _matching("name", _KAFKA_NAME, "a name of letters, digits, '.', '_' or '-'")
OPTIONAL_NAME = Kind("name", lambda text: NAME.parse(text) if text else None)
TOPIC = _matching("topic", _KAFKA_NAME, "a Kafka topic name of letters, digits, '.', '_' or '-'")
TOPICS = Kind("list of topics", _parse_topics)
REGEX = Kind("regex", _parse_regex)
OPTIONAL_TOPIC = Kind("topic", _parse_optional_topic)
FIELDS = Kind("list of columns", _parse_fields)
IDENTIFIER = _matching("identifier", _IDENTIFIER, "an identifier (a letter or '_', then letters, digits or '_')")
TABLE_TEMPLATE = "${topic}"


def _parse_table_name(text: str) -> str:
    if not _IDENTIFIER.fullmatch(text.replace(TABLE_TEMPLATE, "t")):
        raise ValueError(f"expected an identifier (a letter or '_', then letters, digits or '_'), got {text!r} (a "
                         f"template holds {TABLE_TEMPLATE} where each topic's name goes)")
    return text


def _parse_table_map(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in _split(text) if text else ():
        topic, colon, table = item.partition(":")
        if not colon:
            raise ValueError(f"expected topic:table pairs, got {item!r}")
        pairs.append((TOPIC.parse(topic.strip()), IDENTIFIER.parse(table.strip())))
    topics = [topic for topic, _ in pairs]
    repeated = sorted({topic for topic in topics if topics.count(topic) > 1})
    if repeated:
        raise ValueError(f"topic {repeated[0]!r} is mapped more than once")
    return tuple(pairs)


TABLE_NAME = Kind("table name", _parse_table_name)
TABLE_MAP = Kind("list of topic:table", _parse_table_map)
POSITIVE = _integer("int > 0", "a positive integer", 1)
NON_NEGATIVE = _integer("int ≥ 0", "a non-negative integer", 0)
PORT = _integer("int 0–65535", "a port number from 0 to 65535", 0, 65535)
CONVERTER = _choice(
    get_args(Converter),
    {
        "org.apache.kafka.connect.json.JsonConverter": "json",
        "org.apache.kafka.connect.storage.StringConverter": "string",
        "org.apache.kafka.connect.converters.ByteArrayConverter": "bytes",
        "io.confluent.connect.avro.AvroConverter": "avro",
        "io.confluent.connect.protobuf.ProtobufConverter": "protobuf",
        "io.confluent.connect.json.JsonSchemaConverter": "json_schema",
    },
)
REGISTRY_CLIENT_KEYS = ("url", "basic.auth.credentials.source", "basic.auth.user.info", "ssl.ca.location",
                        "ssl.certificate.location", "ssl.key.location", "ssl.key.password", "timeout", "max.retries",
                        "retries.wait.ms", "retries.max.wait.ms", "cache.capacity", "proxy")
"""The schema-registry client settings lakesink passes on (`schema.registry.<setting>`, or per converter
`value.converter.schema.registry.<setting>` / `key.converter.schema.registry.<setting>`; Kafka Connect's
`<part>.converter.basic.auth.*` too)."""


# --- how every Kafka client connects (security.protocol, sasl.*, ssl.*; built into client settings by
# connector/kafka/clients.py) -------------------------------------------------------------------------------

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
EndpointIdentification = Literal["https", "none"]
_SASL_MECHANISM = _choice(get_args(SaslMechanism))
OPTIONAL_SASL_MECHANISM = Kind(_SASL_MECHANISM.label, lambda text: _SASL_MECHANISM.parse(text) if text else None)
JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
"""The login modules of `sasl.jaas.config` that librdkafka can stand in for, and the mechanisms each serves."""
_JAAS_HEAD = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\b")
_JAAS_OPTION = re.compile(r"""\s*([A-Za-z_][\w.-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"=]+)""")
JAVA_KEYSTORE_KEYS = {
    "ssl.truststore.location": "ssl.ca.location (the CA certificate as a PEM file)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file needs no password)",
    "ssl.truststore.type": "ssl.ca.location (a PEM file)",
    "ssl.keystore.location": "ssl.certificate.location and ssl.key.location (PEM files)",
    "ssl.keystore.password": "ssl.key.password (for an encrypted ssl.key.location)",
    "ssl.keystore.type": "ssl.certificate.location and ssl.key.location (PEM files)",
}
"""Kafka Connect's Java keystore keys: librdkafka reads no JKS, so each is refused naming the PEM keys to use."""


def jaas_login(text: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a one-module JAAS configuration as Kafka Connect takes it
    (`org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";`); ValueError
    when it is not one."""
    head = _JAAS_HEAD.match(text)
    if head is None:
        raise ValueError("expected '<LoginModule class> required name=\"value\" ...;', got something else")
    options: dict[str, str] = {}
    position = head.end()
    while (option := _JAAS_OPTION.match(text, position)) is not None:
        value = option.group(2)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", value[1:-1]) if value.startswith('"') else value
        position = option.end()
    if not re.fullmatch(r"\s*;\s*", text[position:]):
        raise ValueError("expected one login module: '<LoginModule class> required name=\"value\" ...;' ending "
                         "with ';' (values with spaces in double quotes)")
    return head.group(1), options


def _parse_jaas(text: str) -> str | None:
    if not text:
        return None
    module, _ = jaas_login(text)
    if module not in JAAS_MODULES:
        raise ValueError(f"{module.rsplit('.', 1)[-1]} is not supported (librdkafka reads no JAAS: lakesink takes "
                         f"the username and password of PlainLoginModule or ScramLoginModule); for OAUTHBEARER or "
                         f"GSSAPI set sasl.mechanism and the consumer./producer.sasl.oauthbearer.* or "
                         f"sasl.kerberos.* keys")
    return text


JAAS = Kind("JAAS login", _parse_jaas)


class LakesinkConfig(BaseModel):
    """The validated configuration. Attribute names are the dotted keys with '.' replaced by '_'."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    name: Annotated[str, Key(NAME, "Connector name; also the Delta txnAppId and the key of control messages.")]
    kafka_bootstrap_servers: Annotated[str, Key(TEXT, "Kafka brokers to connect to, as `host:port[,host:port...]`.")]
    kafka_topic_names: Annotated[
        tuple[str, ...],
        Key(TOPICS, "Comma-separated source topics sunk into the table; this or `kafka.topic.regex` is required."),
    ] = ()
    kafka_topic_regex: Annotated[
        str | None,
        Key(REGEX, "Instead of `kafka.topic.names`: every topic whose whole name matches this regular expression "
                   "(Python's syntax) is sunk into the table, those created while lakesink runs too (found within "
                   "`topic.refresh.interval.ms`, read from their first offset with the default "
                   "`kafka.auto.offset.reset`). Internal topics (`__...`), the control topic and the dead-letter "
                   "topic never match; a matching topic deleted while running is logged, and the others go on."),
    ] = None
    topic_refresh_interval_ms: Annotated[
        int,
        Key(POSITIVE, "With `kafka.topic.regex`: how often the workers and the coordinator look for new topics that "
                      "match."),
    ] = 60000
    kafka_group_id: Annotated[
        str,
        Key(
            TEXT,
            "Consumer group of the workers; its offsets serve lag monitoring only (the table holds the truth).",
            derived_default="lakesink-<name>",
        ),
    ]
    kafka_auto_offset_reset: Annotated[
        OffsetReset,
        Key(
            _choice(get_args(OffsetReset)),
            "Where a partition with no committed offset in the table starts, at its topic's first start only: "
            "`latest` is the end the coordinator lists at that first START, kept (and committed with the next "
            "commit) so that a discarded or failed txn never moves it. Partitions added to a topic after its first "
            "start begin at their earliest offset whatever this key says (as Spark Structured Streaming and Kafka "
            "Connect do). A committed offset that the partition no longer holds is `offset.reset.policy`'s to "
            "decide, never this key's.",
        ),
    ] = "earliest"
    security_protocol: Annotated[
        SecurityProtocol,
        Key(_choice(get_args(SecurityProtocol)),
            "How every Kafka client of lakesink (workers' consumers, control topic, dead-letter producer, the "
            "coordinator's admin, `status`, `verify`) talks to the brokers: `SASL_SSL` and `SASL_PLAINTEXT` log in "
            "with `sasl.*`, `SSL` and `SASL_SSL` encrypt with `ssl.*`. A `consumer.*` or `producer.*` key of the "
            "same name overrides a connection key for that kind of client (admin clients take `consumer.*`)."),
    ] = "PLAINTEXT"
    sasl_mechanism: Annotated[
        SaslMechanism | None,
        Key(OPTIONAL_SASL_MECHANISM,
            "SASL mechanism: `PLAIN` or `SCRAM-SHA-256`/`SCRAM-SHA-512` log in with `sasl.username` and "
            "`sasl.password` (or `sasl.jaas.config`); `OAUTHBEARER` and `GSSAPI` take librdkafka's "
            "`sasl.oauthbearer.*` / `sasl.kerberos.*` keys with the `consumer.` and `producer.` prefixes. Empty: "
            "`PLAIN` with a PlainLoginModule `sasl.jaas.config`, else librdkafka's default (GSSAPI)."),
    ] = None
    sasl_username: Annotated[str | None, Key(OPTIONAL_TEXT, "SASL user name, with `sasl.password`.")] = None
    sasl_password: Annotated[
        str | None, Key(OPTIONAL_TEXT, "SASL password of `sasl.username` (masked in logs and output; use "
                                       "`${env:VAR}`).")
    ] = None
    sasl_jaas_config: Annotated[
        str | None,
        Key(JAAS, "Kafka Connect's way to give the SASL login, instead of `sasl.username`/`sasl.password`: "
                  "`org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";` "
                  "(or `...plain.PlainLoginModule`); lakesink hands its username and password to librdkafka, which "
                  "reads no JAAS (masked in logs and output)."),
    ] = None
    ssl_ca_location: Annotated[
        str | None, Key(OPTIONAL_TEXT, "PEM file of the CA certificate(s) that signed the brokers' certificates; "
                                       "empty: the system's CA store.")
    ] = None
    ssl_certificate_location: Annotated[
        str | None, Key(OPTIONAL_TEXT, "PEM file of this client's certificate, for brokers that require one (mTLS, "
                                       "`ssl.client.auth=required`), with `ssl.key.location`.")
    ] = None
    ssl_key_location: Annotated[
        str | None, Key(OPTIONAL_TEXT, "PEM file of the private key of `ssl.certificate.location`.")
    ] = None
    ssl_key_password: Annotated[
        str | None, Key(OPTIONAL_TEXT, "Password of an encrypted `ssl.key.location` (masked in logs and output).")
    ] = None
    ssl_endpoint_identification_algorithm: Annotated[
        EndpointIdentification,
        Key(_choice(get_args(EndpointIdentification), {"": "none"}),
            "`https`: a broker's certificate must name the host it is reached at (its SAN); `none` (or empty, as "
            "in Kafka Connect) skips that check, never the CA's. The Java keystore keys (`ssl.truststore.*`, "
            "`ssl.keystore.*`) are refused: librdkafka takes the PEM files of `ssl.ca.location`, "
            "`ssl.certificate.location` and `ssl.key.location`."),
    ] = "https"
    offset_reset_policy: Annotated[
        OffsetResetPolicy,
        Key(
            _choice(get_args(OffsetResetPolicy)),
            "What the coordinator does, before each START, with a committed offset below its partition's log start "
            "(records deleted by retention) or above its end, or of a topic deleted and created again (its Kafka "
            "topic id, recorded with the offsets, differs, even when the new topic holds that offset): `fail` stops "
            "with a one-line error naming the partitions (for a recreated topic: the topic and both ids); `earliest` "
            "/ `latest` knowingly skip to the log start / end (a recreated topic is read from its start / end), "
            "logged at WARNING and counted in the metrics and the PROGRESS record of the commit that makes the skip.",
        ),
    ] = "fail"
    restore_policy: Annotated[
        RestorePolicy,
        Key(
            _choice(get_args(RestorePolicy)),
            "What the coordinator does when the table was RESTOREd to a version before this connector's last commit "
            "(Delta keeps the committed offsets through a RESTORE, so resuming would never bring the rows it took "
            "away back): `fail` stops with a one-line error saying so; `reread` reads again from the offsets of the "
            "connector's last commit the restored version holds (from its manifest under `_lakesink/<name>/`; none: "
            "as a new connector), once, logged at WARNING.",
        ),
    ] = "fail"
    rename_policy: Annotated[
        RenamePolicy,
        Key(
            _choice(get_args(RenamePolicy)),
            "What the coordinator does when this connector has no committed offsets in a table that holds another "
            "connector's offsets of the same topics (`_lakesink/<other name>/`) or rows of them (`_kafka_topic`), as "
            "after a rename of `name`, which would read the topics again: `fail` stops with a one-line error naming "
            "the other connector(s); `ignore` reads them into the table again knowingly, logged at WARNING. "
            "Connectors of other topics may share a table either way.",
        ),
    ] = "fail"

    worker_id: Annotated[
        str | None,
        Key(
            OPTIONAL_NAME,
            "Stable id of a worker process: its consumer `group.instance.id` (static membership: a worker restarted "
            "after a crash takes its partitions back at once, without a rebalance) and its name on the control "
            "topic. Give every worker its own; by default n is the lowest slot no live worker of this group on this "
            "host holds. A worker that stops for good hands its partitions on after `consumer.session.timeout.ms` "
            "(10000 unless set).",
            derived_default="<host>-<n>",
        ),
    ] = None

    tasks_max: Annotated[
        int,
        Key(POSITIVE, "How many workers `lakesink run` runs, Kafka Connect's name for it: the first beside the "
                      "coordinator in its process, each further one a `lakesink worker` child process of the same "
                      "configuration file, in the same consumer group, so that the partitions' records are read and "
                      "converted on as many cores. A child that exits stops `run` like any failed role; a child "
                      "outlives no `run` (it stops with it, even when `run` is killed). Each child's `worker.id` is "
                      "the set one with `-<n>` appended (n = 2, 3, ...), and with `metrics.port` set it serves "
                      "`/metrics` and `/health` on `metrics.port` + n - 1. `lakesink worker` and `lakesink "
                      "coordinator` ignore it; a connector of several tables runs one worker per table."),
    ] = 1

    control_topic_name: Annotated[
        str,
        Key(TOPIC, "Single-partition topic of the coordinator/participant protocol; connectors may share it."),
    ] = "lakesink-control"
    transaction_interval_ms: Annotated[
        int, Key(POSITIVE, "How long a transaction collects records before the coordinator commits it. A "
                           "transaction that reads a backlog (a partition with more records waiting at its start "
                           "than one interval brings) ends as soon as every partition has read what it held then, "
                           "and is committed without waiting for the interval.")
    ] = 60000
    commit_max_records: Annotated[
        int,
        Key(NON_NEGATIVE, "End a transaction before `transaction.interval.ms` once the workers hold this many records "
                          "for it (summed over all partitions, as they report it); 0: no limit by records."),
    ] = 0
    commit_max_bytes: Annotated[
        int,
        Key(NON_NEGATIVE, "End a transaction before `transaction.interval.ms` once the workers hold this many bytes "
                          "for it (Arrow bytes still in memory plus Parquet bytes written, over all partitions); 0: no "
                          "limit by bytes."),
    ] = 1073741824
    coordinator_writestatus_timeout_ms: Annotated[
        int,
        Key(
            POSITIVE,
            "How long the coordinator waits for every partition's write status before it discards the "
            "transaction and starts a new one.",
        ),
    ] = 300000
    write_retry_timeout_ms: Annotated[
        int,
        Key(
            NON_NEGATIVE,
            "How long, from the first failure, commits that fail transiently (Delta conflicts, I/O) are retried, "
            "each in a new transaction, before the coordinator stops with exit code 1; 0 stops at the first "
            "failure. A permanent failure (the table's schema, partitioning or protocol refuses the write) stops "
            "it at once.",
        ),
    ] = 300000
    retry_backoff_ms: Annotated[
        int,
        Key(
            NON_NEGATIVE,
            "Pause after a failed commit before the new transaction starts; it doubles with every further failure "
            "in a row, up to 60000 (or this value, when larger).",
        ),
    ] = 1000
    shutdown_timeout_ms: Annotated[
        int, Key(POSITIVE, "How long a graceful stop may take. On SIGTERM (or SIGINT) `lakesink run` and `lakesink "
                           "coordinator` end the transaction in flight at once, commit it and exit; past this bound "
                           "they exit without it (nothing is lost: its records are read again at the next start). A "
                           "second SIGTERM exits at once. `lakesink worker` stops at once.")
    ] = 30000

    target_base_path: Annotated[
        str, Key(TEXT, "Directory or URI under which the table lives: a local path, `file:`, or `s3://bucket/prefix` "
                       "(`s3a://` too).")
    ]
    target_table_name: Annotated[
        str, Key(TABLE_NAME, "Delta table name; the table lives at `<target.base.path>/<target.table.name>`. A "
                             "template with `${topic}` (`${topic}`, `raw_${topic}`) gives each source topic a table of "
                             "its own, named by the topic with every character other than a letter, digit or `_` "
                             "replaced by `_` (and `_` put before a leading digit): topic `shop.orders-v2` goes to "
                             "table `shop_orders_v2`. Each table is committed on its own (see \"Many tables\" "
                             "above).")
    ]
    table_name_map: Annotated[
        tuple[tuple[str, str], ...],
        Key(TABLE_MAP, "Comma-separated `topic:table` pairs: each listed topic goes to the named table instead of "
                       "the one `target.table.name` gives it (several topics may name one table).")
    ] = ()
    route_field: Annotated[
        str | None,
        Key(OPTIONAL_TEXT, "Route each record of `route.topics` to the table its value's field of this name "
                           "names (a top-level field; its value as text): one of `route.tables`. A record whose "
                           "field is missing, null, unreadable or names another table goes to "
                           "`route.field.default`, or is a record error (`UnroutableRecord`) without it.")
    ] = None
    route_topics: Annotated[
        tuple[str, ...],
        Key(FIELDS, "With `route.field`: the topics whose records are routed by it; empty: every source topic.")
    ] = ()
    route_tables: Annotated[
        tuple[str, ...],
        Key(FIELDS, "With `route.field`: the tables its values may name (required with `route.field`).")
    ] = ()
    route_field_default: Annotated[
        str | None,
        Key(OPTIONAL_NAME, "With `route.field`: the table (one of `route.tables`) of the records whose field names no "
                           "table of `route.tables`; empty: such a record is a record error (`UnroutableRecord`), "
                           "dead-lettered under `errors.tolerance=all`.")
    ] = None
    partition_field_name: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Comma-separated columns the table is partitioned by; empty for an unpartitioned table."),
    ] = ()

    s3_endpoint: Annotated[
        str | None,
        Key(ENDPOINT, "Endpoint of an S3-compatible store (MinIO, Ceph, SeaweedFS), e.g. `http://127.0.0.1:9000`; "
                      "empty for AWS S3."),
    ] = None
    s3_region: Annotated[
        str | None, Key(OPTIONAL_TEXT, "Region of the bucket; empty: the AWS default chain's, else `us-east-1`.")
    ] = None
    s3_path_style_access_enabled: Annotated[
        bool, Key(BOOL, "Address buckets as `endpoint/bucket/key` (most S3-compatible stores need it).")
    ] = False
    aws_access_key_id: Annotated[
        str | None,
        Key(OPTIONAL_TEXT, "Access key for S3; empty: the standard AWS credential chain (environment, profile, "
                           "instance role)."),
    ] = None
    aws_secret_access_key: Annotated[
        str | None, Key(OPTIONAL_TEXT, "Secret key for S3, with `aws.access.key.id` (masked in logs and output).")
    ] = None
    orphan_files_retention_ms: Annotated[
        int,
        Key(POSITIVE, "How old a data file of lakesink's that no table version references must be before the "
                      "coordinator's sweep deletes it."),
    ] = 3600000

    flush_size: Annotated[
        int, Key(POSITIVE, "Records buffered in memory per partition before they are spilled to a staged file.")
    ] = 100000
    buffer_max_bytes: Annotated[
        int, Key(POSITIVE, "Bytes buffered in memory per partition before they are spilled to a staged file.")
    ] = 67108864
    file_target_bytes: Annotated[
        int,
        Key(POSITIVE, "Size at which a participant closes a data file and starts the next one: each spill of the "
                      "buffer adds row groups to the partition's open file until it reaches this many bytes (a "
                      "transaction's last file of each partition is smaller)."),
    ] = 134217728
    parquet_codec: Annotated[Codec, Key(_choice(get_args(Codec)), "Compression of the Parquet data files.")] = "snappy"
    compaction_enabled: Annotated[
        bool,
        Key(BOOL, "The coordinator compacts the table's small files (smaller than half of `file.target.bytes`) with "
                  "Delta's `OPTIMIZE`, bin-packing them into files of about `file.target.bytes`, in each partition "
                  "that holds `compaction.min.files` of them. It runs between two commits of its own, so never "
                  "beside one of its MERGEs; a conflict with another writer defers it. On by default: a streaming "
                  "sink adds a few files per partition per transaction, and readers slow down long before a day's "
                  "worth."),
    ] = True
    compaction_min_files: Annotated[
        int,
        Key(_integer("int ≥ 2", "an integer of at least 2", 2),
            "Small files a partition (the table, when unpartitioned) must hold before it is compacted (Delta's own "
            "auto compaction starts at 50 too)."),
    ] = 50
    compaction_max_duration_ms: Annotated[
        int,
        Key(POSITIVE, "How long one round of compaction may hold the coordinator's next commit: no partition starts "
                      "past it, and an `OPTIMIZE` still running then is cancelled (it commits nothing; the next round "
                      "does it again). Ingestion goes on meanwhile."),
    ] = 60000
    compaction_zorder_by: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Columns to Z-order the compacted files by (`OPTIMIZE ... ZORDER BY`), which rewrites every file "
                    "of a compacted partition, not only the small ones; empty: bin-packing only."),
    ] = ()
    vacuum_enabled: Annotated[
        bool,
        Key(BOOL, "The coordinator runs Delta's `VACUUM` every `vacuum.interval.ms`, deleting files no version "
                  "within `vacuum.retention.hours` references (what compaction replaced, files of abandoned "
                  "transactions). Off by default, as in Delta: it limits time travel."),
    ] = False
    vacuum_retention_hours: Annotated[
        int,
        Key(POSITIVE, "How old an unreferenced file must be before `VACUUM` deletes it, and so how far back time "
                      "travel keeps working. Below Delta's safety default of 168 only with "
                      "`vacuum.retention.check.enabled=false`, and never below twice the longest a staged file "
                      "waits for its commit (`transaction.interval.ms` + `coordinator.writestatus.timeout.ms` + "
                      "`write.retry.timeout.ms`) nor below 1 hour."),
    ] = 168
    vacuum_retention_check_enabled: Annotated[
        bool,
        Key(BOOL, "Refuse a `vacuum.retention.hours` below 168 (Delta's "
                  "`spark.databricks.delta.retentionDurationCheck.enabled`)."),
    ] = True
    vacuum_interval_ms: Annotated[int, Key(POSITIVE, "How often `VACUUM` runs with `vacuum.enabled=true`.")] = 86400000
    max_record_bytes: Annotated[
        int, Key(POSITIVE, "Largest record (key and value bytes) accepted; a larger record is a record error.")
    ] = 1048576

    value_converter: Annotated[
        Converter,
        Key(
            CONVERTER,
            "How record values are decoded: json (fields become columns), string or bytes (one `value` column), "
            "or avro, protobuf or json_schema (the Schema Registry wire format: each record's writer schema, "
            "fetched from `schema.registry.url`, types its columns; see *Types*); the Kafka Connect converter "
            "class names are accepted too (`io.confluent.connect.avro.AvroConverter`, ...).",
        ),
    ] = "json"
    key_converter: Annotated[
        Converter,
        Key(
            CONVERTER,
            "How record keys are read: json, string or bytes keep today's reading (`_kafka_key` holds the key's "
            "bytes; keyed writes read JSON objects or a primitive key), avro, protobuf or json_schema read each key "
            "with its writer schema from the registry (`_kafka_key` and the key columns of keyed writes take its "
            "types).",
        ),
    ] = "json"
    value_converter_schemas_enable: Annotated[
        bool,
        Key(BOOL, "`value.converter=json`: every value is Kafka Connect's `{\"schema\": ..., \"payload\": ...}` (the "
                  "JSON converter's `schemas.enable=true`, Debezium's default) and the schema, not the JSON, decides "
                  "each column's type (see *Types*); a value without it is a record error. `false`: plain JSON, "
                  "types inferred; a value that is the wrapper is a record error naming this key."),
    ] = False
    key_converter_schemas_enable: Annotated[
        bool,
        Key(BOOL, "Every non-null Kafka key is Kafka Connect's `{\"schema\": ..., \"payload\": ...}`, and a key "
                  "without it is a record error; `_kafka_key` holds the key's payload typed by that schema (a struct "
                  "for Debezium's keys) instead of the key's bytes, except in a table whose `_kafka_key` is already "
                  "binary. The key columns of `write.mode=upsert|dedup` are typed by the key's schema whenever a key "
                  "has the wrapper, whatever this says."),
    ] = False
    connect_meta_data: Annotated[
        bool,
        Key(
            BOOL,
            "Add `_kafka_topic`, `_kafka_partition`, `_kafka_offset`, `_kafka_timestamp` and `_kafka_key` columns "
            "to every row.",
        ),
    ] = True

    errors_tolerance: Annotated[
        Tolerance,
        Key(
            _choice(get_args(Tolerance)),
            "`none`: a record error, or a row that breaks a constraint of the table (CHECK, NOT NULL, a generated "
            "column), stops the connector; `all`: the record goes to the dead-letter topic (a rejected row's headers "
            "name the constraint and its expression) and the rest commit.",
        ),
    ] = "none"
    errors_deadletterqueue_topic_name: Annotated[
        str | None,
        Key(
            OPTIONAL_TOPIC,
            "Dead-letter topic for records that fail conversion; required when `errors.tolerance=all`.",
        ),
    ] = None
    errors_deadletterqueue_context_headers_enable: Annotated[
        bool,
        Key(BOOL, "Add headers naming the source topic, partition, offset and the error to dead-letter records."),
    ] = True
    schema_evolution: Annotated[
        bool,
        Key(
            BOOL,
            "Allow new columns to be added to the table (Delta mergeSchema); when false a record with a new "
            "field or a changed type is a record error.",
        ),
    ] = False
    field_name_policy: Annotated[
        NamePolicy,
        Key(
            _choice(get_args(NamePolicy)),
            "A field name Delta refuses without column mapping (a space or any of `,;{}()=`, a tab, a newline): "
            "`column_mapping` creates a new table that needs it with `delta.columnMapping.mode=name` (a table "
            "without such names stays plain) and takes such names into a table that has column mapping; "
            "`sanitize` replaces those characters by `_`; `error` makes the record a record error. A plain table "
            "never takes such a name: its record is a record error naming this key.",
        ),
    ] = "column_mapping"

    write_mode: Annotated[
        WriteMode,
        Key(
            _choice(get_args(WriteMode)),
            "`append`: every record becomes a row; `upsert`: rows are matched on `record.key.fields` (a Delta MERGE "
            "per transaction), matched rows updated, new keys inserted; `dedup`: only rows whose key is not in the "
            "table yet are inserted; `changelog`: every change is a row, deletes and truncates included, with its "
            "op in `_cdc_op` (Debezium's `c`/`u`/`r`/`d`/`t`; a plain value `u`, a tombstone `d` with its key's "
            "columns) and, for Debezium events, the `_cdc_*` source position: an audit or history table.",
        ),
    ] = "append"
    record_key_fields: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Comma-separated value fields that identify a row in `upsert` and `dedup` mode (and a "
                    "tombstone's row in `changelog` mode); a field the value lacks comes from the Kafka key: its "
                    "field of that name, or the whole key when it is a primitive and this names one field. Empty: "
                    "the fields of the Kafka key, which must then be a JSON object."),
    ] = ()
    delete_enabled: Annotated[
        bool,
        Key(BOOL, "In `upsert` mode, a tombstone (null value) or a Debezium delete (`op=d`) deletes its key's row; "
                  "when false such a record is a record error."),
    ] = False
    delete_mode: Annotated[
        DeleteMode,
        Key(_choice(get_args(DeleteMode)), "`hard` removes a deleted row; `soft` keeps it with `_deleted=true` and "
                                           "the delete's record time in `_deleted_at`."),
    ] = "hard"
    value_envelope: Annotated[
        Envelope,
        Key(_choice(get_args(Envelope)), "`debezium`: values are Debezium change events (with or without the JSON "
                                         "converter's `schema`/`payload` wrapper), unwrapped to the row they "
                                         "describe; with `connect.meta.data=true` the op and source position become "
                                         "`_cdc_*` columns."),
    ] = "none"
    upsert_order_field: Annotated[
        str | None,
        Key(OPTIONAL_TEXT, "Which of several changes to one key wins, and whether a change may overwrite the row in "
                           "the table: a value field (a dotted name reaches into a struct: `meta.version`), whose "
                           "value every change but a delete must carry; with `value.envelope=debezium` also "
                           "`ts_ms`, `source.ts_ms` or `source.lsn`. Empty: Debezium events by their source "
                           "position (chosen by `source.connector`), other records by Kafka order (offsets within "
                           "a partition, record timestamps between partitions). A change ordered before the "
                           "table's row never overwrites it (docs/ARCHITECTURE.md, \"The keyed-write rules\")."),
    ] = None
    delete_truncate_enabled: Annotated[
        bool,
        Key(BOOL, "In `upsert` mode, a Debezium truncate (`op=t`) deletes every row of the table whose change it "
                  "follows (by source position) in the same commit; when false it is a record error "
                  "(`UnsupportedOperation`). `changelog` mode always keeps it as a row."),
    ] = False
    upsert_missing_fields: Annotated[
        MissingFields,
        Key(_choice(get_args(MissingFields)), "In `upsert` mode, what an update does with a column its record does "
                                              "not carry: `keep` the stored value (a missing field never erases "
                                              "data; records with a schema carry every field), or set it `null` "
                                              "(the record is the whole row). An explicit null always sets null; "
                                              "Debezium's unavailable-value placeholder always keeps the stored "
                                              "value."),
    ] = "keep"

    metrics_port: Annotated[int, Key(PORT, "Port of the HTTP server for `/metrics` and `/health`; 0 disables it.")] = 0
    metrics_host: Annotated[
        str, Key(TEXT, "Address the `/metrics` and `/health` server binds to; `0.0.0.0` to be scraped from outside.")
    ] = "127.0.0.1"
    health_deadletter_transactions: Annotated[
        int,
        Key(NON_NEGATIVE, "Committed transactions in a row that had records and dead-lettered every one of them (a "
                          "frozen table: a source DDL with `schema.evolution=false`, say) before the coordinator's "
                          "`/health` answers `degraded` (503); a transaction with a row in the table ends the streak, "
                          "one without records neither ends nor extends it; 0: never."),
    ] = 3
    log_format: Annotated[
        LogFormat, Key(_choice(get_args(LogFormat)), "`text` for people, `json` for log shippers.")
    ] = "text"
    log_level: Annotated[LogLevel, Key(_choice(get_args(LogLevel)), "Lowest level logged.")] = "INFO"

    spark_master: Annotated[
        str, Key(TEXT, "Master URL of the coordinator's Spark session: `local[*]` or a cluster URL.")
    ] = "local[*]"

    consumer_overrides: dict[str, str] = Field(default_factory=dict)
    producer_overrides: dict[str, str] = Field(default_factory=dict)
    table_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """`table.<table>.<key>` keys: table -> {attribute: parsed value}, over the connector's own for that table."""
    spark_conf: dict[str, str] = Field(default_factory=dict)
    schema_registry_settings: dict[str, str] = Field(default_factory=dict)
    value_converter_settings: dict[str, str] = Field(default_factory=dict)
    key_converter_settings: dict[str, str] = Field(default_factory=dict)

    def registry_settings(self, part: str) -> dict[str, str] | None:
        """The schema-registry client settings of the `value` or `key` converter (None when it reads no registry
        format): `schema.registry.*`, overridden by `<part>.converter.schema.registry.*` and Kafka Connect's
        `<part>.converter.basic.auth.*`."""
        if getattr(self, f"{part}_converter") not in REGISTRY_CONVERTERS:
            return None
        return _registry_settings(self.schema_registry_settings, getattr(self, f"{part}_converter_settings"))

    _env_secrets: tuple[str, ...] = PrivateAttr(default=())
    """What `${env:VAR}` substitution put into a secret key, or read from a variable with a secret name
    (`${env:KAFKA_PASSWORD}` inside any key): set by config_from_dict, part of secrets()."""
    _set_keys: frozenset[str] = PrivateAttr(default=frozenset())
    """The keys the file sets (config_from_dict), for warnings() about keys set where they have no effect."""
    _removed: tuple[str, ...] = PrivateAttr(default=())
    """Warnings about removed keys the file still sets (REMOVED_KEYS)."""

    @model_validator(mode="before")
    @classmethod
    def _derive_group_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "kafka_group_id" not in data and isinstance(data.get("name"), str):
            return {**data, "kafka_group_id": f"lakesink-{data['name']}"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "LakesinkConfig":
        problems = _cross_check(vars(self))
        if not self.kafka_topic_names and self.kafka_topic_regex is None:
            problems.append("kafka.topic.names or kafka.topic.regex: one of them is required")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def source_topics(self, available: Iterable[str]) -> list[str]:
        """The source topics: `kafka.topic.names` as configured, or the names among `available` (topics that
        exist) that `kafka.topic.regex` matches whole, sorted; never an internal, the control or the dead-letter
        topic."""
        if self.kafka_topic_regex is None:
            return list(self.kafka_topic_names)
        return sorted(t for t in set(available) if self.is_source_topic(t))

    def is_source_topic(self, topic: str) -> bool:
        if self.kafka_topic_regex is None:
            return topic in self.kafka_topic_names
        return (not topic.startswith("__") and topic not in (self.control_topic_name,
                                                              self.errors_deadletterqueue_topic_name)
                and re.fullmatch(self.kafka_topic_regex, topic) is not None)

    @property
    def topics_description(self) -> tuple[str, ...]:
        """The source topics as configured: the names, or `regex:<expression>`."""
        return (f"regex:{self.kafka_topic_regex}",) if self.kafka_topic_regex is not None else self.kafka_topic_names

    @property
    def many_tables(self) -> bool:
        """Whether the topics go to several tables (a `${topic}` template, `table.name.map` or `route.field`):
        each table is then written by a pipeline of its own, with the configuration `for_table` gives it."""
        return TABLE_TEMPLATE in self.target_table_name or bool(self.table_name_map) or self.route_field is not None

    def for_table(self, table: str, topics: tuple[str, ...] = (), regex: str | None = None) -> "LakesinkConfig":
        """The configuration of one table's pipeline: named `<name>.<table>` (its Delta txnAppId, control messages
        and consumer group are its own), reading `topics` (or the topics `regex` matches), with the table's
        `table.<table>.*` keys over the connector's."""
        own = self.table_settings.get(table, {})
        name = f"{self.name}.{table}"
        group = f"{self.kafka_group_id}.{table}" if "kafka.group.id" in self._set_keys else f"lakesink-{name}"
        data = {**self.__dict__, "name": name, "kafka_group_id": group, "target_table_name": table,
                "kafka_topic_names": topics, "kafka_topic_regex": regex, "table_name_map": (), "route_field": None,
                "route_topics": (), "route_tables": (), "route_field_default": None, "table_settings": {}, **own}
        try:
            return self._derived(data, {f"{attr.replace('_', '.')}" for attr in own})
        except ValidationError as error:
            raise ConfigError([f"table {table}: {e['msg'].removeprefix('Value error, ')}"
                               for e in error.errors()]) from None

    def for_task(self, task: int) -> "LakesinkConfig":
        """The configuration of worker `task` (2, 3, ...) of a `lakesink run` with tasks.max > 1: its own worker.id
        (when one is set) and metrics port (when one is served)."""
        data = {**self.__dict__}
        if self.worker_id:
            data["worker_id"] = f"{self.worker_id}-{task}"
        if self.metrics_port:
            data["metrics_port"] = self.metrics_port + task - 1
        return self._derived(data)

    def _derived(self, data: dict[str, Any], set_keys: Iterable[str] = ()) -> "LakesinkConfig":
        """A configuration of the fields `data`, derived from this one: its secrets and set keys carry over."""
        config = LakesinkConfig.model_validate(data)
        config._env_secrets = self._env_secrets
        config._set_keys = self._set_keys | frozenset(set_keys)
        config._removed = self._removed
        return config

    @property
    def table_path(self) -> str:
        """Where the Delta table lives: the base path joined with the table name."""
        return f"{self.target_base_path.rstrip('/')}/{self.target_table_name}"

    def __eq__(self, other: object) -> bool:
        """The same settings (and secrets): which keys a file spelled out, at their defaults or not, is no part of
        a configuration's value."""
        if not isinstance(other, LakesinkConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__ and self._env_secrets == other._env_secrets

    def warnings(self) -> list[str]:
        """One line per key the file sets that has no effect: a removed key, or a key whose setting does not apply
        with the others (NOT_APPLYING). Logged at start-up and printed by `lakesink validate`; never an error."""
        values = vars(self)
        found = list(self._removed)
        if not self.many_tables:
            found += [f"table.{table}.{attr.replace('_', '.')} has no effect: this connector writes one table "
                      f"({self.target_table_name}); set {attr.replace('_', '.')} itself"
                      for table, own in sorted(self.table_settings.items()) for attr in own]
        for key, why in NOT_APPLYING:
            reason = why(values) if key in self._set_keys else None
            if reason:
                found.append(f"{key} has no effect: {reason}")
        return found

    def describe(self) -> dict[str, str]:
        """Every key and its value as .properties text, secrets that are set shown as ******: for logs and status
        output."""
        return {key: REDACTED if is_secret(key) and value else value for key, value in self._properties().items()}

    def secret_properties(self) -> dict[str, str]:
        """The secret keys that are set (typed and pass-through alike), with their values in clear."""
        return {key: value for key, value in self._properties().items() if value and is_secret(key)}

    def secrets(self) -> tuple[str, ...]:
        """Every secret value of this configuration, for the output paths to replace (connector/secrets.py): the
        values of the secret keys, the values of secret-named `name=value` pairs inside them (a JAAS config's
        `password="..."`, which a client library may echo alone), and what `${env:VAR}` substitution supplied to a
        secret key or read from a secret-named variable."""
        values = list(self.secret_properties().values())
        in_urls = [part for key, value in self._properties().items() if key.endswith("url")
                   for part in _url_credentials(value)]
        found = [*values, *(part for value in values for part in _embedded_secrets(value)), *in_urls,
                 *self._env_secrets]
        return tuple(dict.fromkeys(found))

    def _properties(self) -> dict[str, str]:
        """Every key and its value as .properties text, in clear."""
        shown = {setting.name: _render(getattr(self, setting.attr)) for setting in SETTINGS}
        for table, own in sorted(self.table_settings.items()):
            for attr, value in own.items():
                shown[f"table.{table}.{attr.replace('_', '.')}"] = _render(value)
        for prefix, attr in PASS_THROUGH.items():
            for key, value in sorted(getattr(self, attr).items()):
                shown[_full_key(prefix, key)] = value
        return shown

    def __repr_args__(self) -> Any:
        for attr, value in super().__repr_args__():
            prefix = next((p for p, a in PASS_THROUGH.items() if a == attr), None)
            if prefix is not None:
                yield attr, {k: REDACTED if is_secret(_full_key(prefix, k)) else v for k, v in value.items()}
            elif attr is not None and is_secret(attr.replace("_", ".")):
                yield attr, REDACTED
            else:
                yield attr, value


_PAIR = re.compile(r"""([A-Za-z_][\w.-]*)\s*=\s*("[^"]*"|'[^']*'|[^\s"';,&]+)""")
"""A `name=value` pair inside a value: JAAS options (`password="..."`), librdkafka's sasl.oauthbearer.config."""


def _embedded_secrets(value: str) -> list[str]:
    """The values of the secret-named pairs inside a secret value, unquoted (a JAAS login's as jaas_login reads
    them, escapes and all)."""
    try:
        login = [v for k, v in jaas_login(value)[1].items() if is_secret(k)]
    except ValueError:
        login = []
    return [*(match.group(2).strip("\"'") for match in _PAIR.finditer(value) if is_secret(match.group(1))), *login]


def _url_credentials(url: str) -> list[str]:
    """The password (and `user:password`) written into URLs (`https://user:password@registry:8081`)."""
    found = []
    for one in url.split(","):
        try:
            parts = urllib.parse.urlsplit(one.strip())
            password = parts.password
        except ValueError:
            continue
        if password:
            found += [urllib.parse.unquote(password),
                      f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(password)}"]
    return found


def _registry_settings(common: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """`schema.registry.*` (stored without the prefix) overridden by a converter's `schema.registry.*` and
    `basic.auth.*` settings (stored without `<part>.converter.`)."""
    settings = dict(common)
    for key, value in own.items():
        settings[key[len("schema.registry."):] if key.startswith("schema.registry.") else key] = value
    return settings


def _registry_problems(values: Mapping[str, Any]) -> list[str]:
    """Unknown registry settings, and a registry format without a registry URL."""
    problems = []
    for prefix, attr in (("schema.registry.", "schema_registry_settings"),
                         ("value.converter.", "value_converter_settings"),
                         ("key.converter.", "key_converter_settings")):
        for key in values.get(attr, {}):
            setting = key[len("schema.registry."):] if prefix != "schema.registry." and \
                key.startswith("schema.registry.") else key
            if prefix != "schema.registry." and not key.startswith(("schema.registry.", "basic.auth.")):
                problems.append(f"{prefix}{key}: not a converter setting lakesink reads (it takes "
                                f"{prefix}schema.registry.<setting> and {prefix}basic.auth.*; see "
                                f"docs/configuration.md)")
            elif setting not in REGISTRY_CLIENT_KEYS:
                problems.append(f"{prefix}{key}: not a schema registry client setting (known: "
                                f"{', '.join(REGISTRY_CLIENT_KEYS)})")
    for part in ("value", "key"):
        converter = values.get(f"{part}_converter", "json")
        source = _registry_settings(values.get("schema_registry_settings", {}),
                                   values.get(f"{part}_converter_settings", {})).get("basic.auth.credentials.source")
        if source is not None and source.upper() not in ("USER_INFO", "URL"):
            problems.append(f"{part}.converter basic.auth.credentials.source={source}: lakesink takes USER_INFO "
                            f"(basic.auth.user.info) or URL (user:password@ in the URL)")
        if converter in REGISTRY_CONVERTERS:
            url = _registry_settings(values.get("schema_registry_settings", {}),
                                     values.get(f"{part}_converter_settings", {})).get("url")
            if not url:
                problems.append(f"{part}.converter={converter} needs a schema registry: set schema.registry.url "
                                f"(or {part}.converter.schema.registry.url)")
        elif values.get(f"{part}_converter_settings"):
            problems.append(f"{part}.converter.schema.registry.* and {part}.converter.basic.auth.* do nothing with "
                            f"{part}.converter={converter}")
    return problems


def _stored_key(prefix: str, key: str) -> str:
    """spark_conf keeps whole keys (as Spark wants them); the Kafka overrides drop their prefix (as librdkafka does)."""
    return key if prefix == "spark." else key[len(prefix) :]


def _full_key(prefix: str, stored: str) -> str:
    return stored if prefix == "spark." else prefix + stored


@dataclass(frozen=True)
class Setting:
    """One configuration key as read from the LakesinkConfig declaration."""

    name: str
    attr: str
    kind: Kind
    doc: str
    required: bool
    default: Any
    default_text: str
    """The default as .properties text ('' when unset)."""


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return ",".join(":".join(pair) for pair in value)
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


def _settings() -> tuple[Setting, ...]:
    settings = []
    for attr, field in LakesinkConfig.model_fields.items():
        key = next((meta for meta in field.metadata if isinstance(meta, Key)), None)
        if key is None:
            continue
        has_default = not field.is_required()
        default = field.get_default() if has_default else None
        settings.append(
            Setting(
                name=attr.replace("_", "."),
                attr=attr,
                kind=key.kind,
                doc=key.doc,
                required=not has_default and key.derived_default is None,
                default=default,
                default_text=key.derived_default or _render(default),
            )
        )
    return tuple(settings)


SETTINGS: tuple[Setting, ...] = _settings()
SETTINGS_BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}


def _cross_check(values: Mapping[str, Any]) -> list[str]:
    """Problems that involve more than one key; `values` holds parsed attributes (missing ones are skipped)."""
    problems = []
    dlq = values.get("errors_deadletterqueue_topic_name")
    control = values.get("control_topic_name")
    if values.get("errors_tolerance") == "all" and dlq is None:
        problems.append(
            "errors.deadletterqueue.topic.name: required when errors.tolerance=all, "
            "so that records which fail conversion are kept"
        )
    names, regex = values.get("kafka_topic_names", ()), values.get("kafka_topic_regex")
    if names and regex is not None:
        problems.append("kafka.topic.names and kafka.topic.regex: set one of them, not both (the source topics by "
                        "name, or a regular expression their names match)")
    for key, topic in (("control.topic.name", control), ("errors.deadletterqueue.topic.name", dlq)):
        if topic is not None and topic in names:
            problems.append(f"{key}: {topic!r} is also a source topic in kafka.topic.names; use a topic of its own")
    if (values.get("aws_access_key_id") is None) != (values.get("aws_secret_access_key") is None):
        problems.append("aws.access.key.id and aws.secret.access.key: set both, or neither to use the standard AWS "
                        "credential chain")
    mode = values.get("write_mode", "append")
    if values.get("delete_enabled") and mode != "upsert":
        problems.append(f"delete.enabled=true needs write.mode=upsert (write.mode is {mode})")
    if values.get("delete_truncate_enabled") and (mode != "upsert" or values.get("value_envelope") != "debezium"):
        problems.append("delete.truncate.enabled=true needs write.mode=upsert and value.envelope=debezium (truncates "
                        "are Debezium events; write.mode=changelog keeps them as rows)")
    typed_values = ("json", *REGISTRY_CONVERTERS)
    if values.get("value_envelope") == "debezium" and values.get("value_converter", "json") not in \
            ("json", "avro", "json_schema"):
        problems.append("value.envelope=debezium needs value.converter=json, avro or json_schema (lakesink does not "
                        "read Debezium's envelopes in Protobuf)")
    if values.get("value_converter_schemas_enable") and values.get("value_converter", "json") != "json":
        problems.append("value.converter.schemas.enable=true needs value.converter=json (schemas come with JSON "
                        "values)")
    if mode != "append" and values.get("value_converter", "json") not in typed_values:
        problems.append(f"write.mode={mode} needs value.converter=json, avro, protobuf or json_schema: keys are "
                        f"fields of the values")
    problems.extend(_registry_problems(values))
    order = values.get("upsert_order_field")
    if order in EVENT_ORDER_FIELDS:
        if values.get("value_envelope") != "debezium":
            problems.append(f"upsert.order.field={order} is a field of a Debezium event: set value.envelope=debezium,"
                            f" or name a value field")
        elif not values.get("connect_meta_data", True):
            problems.append(f"upsert.order.field={order} needs connect.meta.data=true: the table keeps it in a "
                            f"_cdc_* column to order later changes against")
    problems.extend(_vacuum_problems(values))
    if dlq is not None and dlq == control:
        problems.append(f"errors.deadletterqueue.topic.name: {dlq!r} is the control topic; use a topic of its own")
    problems.extend(_connection_problems(values))
    return problems


def staged_window_ms(values: Mapping[str, Any]) -> int:
    """The longest a staged data file waits for the commit that adds it to the table: a transaction, the wait for
    its write statuses, and its commit's retries."""
    return sum(int(values.get(key, SETTINGS_BY_NAME[key.replace("_", ".")].default)) for key in (
        "transaction_interval_ms", "coordinator_writestatus_timeout_ms", "write_retry_timeout_ms"))


def _vacuum_problems(values: Mapping[str, Any]) -> list[str]:
    if not values.get("vacuum_enabled"):
        return []
    hours = values.get("vacuum_retention_hours", 168)
    floor_ms = max(3600000, 2 * staged_window_ms(values))
    if hours < 168 and values.get("vacuum_retention_check_enabled", True):
        return [f"vacuum.retention.hours={hours} is below Delta's safety default of 168: time travel and readers of "
                f"older versions lose their files sooner; set vacuum.retention.check.enabled=false to mean it"]
    if hours * 3600000 < floor_ms:
        return [f"vacuum.retention.hours={hours} is shorter than {-(-floor_ms // 3600000)} hour(s), twice the longest "
                f"a staged file waits for its commit (or 1 hour): VACUUM could delete files before they are "
                f"committed"]
    return []


TABLE_KEYS = ("partition.field.name", "write.mode", "record.key.fields", "delete.enabled", "delete.mode",
              "value.envelope", "upsert.order.field", "delete.truncate.enabled", "upsert.missing.fields",
              "schema.evolution", "field.name.policy", "connect.meta.data", "parquet.codec", "file.target.bytes",
              "compaction.enabled", "compaction.min.files", "compaction.max.duration.ms", "compaction.zorder.by",
              "vacuum.enabled", "vacuum.retention.hours", "vacuum.retention.check.enabled", "vacuum.interval.ms",
              "errors.tolerance", "offset.reset.policy", "restore.policy", "rename.policy")
"""The keys a `table.<table>.<key>` key sets for one table of a connector that writes several."""


def _table_setting(key: str, raw: str, env: Mapping[str, str], into: dict[str, dict[str, Any]]) -> list[str]:
    """Parse `table.<table>.<key>` into `into[table][attribute]`; its problems."""
    rest = key[len("table."):]
    own = next((k for k in TABLE_KEYS if rest.endswith("." + k)), None)
    if own is None:
        close = difflib.get_close_matches(rest.rpartition(".")[2], [k.rpartition(".")[2] for k in TABLE_KEYS], n=1)
        return [f"unknown key {key!r}: table.<table>.<key> takes one of {', '.join(TABLE_KEYS)}"
                + (f" (did you mean ...{close[0]}?)" if close else "")]
    table = rest[: -len(own) - 1]
    if not _IDENTIFIER.fullmatch(table):
        return [f"{key}: {table!r} is not a table name (an identifier)"]
    text, missing, _ = _substitute(key, raw, env)
    if missing:
        return missing
    setting = SETTINGS_BY_NAME[own]
    try:
        into.setdefault(table, {})[setting.attr] = setting.kind.parse(text)
    except ValueError as error:
        return [f"{key}: {error}"]
    return []


def _routing_problems(values: Mapping[str, Any]) -> list[str]:
    """Problems of the keys that send topics to several tables."""
    problems = []
    field, tables, default = values.get("route_field"), values.get("route_tables", ()), values.get(
        "route_field_default")
    names = values.get("kafka_topic_names", ())
    if field is None:
        for key in ("route.topics", "route.tables", "route.field.default"):
            if values.get(key.replace(".", "_")):
                problems.append(f"{key} needs route.field (the field whose value names a record's table)")
        return problems
    if not tables:
        problems.append("route.tables: required with route.field (the tables its values may name)")
    if values.get("value_converter", "json") not in ("json", *REGISTRY_CONVERTERS):
        problems.append(f"route.field needs value.converter=json, avro, protobuf or json_schema: it is a field of the "
                        f"values (value.converter is {values.get('value_converter')})")
    for table in tables:
        if not _IDENTIFIER.fullmatch(table):
            problems.append(f"route.tables: {table!r} is not a table name (an identifier)")
    if default is not None and default not in tables:
        problems.append(f"route.field.default: {default!r} is not one of route.tables ({', '.join(tables)})")
    if names:
        unknown = [topic for topic in values.get("route_topics", ()) if topic not in names]
        if unknown:
            problems.append(f"route.topics: {', '.join(unknown)} not in kafka.topic.names")
    return problems


REMOVED_KEYS = {
    "target.database.name": "lakesink writes the table by its location (target.base.path/"
                            "target.table.name) and registers it in no catalog (its Spark session's catalog is in "
                            "memory and forgets a table when the process stops); delete the key, and register the "
                            "table in your own catalog (CREATE TABLE <db>.<name> USING DELTA LOCATION '<location>') "
                            "if you need a name for it",
}
"""Keys lakesink once declared: a file that still sets one gets a warning saying why, not an unknown-key error."""


def _s3_key_unused(values: Mapping[str, Any]) -> str | None:
    path = str(values.get("target_base_path", ""))
    if urllib.parse.urlparse(path).scheme in ("s3", "s3a"):
        return None
    return "target.base.path is not an S3 location (s3:// or s3a://), and only the table is stored there"


def _connection_problems(values: Mapping[str, Any]) -> list[str]:
    """Problems of the connection keys together: one login given twice or half, a mechanism that cannot use it, a
    client certificate without its key."""
    problems = []
    sasl = str(values.get("security_protocol", "PLAINTEXT")).startswith("SASL")
    mechanism, jaas = values.get("sasl_mechanism"), values.get("sasl_jaas_config")
    user, password = values.get("sasl_username"), values.get("sasl_password")
    if jaas is not None:
        module, options = jaas_login(jaas)
        short, allowed = module.rsplit(".", 1)[-1], JAAS_MODULES.get(module, ())
        if user is not None or password is not None:
            problems.append("sasl.jaas.config and sasl.username/sasl.password: give the login once, in one of them")
        missing = [name for name in ("username", "password") if not options.get(name)]
        if missing:
            problems.append(f"sasl.jaas.config: {short} needs " + " and ".join(f'{m}="..."' for m in missing))
        if allowed and (mechanism or ("PLAIN" if allowed == ("PLAIN",) else None)) not in allowed:
            problems.append(f"sasl.mechanism: the {short} of sasl.jaas.config needs sasl.mechanism="
                            f"{' or '.join(allowed)}" + (f" (it is {mechanism})" if mechanism else ""))
    elif (user is None) != (password is None):
        problems.append("sasl.username and sasl.password: set both, or neither")
    elif user is not None and sasl and mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        why = f"{mechanism} does not use them" if mechanism else "unset, librdkafka uses GSSAPI"
        problems.append(f"sasl.mechanism: set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 to log in with sasl.username and "
                        f"sasl.password ({why})")
    if (values.get("ssl_certificate_location") is None) != (values.get("ssl_key_location") is None):
        problems.append("ssl.certificate.location and ssl.key.location: set both (the client certificate and its "
                        "private key), or neither")
    return problems


def _connection_unused(family: str) -> Callable[[Mapping[str, Any]], str | None]:
    """The reason a `sasl.*` or `ssl.*` key does nothing: no client's security.protocol uses SASL, or TLS."""
    def reason(values: Mapping[str, Any]) -> str | None:
        protocol = values.get("security_protocol", "PLAINTEXT")
        protocols = {protocol, *(str(values.get(attr, {}).get("security.protocol", protocol)).upper()
                                 for attr in ("consumer_overrides", "producer_overrides"))}
        uses = any(p.startswith("SASL") if family == "sasl" else p.endswith("SSL") for p in protocols)
        return None if uses else f"security.protocol={protocol} uses no {family.upper()}"

    return reason


_CONNECTION_NOT_APPLYING = tuple((key, _connection_unused(key.split(".")[0])) for key in (
    "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config", "ssl.ca.location",
    "ssl.certificate.location", "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm"))


NOT_APPLYING: tuple[tuple[str, Callable[[Mapping[str, Any]], str | None]], ...] = (
    ("record.key.fields", lambda v: "write.mode=append appends every record as a row and matches no key"
     if v.get("write_mode") == "append" else None),
    ("upsert.order.field", lambda v: {
        "append": "write.mode=append appends every record as a row and never orders changes of a key",
        "dedup": "write.mode=dedup keeps the first change of a key in Kafka order and never updates a row",
    }.get(v.get("write_mode"))),
    ("upsert.missing.fields", lambda v: f"only an update of write.mode=upsert can lack a field (write.mode is "
                                        f"{v.get('write_mode')})" if v.get("write_mode") != "upsert" else None),
    ("delete.mode", lambda v: None if v.get("delete_enabled") else
     "delete.enabled is false, so no record deletes a row"),
    ("tasks.max", lambda v: "a connector of several tables runs one worker per table"
     if TABLE_TEMPLATE in v.get("target_table_name", "") or v.get("table_name_map") or v.get("route_field") else None),
    *((key, lambda v: None if v.get("compaction_enabled") else "compaction.enabled is false") for key in (
        "compaction.min.files", "compaction.max.duration.ms", "compaction.zorder.by")),
    *((key, lambda v: None if v.get("vacuum_enabled") else "vacuum.enabled is false") for key in (
        "vacuum.retention.hours", "vacuum.retention.check.enabled", "vacuum.interval.ms")),
    ("metrics.host", lambda v: "metrics.port=0 turns the /metrics and /health server off"
     if v.get("metrics_port") == 0 else None),
    *((key, _s3_key_unused) for key in ("s3.endpoint", "s3.region", "s3.path.style.access.enabled",
                                        "aws.access.key.id", "aws.secret.access.key")),
    *_CONNECTION_NOT_APPLYING,
)
"""Keys that do nothing with some values of others: (key, reason(values) or None). LakesinkConfig.warnings() names
each one a file sets where its reason applies."""


def _unknown_key(key: str) -> str:
    head, _, rest = key.partition(".")
    prefixes = [prefix.rstrip(".") for prefix in PASS_THROUGH]
    close = difflib.get_close_matches(head, prefixes, n=1) if rest else []
    # a misspelt prefix first: `consumr.security.protocol` means the consumer's, not the top-level key
    guess = [f"{close[0]}.{rest}"] if close and close[0] != head else \
        difflib.get_close_matches(key, SETTINGS_BY_NAME, n=1)
    if guess:
        return f"unknown key {key!r} (did you mean {guess[0]!r}?)"
    return (
        f"unknown key {key!r} (see docs/configuration.md; Kafka client and Spark settings "
        "take the prefix consumer., producer. or spark.)"
    )


def _substitute(key: str, raw: str, env: Mapping[str, str]) -> tuple[str, list[str], list[str]]:
    """The value with `${env:VAR}` replaced, the problems of variables that are not set, and the substituted values
    that are secrets: all of them in a secret key, else those of secret-named variables."""
    missing: list[str] = []
    secrets: list[str] = []

    def replace(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable in env:
            if is_secret(key) or is_secret(variable):
                secrets.append(env[variable].strip())
            return env[variable]
        missing.append(f"{key}: environment variable {variable!r} is not set (referenced as {match.group(0)})")
        return match.group(0)

    return _ENV_REF.sub(replace, raw).strip(), missing, secrets


def config_from_dict(d: Mapping[str, str], env: Mapping[str, str] | None = None) -> LakesinkConfig:
    """Validate raw key/value text (as read from a .properties file); `env` defaults to os.environ."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {attr: {} for attr in (*PASS_THROUGH.values(), "table_settings")}
    problems: list[str] = []
    env_secrets: list[str] = []
    secrets: list[str] = []  # every secret text read, kept out of the problems reported
    removed: list[str] = []
    for key, raw in d.items():
        if key in REMOVED_KEYS:
            removed.append(f"{key} was removed and is ignored: {REMOVED_KEYS[key]}")
            continue
        setting = SETTINGS_BY_NAME.get(key)
        prefix = next((p for p in PASS_THROUGH if key.startswith(p)), None)
        if key in JAVA_KEYSTORE_KEYS:
            problems.append(f"{key}: librdkafka reads no Java keystore; use {JAVA_KEYSTORE_KEYS[key]}")
            continue
        if setting is None and prefix is None and key.startswith("table."):
            problems.extend(_table_setting(key, raw, env, values["table_settings"]))
            continue
        if setting is None and prefix is None:
            problems.append(_unknown_key(key))
            continue
        if key == prefix:
            problems.append(f"{key}: expected a setting name after the prefix {prefix!r}")
            continue
        if key in _OWNED_BY_LAKESINK:
            problems.append(f"{key}: set {_OWNED_BY_LAKESINK[key]} instead")
            continue
        text, missing, substituted = _substitute(key, raw, env)
        env_secrets.extend(substituted)
        secrets.extend([*substituted, text] if is_secret(key) and not missing else substituted)
        if missing:
            problems.extend(missing)
        elif setting is not None:
            try:
                values[setting.attr] = setting.kind.parse(text)
            except ValueError as error:
                problems.append(f"{key}: {error}")
        elif prefix is not None:
            values[PASS_THROUGH[prefix]][_stored_key(prefix, key)] = text
    problems.extend(
        f"{s.name}: required key is not set ({s.doc.rstrip('.')})" for s in SETTINGS if s.required and s.name not in d
    )
    if "kafka.topic.names" not in d and "kafka.topic.regex" not in d:
        problems.append("kafka.topic.names: required key is not set (the source topics; or set kafka.topic.regex to "
                        "sink every topic whose name matches it)")
    defaults = {s.attr: s.default for s in SETTINGS if not s.required}
    connector_problems = _cross_check({**defaults, **values})
    problems.extend(connector_problems)
    problems.extend(_routing_problems({**defaults, **values}))
    for table, own in sorted(values["table_settings"].items()):
        problems.extend(f"table.{table}: {problem}" for problem in _cross_check({**defaults, **values, **own})
                        if problem not in connector_problems)
    if problems:
        scrubber = Scrubber(secrets)
        raise ConfigError([scrubber.text(problem) for problem in problems])
    config = LakesinkConfig.model_validate(values)
    config._env_secrets = tuple(dict.fromkeys(env_secrets))
    config._set_keys = frozenset(key for key in d if key in SETTINGS_BY_NAME)
    config._removed = tuple(removed)
    return config


def _read_properties(text: str) -> tuple[dict[str, str], list[str]]:
    raw: dict[str, str] = {}
    problems: list[str] = []
    for element in javaproperties.parse(text):
        if isinstance(element, javaproperties.KeyValue):
            if element.key in raw:
                problems.append(f"{element.key}: set more than once (the file must set each key once)")
            raw[element.key] = element.value
    return raw, problems


def load_config(path_or_text: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> LakesinkConfig:
    """Load a .properties file, or .properties text (a str containing a newline), into a LakesinkConfig."""
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        text = path_or_text
    else:
        path = Path(path_or_text)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"config file {str(path)!r} cannot be read: {error}") from None
    raw, problems = _read_properties(text)
    try:
        config = config_from_dict(raw, env)
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def validate_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of a config file; empty when it is valid."""
    try:
        load_config(Path(path), env)
    except ConfigError as error:
        return error.problems
    return []


_MARKDOWN_HEADER = """\
# Configuration reference

<!-- Generated by `python -m connector.config --markdown > docs/configuration.md`; do not edit by hand. -->

lakesink reads one Java `.properties` file; `config/lakesink.properties` is a commented example.
Every problem in the file is reported at once, and an unknown key is rejected with a suggestion.

- **Environment variables**: `${env:VAR}` anywhere in a value is replaced by the variable `VAR`
  (a variable that is not set is a configuration error). Use it for secrets.
- **Pass-through prefixes**: `consumer.*` and `producer.*` keys go, without their prefix, to the
  librdkafka consumers (and admin clients, less the consumer-only keys such as `session.timeout.ms`) and
  producers (e.g. `consumer.fetch.max.bytes=104857600`); every `spark.*` key other than `spark.master` goes to
  the Spark session as it is (e.g. `spark.driver.memory=4g`).
  Servers, group id and offset reset are set by the `kafka.*` keys only.
- **Secured clusters**: the connection keys (`security.protocol`, `sasl.*`, `ssl.*`) reach every Kafka client
  lakesink opens; a `consumer.*` or `producer.*` key of the same name overrides one for that kind of client.
  Start-up (and `lakesink validate`, for a secured cluster) asks the brokers for metadata first: a refused login
  or certificate stops it within seconds with one line naming the broker and the reason.
- **Schema registry** (`value.converter` or `key.converter` = `avro`, `protobuf`, `json_schema`): `schema.registry.*`
  keys go, without their prefix, to the registry client of both converters: `schema.registry.url` (required; a
  comma-separated list is tried in turn), `schema.registry.basic.auth.credentials.source` (`USER_INFO`, or `URL`
  for `https://user:password@host` URLs), `schema.registry.basic.auth.user.info` (`user:password`, secret),
  `schema.registry.ssl.ca.location`, `schema.registry.ssl.certificate.location`, `schema.registry.ssl.key.location`,
  `schema.registry.ssl.key.password` (PEM files), `schema.registry.timeout` (seconds), `schema.registry.max.retries`,
  `schema.registry.retries.wait.ms`, `schema.registry.retries.max.wait.ms`, `schema.registry.cache.capacity`,
  `schema.registry.proxy`. Kafka Connect's per-converter keys override them for one converter:
  `value.converter.schema.registry.url`, `value.converter.basic.auth.credentials.source`,
  `value.converter.basic.auth.user.info`, `value.converter.schema.registry.<setting>` (and `key.converter.*`).
  Any other `value.converter.*` / `key.converter.*` key is an error, so a typo never passes unnoticed.
- **The coordinator's Spark driver** only reads and writes the Delta log when it appends (the workers' Parquet
  files are committed as they are), so lakesink starts it with `spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1
  -XX:+UseSerialGC` (quick start, one GC thread); with `write.mode=upsert` or `dedup` it runs MERGEs over the rows
  and keeps the JVM's defaults. Any value of your own replaces these options: give it one
  (say `-Dfile.encoding=UTF-8`) to run the driver with the JVM's defaults when a partition column of a type
  without a Delta partition-value encoding here (timestamp, float, decimal) makes every commit a Spark job.
- **Secrets**: keys whose name says password, passphrase, secret, token, credential, JAAS, an access, secret,
  account, encryption, private or API `key` (not a record's key, nor a location, class or setting: `ssl.key.location`,
  `aws.access.key.id`), an Azure SAS, or `sasl.oauthbearer.config` are secret (`connector.config.is_secret`): their
  values, with the values of `${env:VAR}` variables whose name is secret, are replaced by `******` in logs,
  `lakesink status`, `/metrics`, `/health`, error messages and control-topic messages. A value shorter than 3
  characters is masked only where its key is shown (start-up warns about it).
- Booleans are `true` or `false`; durations are integers in milliseconds (`*.ms`).
- **Keys that have no effect**: a key set where the others make it do nothing (`record.key.fields` or
  `upsert.order.field` with `write.mode=append`, `delete.mode` without `delete.enabled=true`, `metrics.host` with
  `metrics.port=0`, `s3.*` / `aws.*` for a local table) and a removed key (`target.database.name`) get one warning
  line each, at start-up and in `lakesink validate`'s output; they are not errors.

## Schema drift (`value.converter=json`)

The table's columns come from the first records, by the rules of "Schemaless JSON" below (a field missing in
some records becomes nullable). Once the table exists, every record is held to its schema:

- **A field the record lacks** is null in its row.
- **A new field** is a record error (`NewField`) with `schema.evolution=false`. With
  `schema.evolution=true` it becomes a new nullable column, added by the Delta commit that brings the first
  row carrying it (Delta `mergeSchema`); earlier rows read it as null.
- **A changed type** (a string where the table has a number, an object where it has a string, 1.5 for an
  integer column, a zoned time for a timestamp_ntz column) is a record error (`TypeMismatch`) whatever
  `schema.evolution` says; only an integer filling a double column is accepted, when the double holds it exactly.
- **Malformed JSON, a value that is not an object, non-UTF-8 bytes, a null value (tombstone), a record
  above `max.record.bytes`** are record errors too.

A record error follows `errors.tolerance`: `none` stops the connector before any transaction commits an
offset at or past the record (the error names its topic, partition and offset); `all` produces the
record, with its original key, value and headers plus `__connect.errors.*` headers (topic, partition,
offset, connector, exception class and message), to `errors.deadletterqueue.topic.name` and goes on.
Failed records are produced at END-COMMIT, and the WRITE-STATUS that covers them is sent only once the
broker has confirmed every one of them (a delivery report without error), so every record ends up in the
table or in the dead-letter topic. While the dead-letter topic refuses records (it does not exist, the
producer may not write to it) the worker logs an ERROR naming the topic, withholds that WRITE-STATUS (no
offset moves past the records) and produces the refused ones again every `retry.backoff.ms`, until they
are confirmed or the coordinator discards the txn (`coordinator.writestatus.timeout.ms`) and they are
re-read. A record larger than the topic allows (its `max.message.bytes`, or the producer's
`message.max.bytes`) is dead-lettered cut to fit, value first, with the header `__lakesink.truncated`
holding its original size in bytes; the `__connect.errors.*` headers naming its source are never cut.
A txn discarded before END-COMMIT dead-letters nothing; one discarded or failing after it (a refused
dead letter, a crash, a timeout, a txn of failed records only while the table does not exist yet) may
dead-letter its records again when they are re-read (at least once: deduplicate on the
`__connect.errors.topic/partition/offset` headers), while table rows stay exactly once.

"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


_TYPES_HEADER = """
## Types (`value.converter.schemas.enable=true`)

With schemas enabled, each value is Kafka Connect's `{"schema": ..., "payload": ...}` (the JSON converter's
`schemas.enable=true`, and Debezium's default). The payload's fields are the columns, and **the schema, not the
JSON value, decides each column's type**, in `append`, `upsert` and `dedup` modes alike. A Kafka key that carries
the wrapper is typed by its own schema (the key columns of keyed writes). The default is `false` because plain JSON
objects are what most producers outside Kafka Connect write, and what lakesink always read; the choice is safe
either way: with `false`, a value that is the wrapper is a record error (`UnexpectedConnectSchema`) naming this
key, so a schema never lands as a `schema` column and a decimal never as base64 text; with `true`, a value without
the wrapper is a record error (`MissingConnectSchema`).

Once the table exists, a value is converted to its column's type only where that is lossless (`int` into `long`,
`decimal(10,2)` into `decimal(12,2)`, `date` into `date`); any other difference is a record error
(`TypeMismatch`) naming the column and both types, never a cast. A field the table lacks is a new nullable
column with `schema.evolution=true` (with its mapped type), else a record error (`NewField`). So a source's
`ALTER TABLE ... ADD COLUMN` lands in the transaction that first carries it. A source type wider than the
column's (`int` to `bigint`, `decimal(10,2)` to `decimal(12,2)`) widens the column in that transaction where the
table allows it: `schema.evolution=true` and the table property `delta.enableTypeWidening=true` (Delta's type
widening: integers to wider integers or double, float to double, a decimal to one with at least as many integer
and fraction digits, date to timestamp_ntz); the change is recorded in the table's schema as `ALTER COLUMN ...
TYPE` records it, and the rows written before read as they were. Elsewhere, and for a narrowing or any other
change of type, it is a record error, whose message names the property when widening would have taken it. A null in a required field takes the schema's `default`, and is a record error without one
(`ConnectSchemaMismatch`, as are values the schema does not allow); fields a payload has beyond its schema are
ignored, as Connect does. Each distinct schema is parsed once; payloads that share one are decoded in a batch.

"""


def types_markdown() -> str:
    """The type mapping of Kafka Connect schemas (connector/formats/connect.py) as a table."""
    from connector.formats.connect import TYPE_TABLE

    rows = ["| Connect / Debezium type | Delta type | Conversion |", "|---|---|---|"]
    rows += [f"| {_cell(source)} | {_cell(delta)} | {_cell(how)} |" for source, delta, how in TYPE_TABLE]
    return _TYPES_HEADER + "\n".join(rows) + "\n\n" + registry_types_markdown()


_REGISTRY_TYPES_HEADER = """
## Types of Avro, Protobuf and JSON Schema records (`value.converter=avro|protobuf|json_schema`)

Each record is in the Schema Registry wire format: magic byte 0 and a 4-byte schema id before the payload
(Protobuf adds its message indexes), or the schema's id in a `__value_schema_id` / `__key_schema_id` header. The
writer schema of each id is fetched from `schema.registry.url` once and compiled once; **the writer schema decides
each column's type**, by the tables below, and each record is read with its own writer schema, so records written
with older versions keep their values. A new schema version that adds fields or widens a type (what the registry's
BACKWARD compatibility allows) meets the table by the rules of *Types* above: a new field is a new nullable column
with `schema.evolution=true`, in the same Delta commit as the first records that carry it (older rows read it as
null); a wider type widens the column where the table allows type widening; a narrowing or any other change of
type is a record error (`TypeMismatch`) naming the column and both types. The record errors of these formats:
`NotRegistryFramed` (no magic byte and schema id: the topic is in another format), `UnknownSchemaId` (the registry
has no such id; asked again after 30 s), `MalformedPayload` (a payload its writer schema cannot read: truncated, or
written with another schema), `InvalidConnectSchema` (a writer schema that cannot be a table: a DECIMAL beyond 38
digits, a recursive type). **A registry that does not answer** (refused, timed out, HTTP 5xx, or refusing
lakesink's credentials) is not a record error: the partition waits, paused, its offsets untouched and nothing
skipped; it is read again at each transaction, with one log line each time, `/health` says `degraded` with the
registry's error, `schema_registry_waiting_partitions` counts the partitions waiting, and `lakesink status` names
them with the registry's error.

With `write.mode=upsert|dedup|changelog` and `value.envelope=debezium`, Debezium's Avro envelopes work as its JSON
ones do: the Connect and Debezium types Connect's Avro converter writes as `connect.name` (`io.debezium.time.*`,
`VariableScaleDecimal`, ...) and `connect.type` (`int8`, `int16`) are decoded as in *Types* above. Keys in a
registry format (`key.converter`) type `_kafka_key` and the key columns of keyed writes.

"""


def registry_types_markdown() -> str:
    """The type mappings of the schema-registry formats (connector/formats/avro.py, protobuf.py, json_schema.py)."""
    from connector.formats import avro, json_schema, protobuf

    out = [_REGISTRY_TYPES_HEADER]
    for title, module in (("Avro", avro), ("Protobuf", protobuf), ("JSON Schema", json_schema)):
        out.append(f"### {title}\n\n| {title} type | Delta type | Conversion |\n|---|---|---|")
        out += [f"| {_cell(source)} | {_cell(delta)} | {_cell(how)} |" for source, delta, how in module.TYPE_TABLE]
        out.append("")
    return "\n".join(out) + "\n"


def inference_markdown() -> str:
    """The rules of schemaless JSON (connector/formats/json_types.py) as a table."""
    from connector.formats.json_types import INFERENCE_TABLE

    rows = ["| JSON values | Delta column | Rule |", "|---|---|---|"]
    rows += [f"| {_cell(values)} | {_cell(column)} | {_cell(rule)} |" for values, column, rule in INFERENCE_TABLE]
    return _INFERENCE_HEADER + "\n".join(rows) + "\n\n"


_INFERENCE_HEADER = """## Schemaless JSON

With `value.converter.schemas.enable=false` the columns' types are inferred from the records. A type only ever widens
without loss, the same rules decide in every partition and at the commit (partitions that disagree about a new column:
the first partition's type wins, and the other's records are read again against the table), and a value that does not
fit its column is a record error of its own, never a rounded, truncated or shifted value. Before the table exists, a
record that only the types inferred from its partition's earlier records refuse is no record error yet: the partition's
records from it on wait for the next txn, where the table that txn's commit made (or a fresh inference) decides.

"""


def tables_markdown() -> str:
    """The section on a connector that writes several tables: its keys, and the keys each table may set."""
    return _TABLES_HEADER + ", ".join(f"`{key}`" for key in TABLE_KEYS) + ".\n\n"


_TABLES_HEADER = """## Many tables from one connector

`target.table.name` with `${topic}` in it, `table.name.map` and `route.field` send the topics to several tables
(README, "Many tables from one service"). Each table is written by a pipeline of its own, with the connector's
configuration and these changes: its name is `<name>.<table>` (its Delta txnAppId, its key on the control topic),
its consumer group `lakesink-<name>.<table>` (or `<kafka.group.id>.<table>` when that key is set), its topics the
ones that go to it. A table-scoped key set as `table.<table>.<key>` applies to that table only, over the
connector's own; a misspelt table in such a key is an error for a connector of `kafka.topic.names` (it would
apply to nothing), and a connector that writes one table warns about them. The table-scoped keys are:
"""


def markdown() -> str:
    """The reference table of every key, as committed in docs/configuration.md."""
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = "**required**" if s.required else f"`{s.default_text}`" if s.default_text else "(none)"
        rows.append(f"| `{s.name}` | {_cell(s.kind.label)} | {_cell(default)} | {_cell(s.doc)} |")
    return (_MARKDOWN_HEADER + inference_markdown() + types_markdown() + tables_markdown() + "## Keys\n\n"
            + "\n".join(rows) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m connector.config", description="lakesink configuration keys")
    parser.add_argument("--markdown", action="store_true", required=True, help="print the reference table")
    parser.parse_args(argv)
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
