"""The declaration table of keys: every key is declared once, as an annotated field of `SourceKeys` or `Keys` (the
two halves of the table, which LakesinkConfig extends): its Python type, its `Key` (how the text is parsed, one line
of documentation) and its default. The parser, the example check and docs/configuration.md all read that one
declaration, through `SETTINGS`."""

from dataclasses import dataclass
from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, Field

from connector.config.kinds import (
    BOOL,
    CONVERTER,
    ENDPOINT,
    FIELDS,
    JAAS,
    NAME,
    NON_NEGATIVE,
    OPTIONAL_NAME,
    OPTIONAL_SASL_MECHANISM,
    OPTIONAL_TABLE,
    OPTIONAL_TEXT,
    OPTIONAL_TOPIC,
    PORT,
    POSITIVE,
    REGEX,
    TABLE_MAP,
    TABLE_NAME,
    TEXT,
    TOPIC,
    TOPICS,
    Codec,
    Converter,
    DeleteMode,
    EndpointIdentification,
    Envelope,
    Kind,
    LogFormat,
    LogLevel,
    MissingFields,
    NamePolicy,
    OffsetReset,
    OffsetResetPolicy,
    RenamePolicy,
    RestorePolicy,
    SaslMechanism,
    SecurityProtocol,
    Tolerance,
    WriteMode,
    choice,
    integer,
)
from connector.config.kinds import DATABASE, METASTORE_URIS, CatalogType

@dataclass(frozen=True)
class Key:
    """Field metadata that makes a LakesinkConfig attribute a configuration key."""

    kind: Kind
    doc: str
    derived_default: str | None = None
    table_scoped: bool = False
    """A connector of several tables may set it for one table, as `table.<table>.<key>` (TABLE_KEYS)."""


PASS_THROUGH = {"consumer.": "consumer_overrides", "producer.": "producer_overrides", "spark.": "spark_conf",
                "schema.registry.": "schema_registry_settings", "value.converter.": "value_converter_settings",
                "key.converter.": "key_converter_settings"}
"""Key prefix -> the LakesinkConfig attribute that collects those keys."""


