"""How the text of a configuration value is parsed (`Kind`), the kinds the key table uses, and the values each key
of a fixed set allows (the `Literal`s the key table's fields are typed with)."""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

OffsetReset = Literal["earliest", "latest"]
OffsetResetPolicy = Literal["fail", "earliest", "latest"]
RestorePolicy = Literal["fail", "reread"]
RenamePolicy = Literal["fail", "ignore"]
Codec = Literal["snappy", "zstd", "gzip", "lz4", "none"]
Converter = Literal["json", "string", "bytes", "avro", "protobuf", "json_schema"]
REGISTRY_CONVERTERS = ("avro", "protobuf", "json_schema")
"""Converters whose records carry a schema id and are read through a schema registry."""
FIELD_CONVERTERS = ("json", *REGISTRY_CONVERTERS)
"""Converters whose values have fields: keyed writes and `route.field` read them."""
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

_INTEGER = re.compile(r"[+-]?[0-9]+")
_KAFKA_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Kind:
    """How the text of a value is parsed. `parse` raises ValueError("expected ..., got '...'")."""

    label: str
    parse: Callable[[str], Any]



def integer(label: str, expected: str, low: int, high: int | None = None) -> Kind:
    def parse(text: str) -> int:
        if not _INTEGER.fullmatch(text) or int(text) < low or (high is not None and int(text) > high):
            raise ValueError(f"expected {expected}, got {text!r}")
        return int(text)

    return Kind(label, parse)


def choice(options: Sequence[str], aliases: Mapping[str, str] | None = None) -> Kind:
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
IDENTIFIER = _matching("identifier", IDENTIFIER_RE, "an identifier (a letter or '_', then letters, digits or '_')")
TABLE_TEMPLATE = "${topic}"


def _parse_table_name(text: str) -> str:
    if not IDENTIFIER_RE.fullmatch(text.replace(TABLE_TEMPLATE, "t")):
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
OPTIONAL_TABLE = Kind("table name", lambda text: IDENTIFIER.parse(text) if text else None)
TABLE_MAP = Kind("list of topic:table", _parse_table_map)
POSITIVE = integer("int > 0", "a positive integer", 1)
NON_NEGATIVE = integer("int ≥ 0", "a non-negative integer", 0)
PORT = integer("int 0–65535", "a port number from 0 to 65535", 0, 65535)
CONVERTER = choice(
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
_SASL_MECHANISM = choice(get_args(SaslMechanism))
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


CatalogType = Literal["none", "hive"]
_METASTORE_URI = re.compile(r"thrift://[^:/\s,]+:[0-9]{1,5}")


def _parse_metastore_uris(text: str) -> tuple[str, ...]:
    uris = _split(text) if text else ()
    for uri in uris:
        if not _METASTORE_URI.fullmatch(uri):
            raise ValueError(f"expected comma-separated thrift://host:port URIs of Hive metastores, got {uri!r}")
    return uris


def _parse_database(text: str) -> str:
    return IDENTIFIER.parse(text).lower()


METASTORE_URIS = Kind("list of thrift://host:port", _parse_metastore_uris)
DATABASE = Kind("database name", _parse_database)
"""A catalog database: an identifier, lower-cased as the Hive metastore keeps it."""
