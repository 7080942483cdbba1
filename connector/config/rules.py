"""Rules that involve more than one key: the problems that make a configuration invalid (`cross_check`,
`routing_problems`), and the keys that have no effect with some values of others (`NOT_APPLYING`)."""

import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from connector.config.keys import SETTINGS_BY_NAME
from connector.config.kinds import (
    EVENT_ORDER_FIELDS,
    FIELD_CONVERTERS,
    IDENTIFIER_RE,
    JAAS_MODULES,
    REGISTRY_CLIENT_KEYS,
    REGISTRY_CONVERTERS,
    TABLE_TEMPLATE,
    jaas_login,
)
from connector.schema import encoding, layout
from connector.schema.columns import header_column


def merged_registry_settings(common: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
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
        source = merged_registry_settings(values.get("schema_registry_settings", {}),
                                          values.get(f"{part}_converter_settings", {})
                                          ).get("basic.auth.credentials.source")
        if source is not None and source.upper() not in ("USER_INFO", "URL"):
            problems.append(f"{part}.converter basic.auth.credentials.source={source}: lakesink takes USER_INFO "
                            f"(basic.auth.user.info) or URL (user:password@ in the URL)")
        if converter in REGISTRY_CONVERTERS:
            url = merged_registry_settings(values.get("schema_registry_settings", {}),
                                           values.get(f"{part}_converter_settings", {})).get("url")
            if not url:
                problems.append(f"{part}.converter={converter} needs a schema registry: set schema.registry.url "
                                f"(or {part}.converter.schema.registry.url)")
        elif values.get(f"{part}_converter_settings"):
            problems.append(f"{part}.converter.schema.registry.* and {part}.converter.basic.auth.* do nothing with "
                            f"{part}.converter={converter}")
    return problems


def cross_check(values: Mapping[str, Any]) -> list[str]:
    """Problems that involve more than one key; `values` holds parsed attributes (missing ones are skipped)."""
    problems = []
    dlq = values.get("errors_deadletterqueue_topic_name")
    control = values.get("control_topic_name")
    dlq_table = values.get("errors_deadletterqueue_table_name")
    if values.get("errors_tolerance") == "all" and dlq is None and dlq_table is None:
        problems.append(
            "errors.deadletterqueue.topic.name: required when errors.tolerance=all (or "
            "errors.deadletterqueue.table.name, or both), so that records which fail conversion are kept"
        )
    if dlq_table is not None and dlq_table in (values.get("target_table_name"),
                                               *(t for _, t in values.get("table_name_map", ()))):
        problems.append(f"errors.deadletterqueue.table.name: {dlq_table!r} is a table the records go to; use a "
                        f"table of its own")
    if dlq_table is not None and dlq is None and not values.get("connect_meta_data", True):
        problems.append("errors.deadletterqueue.table.name without errors.deadletterqueue.topic.name needs "
                        "connect.meta.data=true: a row the table's constraints reject is matched to its record by "
                        "its _kafka_* columns; set the topic too, for rows without them")
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
    if values.get("catalog_type") == "hive" and values.get("catalog_hive_metastore_uris", ("?",)) == ():
        problems.append("catalog.hive.metastore.uris: required with catalog.type=hive (thrift://host:9083)")
    mode = values.get("write_mode", "append")
    if values.get("delete_enabled") and mode != "upsert":
        problems.append(f"delete.enabled=true needs write.mode=upsert (write.mode is {mode})")
    if values.get("delete_truncate_enabled") and (mode != "upsert" or values.get("value_envelope") != "debezium"):
        problems.append("delete.truncate.enabled=true needs write.mode=upsert and value.envelope=debezium (truncates "
                        "are Debezium events; write.mode=changelog keeps them as rows)")
    if values.get("value_envelope") == "debezium" and values.get("value_converter", "json") not in \
            ("json", "avro", "json_schema"):
        problems.append("value.envelope=debezium needs value.converter=json, avro or json_schema (lakesink does not "
                        "read Debezium's envelopes in Protobuf)")
    if values.get("value_converter_schemas_enable") and values.get("value_converter", "json") != "json":
        problems.append("value.converter.schemas.enable=true needs value.converter=json (schemas come with JSON "
                        "values)")
    if mode != "append" and values.get("value_converter", "json") not in FIELD_CONVERTERS:
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
    problems.extend(_header_problems(values))
    problems.extend(_vacuum_problems(values))
    problems.extend(_layout_problems(values))
    if dlq is not None and dlq == control:
        problems.append(f"errors.deadletterqueue.topic.name: {dlq!r} is the control topic; use a topic of its own")
    problems.extend(_connection_problems(values))
    problems.extend(encoding.spark_conf_problems(values.get("spark_conf", {})))
    return problems


def staged_window_ms(values: Mapping[str, Any]) -> int:
    """The longest a staged data file waits for the commit that adds it to the table: a transaction, the wait for
    its write statuses, and its commit's retries."""
    return sum(int(values.get(key, SETTINGS_BY_NAME[key.replace("_", ".")].default)) for key in (
        "transaction_interval_ms", "coordinator_writestatus_timeout_ms", "write_retry_timeout_ms"))


def _header_problems(values: Mapping[str, Any]) -> list[str]:
    """connect.meta.headers and connect.meta.header.columns without the `_kafka_*` columns, and header names whose
    columns Delta would take for one (case-insensitively, after `_` replaced refused characters)."""
    names = values.get("connect_meta_header_columns", ())
    problems = []
    if (values.get("connect_meta_headers") or names) and not values.get("connect_meta_data", True):
        problems.append("connect.meta.headers and connect.meta.header.columns need connect.meta.data=true (they add "
                        "to the `_kafka_*` columns)")
    seen: dict[str, str] = {}
    for name in names:
        column = header_column(name)
        if column.lower() in seen:
            problems.append(f"connect.meta.header.columns: {seen[column.lower()]!r} and {name!r} would both be column "
                            f"{column} (Delta's names ignore case, and refused characters become `_`): name each "
                            f"header once")
        seen.setdefault(column.lower(), name)
    return problems


def _layout_problems(values: Mapping[str, Any]) -> list[str]:
    partition, cluster = values.get("partition_field_name", ()), values.get("table_cluster_by", ())
    problems = []
    try:
        transforms = layout.transforms(partition)
    except ValueError as exc:
        return [f"partition.field.name: {exc}"]
    columns = layout.partition_columns(partition)
    twice = sorted({c for c in columns if [d.casefold() for d in columns].count(c.casefold()) > 1})
    if twice:
        problems.append(f"partition.field.name={','.join(partition)} names the column(s) {', '.join(twice)} twice (a "
                        f"time transform's column is named <column>_<transform>); name each partition column once")
    if partition and cluster:
        problems.append("partition.field.name and table.cluster.by: set one of them (a table is partitioned or "
                        "clustered, not both)")
    if cluster and values.get("compaction_zorder_by"):
        problems.append("compaction.zorder.by and table.cluster.by: a clustered table is clustered by compaction, "
                        "never Z-ordered; leave compaction.zorder.by empty")
    zone = values.get("spark_conf", {}).get("spark.sql.session.timeZone", "UTC")
    if transforms and zone.upper() not in ("UTC", "Z", "+00:00", "ETC/UTC"):
        problems.append(f"partition.field.name={','.join(partition)} with spark.sql.session.timeZone={zone}: a "
                        f"time transform is computed in UTC; leave spark.sql.session.timeZone unset (UTC)")
    return problems


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


def routing_problems(values: Mapping[str, Any]) -> list[str]:
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
    if values.get("value_converter", "json") not in FIELD_CONVERTERS:
        problems.append(f"route.field needs value.converter=json, avro, protobuf or json_schema: it is a field of the "
                        f"values (value.converter is {values.get('value_converter')})")
    for table in tables:
        if not IDENTIFIER_RE.fullmatch(table):
            problems.append(f"route.tables: {table!r} is not a table name (an identifier)")
    if default is not None and default not in tables:
        problems.append(f"route.field.default: {default!r} is not one of route.tables ({', '.join(tables)})")
    if names:
        unknown = [topic for topic in values.get("route_topics", ()) if topic not in names]
        if unknown:
            problems.append(f"route.topics: {', '.join(unknown)} not in kafka.topic.names")
    return problems


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
    *((key, lambda v: "catalog.type=none keeps tables by path only" if v.get("catalog_type") == "none" else None)
      for key in ("catalog.hive.metastore.uris", "catalog.database")),
)
"""Keys that do nothing with some values of others: (key, reason(values) or None). LakesinkConfig.warnings() names
each one a file sets where its reason applies."""