class SourceKeys(BaseModel):
    """The first half of the key table: the connector, its Kafka clients, its source topics and its transactions."""

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
            choice(get_args(OffsetReset)),
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
        Key(choice(get_args(SecurityProtocol)),
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
        Key(choice(get_args(EndpointIdentification), {"": "none"}),
            "`https`: a broker's certificate must name the host it is reached at (its SAN); `none` (or empty, as "
            "in Kafka Connect) skips that check, never the CA's. The Java keystore keys (`ssl.truststore.*`, "
            "`ssl.keystore.*`) are refused: librdkafka takes the PEM files of `ssl.ca.location`, "
            "`ssl.certificate.location` and `ssl.key.location`."),
    ] = "https"
    offset_reset_policy: Annotated[
        OffsetResetPolicy,
        Key(
            choice(get_args(OffsetResetPolicy)),
            "What the coordinator does, before each START, with a committed offset below its partition's log start "
            "(records deleted by retention) or above its end, or of a topic deleted and created again (its Kafka "
            "topic id, recorded with the offsets, differs, even when the new topic holds that offset): `fail` stops "
            "with a one-line error naming the partitions (for a recreated topic: the topic and both ids); `earliest` "
            "/ `latest` knowingly skip to the log start / end (a recreated topic is read from its start / end), "
            "logged at WARNING and counted in the metrics and the PROGRESS record of the commit that makes the skip.",
            table_scoped=True,
        ),
    ] = "fail"
    restore_policy: Annotated[
        RestorePolicy,
        Key(
            choice(get_args(RestorePolicy)),
            "What the coordinator does when the table was RESTOREd to a version before this connector's last commit "
            "(Delta keeps the committed offsets through a RESTORE, so resuming would never bring the rows it took "
            "away back): `fail` stops with a one-line error saying so; `reread` reads again from the offsets of the "
            "connector's last commit the restored version holds (from its manifest under `_lakesink/<name>/`; none: "
            "as a new connector), once, logged at WARNING.",
            table_scoped=True,
        ),
    ] = "fail"
    rename_policy: Annotated[
        RenamePolicy,
        Key(
            choice(get_args(RenamePolicy)),
            "What the coordinator does when this connector has no committed offsets in a table that holds another "
            "connector's offsets of the same topics (`_lakesink/<other name>/`) or rows of them (`_kafka_topic`), as "
            "after a rename of `name`, which would read the topics again: `fail` stops with a one-line error naming "
            "the other connector(s); `ignore` reads them into the table again knowingly, logged at WARNING. "
            "Connectors of other topics may share a table either way.",
            table_scoped=True,
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
                           "and is committed without waiting for the interval.", table_scoped=True)
    ] = 60000
    commit_max_records: Annotated[
        int,
        Key(NON_NEGATIVE, "End a transaction before `transaction.interval.ms` once the workers hold this many records "
                          "for it (summed over all partitions, as they report it); 0: no limit by records.",
            table_scoped=True),
    ] = 0
    commit_max_bytes: Annotated[
        int,
        Key(NON_NEGATIVE, "End a transaction before `transaction.interval.ms` once the workers hold this many bytes "
                          "for it (Arrow bytes still in memory plus Parquet bytes written, over all partitions); 0: no "
                          "limit by bytes.", table_scoped=True),
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


class Keys(SourceKeys):
    """The second half of the key table: the table, its files and upkeep, the records' conversion, the keyed writes
    and lakesink's operation; then the pass-through settings (PASS_THROUGH) and the table-scoped ones."""

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
                           "`route.field.default`, or is a record error (`UnroutableRecord`) without it. A delete "
                           "(a tombstone, a Debezium op=d or op=t) takes the field from its `before` (op=d), else "
                           "from its Kafka key (an object or struct): one that carries it in neither is a record "
                           "error (`UnroutableRecord`), whatever `route.field.default` says.")
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
                           "dead-lettered under `errors.tolerance=all`. Never applies to a delete that lacks the "
                           "field (in its value, `before` and Kafka key): that is a record error, as it would "
                           "delete its key in a table that may not hold its row.")
    ] = None
    partition_field_name: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Comma-separated columns a table lakesink creates is partitioned by; an entry may be a time "
                    "transform of a timestamp column, `day(ts)`, `hour(ts)`, `month(ts)` or `year(ts)`, made as the "
                    "generated column `ts_day` (date), `ts_hour` / `ts_month` (string) or `ts_year` (int), in UTC, "
                    "so that a filter on `ts` prunes; empty for an unpartitioned table. An existing table must have "
                    "this layout.",
            table_scoped=True),
    ] = ()
    table_cluster_by: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Comma-separated columns a table lakesink creates is liquid-clustered by (Delta's clustering "
                    "feature) instead of partitioned; compaction then clusters it. Not with `partition.field.name` "
                    "nor `compaction.zorder.by`. An existing table must be clustered by these columns.",
            table_scoped=True),
    ] = ()
    catalog_type: Annotated[
        CatalogType,
        Key(choice(get_args(CatalogType)),
            "`hive`: every table is also a table of a Hive metastore (`catalog.hive.metastore.uris`), "
            "`<catalog.database>.<table name>`, an external Delta table at the table's location, so that "
            "`SELECT * FROM db.t` works in any engine on that metastore; the commit that creates the table on storage "
            "creates it in the catalog (and its database when absent). A catalog table of that name that exists "
            "already is the table: its location wins over `target.base.path`. The schema, its evolution and the "
            "table's properties are read from the Delta log by every reader. `none`: tables by path only."),
    ] = "none"
    catalog_hive_metastore_uris: Annotated[
        tuple[str, ...],
        Key(METASTORE_URIS, "With `catalog.type=hive`: the metastore's Thrift URIs, `thrift://host:9083[,...]` "
                            "(required); the coordinator's Spark session and every lakesink process use them."),
    ] = ()
    catalog_database: Annotated[
        str,
        Key(DATABASE, "With `catalog.type=hive`: the catalog database of the table, created when absent.",
            table_scoped=True),
    ] = "default"

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
                      "transaction's last file of each partition is smaller).",
            table_scoped=True),
    ] = 134217728
    parquet_codec: Annotated[Codec, Key(choice(get_args(Codec)), "Compression of the Parquet data files.",
                                        table_scoped=True)] = "snappy"
    compaction_enabled: Annotated[
        bool,
        Key(BOOL, "The coordinator compacts the table's small files (smaller than `compaction.small.file.bytes`) with "
                  "Delta's `OPTIMIZE`, bin-packing them into files of about `file.target.bytes`, in each partition "
                  "that holds `compaction.min.files` of them. It runs between two commits of its own, so never "
                  "beside one of its MERGEs; a conflict with another writer defers it. On by default: a streaming "
                  "sink adds a few files per partition per transaction, and readers slow down long before a day's "
                  "worth.",
            table_scoped=True),
    ] = True
    compaction_min_files: Annotated[
        int,
        Key(integer("int ≥ 2", "an integer of at least 2", 2),
            "Small files a partition (the table, when unpartitioned) must hold before it is compacted (Delta's own "
            "auto compaction starts at 50 too).",
            table_scoped=True),
    ] = 50
    compaction_small_file_bytes: Annotated[
        int,
        Key(POSITIVE, "Files smaller than this (and than half of `file.target.bytes`) are small: compaction rewrites "
                      "them and `compaction.min.files` counts them. A larger file is left as it is: every engine reads "
                      "it well, and rewriting files of this size again and again as the table grows costs a core "
                      "for little gain.",
            table_scoped=True),
    ] = 8388608
    compaction_max_duration_ms: Annotated[
        int,
        Key(POSITIVE, "How long one round of compaction may take: its `OPTIMIZE` commits in batches sized, by the "
                      "rewrite rate of the rounds before, to finish well within it; no partition starts in its last "
                      "quarter, and a batch still running at the bound is cancelled (it commits nothing; the batches "
                      "before it stay; the next round goes on). Ingestion goes on meanwhile.",
            table_scoped=True),
    ] = 60000
    compaction_zorder_by: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Columns to Z-order the compacted files by (`OPTIMIZE ... ZORDER BY`), which rewrites every file "
                    "of a compacted partition, not only the small ones; empty: bin-packing only.",
            table_scoped=True),
    ] = ()
    vacuum_enabled: Annotated[
        bool,
        Key(BOOL, "The coordinator runs Delta's `VACUUM` every `vacuum.interval.ms`, deleting files no version "
                  "within `vacuum.retention.hours` references (what compaction replaced, files of abandoned "
                  "transactions). Off by default, as in Delta: it limits time travel.",
            table_scoped=True),
    ] = False
    vacuum_retention_hours: Annotated[
        int,
        Key(POSITIVE, "How old an unreferenced file must be before `VACUUM` deletes it, and so how far back time "
                      "travel keeps working. Below Delta's safety default of 168 only with "
                      "`vacuum.retention.check.enabled=false`, and never below twice the longest a staged file "
                      "waits for its commit (`transaction.interval.ms` + `coordinator.writestatus.timeout.ms` + "
                      "`write.retry.timeout.ms`) nor below 1 hour.",
            table_scoped=True),
    ] = 168
    vacuum_retention_check_enabled: Annotated[
        bool,
        Key(BOOL, "Refuse a `vacuum.retention.hours` below 168 (Delta's "
                  "`spark.databricks.delta.retentionDurationCheck.enabled`).",
            table_scoped=True),
    ] = True
    vacuum_interval_ms: Annotated[int, Key(POSITIVE, "How often `VACUUM` runs with `vacuum.enabled=true`.",
                                           table_scoped=True)] = 86400000
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
            table_scoped=True,
        ),
    ] = True
    connect_meta_headers: Annotated[
        bool,
        Key(
            BOOL,
            "Add `_kafka_headers` (`array<struct<key:string,value:binary>>`: every Kafka header of the record in its "
            "order, repeated names and null values kept, `[]` for none) and `_kafka_timestamp_type` (`CreateTime`, "
            "`LogAppendTime`, null when Kafka gives none) to every row; needs `connect.meta.data=true`.",
            table_scoped=True,
        ),
    ] = False
    connect_meta_header_columns: Annotated[
        tuple[str, ...],
        Key(
            FIELDS,
            "Comma-separated Kafka header names, each stored as the string column `_kafka_header_<name>` (characters "
            "Delta refuses in a column name become `_`): the value of the record's last header of that name as "
            "UTF-8, null without one; a value that is not UTF-8 is a record error (`InvalidHeaderUtf8`). Needs "
            "`connect.meta.data=true`.",
            table_scoped=True,
        ),
    ] = ()

    errors_tolerance: Annotated[
        Tolerance,
        Key(
            choice(get_args(Tolerance)),
            "`none`: a record error, or a row that breaks a constraint of the table (CHECK, NOT NULL, a generated "
            "column), stops the connector; `all`: the record goes to the dead-letter topic (a rejected row's headers "
            "name the constraint and its expression) and/or the dead-letter table, and the rest commit.",
            table_scoped=True,
        ),
    ] = "none"
    errors_deadletterqueue_topic_name: Annotated[
        str | None,
        Key(
            OPTIONAL_TOPIC,
            "Dead-letter topic for records that fail conversion; with `errors.tolerance=all` this, "
            "`errors.deadletterqueue.table.name` or both.",
        ),
    ] = None
    errors_deadletterqueue_table_name: Annotated[
        str | None,
        Key(
            OPTIONAL_TABLE,
            "Dead-letter Delta table at `<target.base.path>/<name>`: each record error as a row (topic, partition, "
            "offset, timestamp, key, value, headers, error_class, message, stage, connector, time), committed before "
            "the data commit that passes its offset, exactly once; beside `errors.deadletterqueue.topic.name` or "
            "instead of it. Several tables of a connector may share it.",
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
            table_scoped=True,
        ),
    ] = False
    field_name_policy: Annotated[
        NamePolicy,
        Key(
            choice(get_args(NamePolicy)),
            "A field name Delta refuses without column mapping (a space or any of `,;{}()=`, a tab, a newline): "
            "`column_mapping` creates a new table that needs it with `delta.columnMapping.mode=name` (a table "
            "without such names stays plain) and takes such names into a table that has column mapping; "
            "`sanitize` replaces those characters by `_`; `error` makes the record a record error. A plain table "
            "never takes such a name: its record is a record error naming this key.",
            table_scoped=True,
        ),
    ] = "column_mapping"

    write_mode: Annotated[
        WriteMode,
        Key(
            choice(get_args(WriteMode)),
            "`append`: every record becomes a row; `upsert`: rows are matched on `record.key.fields` (a Delta MERGE "
            "per transaction), matched rows updated, new keys inserted; `dedup`: only rows whose key is not in the "
            "table yet are inserted; `changelog`: every change is a row, deletes and truncates included, with its "
            "op in `_cdc_op` (Debezium's `c`/`u`/`r`/`d`/`t`; a plain value `u`, a tombstone `d` with its key's "
            "columns) and, for Debezium events, the `_cdc_*` source position: an audit or history table.",
            table_scoped=True,
        ),
    ] = "append"
    record_key_fields: Annotated[
        tuple[str, ...],
        Key(FIELDS, "Comma-separated value fields that identify a row in `upsert` and `dedup` mode (and a "
                    "tombstone's row in `changelog` mode); a field the value lacks comes from the Kafka key: its "
                    "field of that name, or the whole key when it is a primitive and this names one field. Empty: "
                    "the fields of the Kafka key, which must then be a JSON object.",
            table_scoped=True),
    ] = ()
    delete_enabled: Annotated[
        bool,
        Key(BOOL, "In `upsert` mode, a tombstone (null value) or a Debezium delete (`op=d`) deletes its key's row; "
                  "when false such a record is a record error.",
            table_scoped=True),
    ] = False
    delete_mode: Annotated[
        DeleteMode,
        Key(choice(get_args(DeleteMode)), "`hard` removes a deleted row; `soft` keeps it with `_deleted=true` and "
                                           "the delete's record time in `_deleted_at`.",
            table_scoped=True),
    ] = "hard"
    value_envelope: Annotated[
        Envelope,
        Key(choice(get_args(Envelope)), "`debezium`: values are Debezium change events (with or without the JSON "
                                         "converter's `schema`/`payload` wrapper), unwrapped to the row they "
                                         "describe; with `connect.meta.data=true` the op and source position become "
                                         "`_cdc_*` columns.",
            table_scoped=True),
    ] = "none"
    upsert_order_field: Annotated[
        str | None,
        Key(OPTIONAL_TEXT, "Which of several changes to one key wins, and whether a change may overwrite the row in "
                           "the table: a value field (a dotted name reaches into a struct: `meta.version`), whose "
                           "value every change but a delete must carry; with `value.envelope=debezium` also "
                           "`ts_ms`, `source.ts_ms` or `source.lsn`. Empty: Debezium events by their source "
                           "position (chosen by `source.connector`), other records by Kafka order (offsets within "
                           "a partition, record timestamps between partitions). A change ordered before the "
                           "table's row never overwrites it (docs/ARCHITECTURE.md, \"The keyed-write rules\").",
            table_scoped=True),
    ] = None
    delete_truncate_enabled: Annotated[
        bool,
        Key(BOOL, "In `upsert` mode, a Debezium truncate (`op=t`) deletes every row of the table whose change it "
                  "follows (by source position) in the same commit; when false it is a record error "
                  "(`UnsupportedOperation`). `changelog` mode always keeps it as a row.",
            table_scoped=True),
    ] = False
    upsert_missing_fields: Annotated[
        MissingFields,
        Key(choice(get_args(MissingFields)), "In `upsert` mode, what an update does with a column its record does "
                                              "not carry: `keep` the stored value (a missing field never erases "
                                              "data; records with a schema carry every field), or set it `null` "
                                              "(the record is the whole row). An explicit null always sets null; "
                                              "Debezium's unavailable-value placeholder always keeps the stored "
                                              "value.",
            table_scoped=True),
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
        LogFormat, Key(choice(get_args(LogFormat)), "`text` for people, `json` for log shippers.")
    ] = "text"
    log_level: Annotated[LogLevel, Key(choice(get_args(LogLevel)), "Lowest level logged.")] = "INFO"

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


def stored_key(prefix: str, key: str) -> str:
    """spark_conf keeps whole keys (as Spark wants them); the Kafka overrides drop their prefix (as librdkafka does)."""
    return key if prefix == "spark." else key[len(prefix) :]


def full_key(prefix: str, stored: str) -> str:
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
    table_scoped: bool


def render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return ",".join(":".join(pair) for pair in value)
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


def _settings() -> tuple[Setting, ...]:
    settings = []
    for attr, field in Keys.model_fields.items():
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
                default_text=key.derived_default or render(default),
                table_scoped=key.table_scoped,
            )
        )
    return tuple(settings)


SETTINGS: tuple[Setting, ...] = _settings()
SETTINGS_BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}



TABLE_KEYS: tuple[str, ...] = tuple(setting.name for setting in SETTINGS if setting.table_scoped)
"""The keys a `table.<table>.<key>` key sets for one table of a connector that writes several."""
