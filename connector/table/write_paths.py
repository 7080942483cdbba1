"""Step 2 of the commit recipe (connector/table/sink.py), every way a txn's staged files become one Delta commit: as
they are through the Delta log (connector/table/delta_log.py), a Spark job that appends their rows, Delta's own
writer under the table's constraints (connector/table/delta_writer.py), or a MERGE of keyed writes
(connector/table/merge.py); and what a commit takes before it runs (agreeing, staged_schema).

The coordinator's alone: it needs the sink's Spark session (TableSession).
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, replace
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import CommitError, ConstraintViolationError, FencedError
from connector.jvm.spark import own_session
from connector.protocol.messages import StagedFile, WriteStatus
from connector.schema.algebra import unify
from connector.schema.columns import OFFSET, PARTITION, TOPIC
from connector.schema.layout import Transform
from connector.schema.names import (
    COLUMN_MAPPING_PROPERTIES,
    case_clashes,
    fold_case,
    needing_column_mapping,
    quote,
    renamed,
)
from connector.storage.store import Store
from connector.table import delta_writer, merge, merge_plan, merge_rules, merge_source
from connector.table.agreement import take_groups
from connector.table.datafiles import add_action, partition_types_supported, stats_json, write_parquet
from connector.table.delta_log import DeferredCheckpoints, DeltaLogCommitter, TableExistsError
from connector.table.features import TableProfile, read_profile
from connector.table.snapshot import TableSnapshot, staged_file_schema
from connector.table.snapshot import table_schema as table_schema_of
from connector.table.state import resolve
from connector.upsert import ABSENT, OLD_KEY, UpsertSpec

log = logging.getLogger(__name__)


class TableSession:
    """The sink's own session of the Spark context `spark_factory` gives (connector.jvm.spark.own_session): every
    commit of the sink runs on it, so the session settings of a MERGE (its txn identity, user metadata and
    schema evolution, connector/table/merge.py) are this table's alone while other tables of the process
    commit at the same time on the same context."""

    def __init__(self, spark_factory: Callable[[], object] | None, store: Store):
        self._factory = spark_factory
        self._store = store
        self._ready = False
        self._session: tuple[object, object] | None = None  # (the session the factory gave, the sink's own)

    def get(self):
        if self._factory is None:
            raise CommitError("this DeltaTableSink has no Spark session factory: only the coordinator commits")
        spark = self._factory()
        if not self._ready:
            if self._store.root.is_s3:  # the context may be shared: S3A reads the Hadoop configuration
                conf = spark.sparkContext._jsc.hadoopConfiguration()
                for key, value in self._store.s3.hadoop_conf().items():
                    conf.set(key, value)
            self._ready = True
        if self._session is None or self._session[0] is not spark:
            self._session = (spark, own_session(spark, unset=merge.TXN_SETTINGS))
        return self._session[1]


@dataclass(frozen=True)
class WritePaths:
    """The write paths of one table, with the sink's settings at the time of the call (DeltaTableSink.write_paths)."""

    store: Store
    table_path: str
    app_id: str
    partition_by: tuple[str, ...]
    schema_evolution: bool
    errors_tolerance: str
    # errors.tolerance=all: sends rows the table's constraints reject to the dead-letter topic and returns once
    # the broker has acknowledged every one of them (raises otherwise)
    dead_letter: Callable[[list[delta_writer.Violation]], None] | None
    upsert: UpsertSpec
    check_staged: bool  # DeltaTableSink.check_staged
    snapshot: TableSnapshot
    checkpoints: DeferredCheckpoints
    # raises UnsupportedTableError for a table lakesink cannot write, else its profile (DeltaTableSink.check_supported)
    check_supported: Callable[[object], TableProfile | None]
    generated: tuple[Transform, ...] = ()  # partition.field.name's time transforms: generated columns of a new table
    cluster_by: tuple[str, ...] = ()  # table.cluster.by: a new table is clustered by these columns

    def append(self, spark, version: int, statuses: tuple[WriteStatus, ...], expect_new_table: bool,
               user_metadata: str) -> tuple[int, int] | None:
        """Step 2: one Delta commit adds the participants' data files, as they are, with the txn action
        (connector.table.delta_log). A table whose features the fast path does not handle (connector.table.features)
        is written by Delta's own writer (connector.table.delta_writer), as are files not split by the table's
        partition columns (partition values of types not written here: timestamps, decimals, floats); their
        rows are read by Spark and the participants' files deleted once committed.
        (rows written, rows rejected by the table's constraints) when Delta's writer ran, else None. `spark`: the
        sink's own session (TableSession); `user_metadata`: the commit's (connector/table/state.py commit_metadata)."""
        dt = self.snapshot.delta()  # one snapshot for the schema and the features
        table_schema = table_schema_of(dt)
        profile = self.check_supported(dt) if dt is not None else None
        files = [(f, staged_file_schema(s, f)) for s in statuses for f in s.files if f.rows > 0]
        schema = table_schema
        adds: list[dict] = []
        replaced: list[str] = []
        if files and self.upsert.keyed:
            result = self._merge(spark, version, statuses, files, table_schema, profile, expect_new_table,
                                 user_metadata)
            self.store.delete_unreferenced([f.path for f, _ in files], "merged by Spark")
            return result
        if files:
            # Delta is case-insensitive: a file's `Name` is the table's (or an earlier file's) `name`
            schema = _target_schema(fold_case([fs for _, fs in files], table_schema), table_schema,
                                    self.schema_evolution)
            self._check_names(schema, profile, version)
            if table_schema is None and (self.generated or self.cluster_by):
                self._create_with_layout(spark, schema,
                                         COLUMN_MAPPING_PROPERTIES if needing_column_mapping(schema) else {})
                dt = self.snapshot.delta()
                table_schema, profile, expect_new_table = table_schema_of(dt), self.check_supported(dt), False
            self._enable_timestamp_ntz(spark, profile, schema)
            if profile is not None and not profile.fast_path:
                result = self._append_with_delta_writer(spark, version, files, schema, table_schema, profile,
                                                        user_metadata)
                self.store.delete_unreferenced([f.path for f, _ in files], "rewritten by Delta's writer")
                return result
            partition_by = profile.partition_columns if profile is not None else self.partition_by
            whole = next((f.path for f, _ in files if f.partition_values is None
                          or set(f.partition_values) != set(partition_by)), None)
            unsupported = partition_types_supported(schema, partition_by)
            # a new table with a name Delta's plain mode refuses is created with column mapping, by Delta's writer
            # (it assigns the physical names and ids); a table without such names keeps the fast path
            mapped = needing_column_mapping(schema) if table_schema is None else []
            if whole is not None or unsupported or mapped:
                log.info("%s: appending txn version %d with a Spark job",
                         (f"column(s) {', '.join(mapped)} need column mapping (field.name.policy=column_mapping)"
                          if mapped else unsupported or f"data file {whole} is not split by the partition columns"),
                         version)
                self._append_with_spark(spark, version, files, schema, partition_by, expect_new_table, user_metadata,
                                        COLUMN_MAPPING_PROPERTIES if mapped else None)
                self.store.delete_unreferenced([f.path for f, _ in files], "rewritten by Spark")
                return None
            conformed = []
            for f, file_schema in files:
                if file_schema is None or not _fits(file_schema, schema):
                    replaced.append(f.path)
                    f = self._conform(f, schema, tuple(partition_by))
                conformed.append(f)
            adds = [add_action(f.path, f.bytes, f.modified_ms, f.partition_values, f.stats) for f in conformed]
        try:
            self._committer(spark).commit(
                self.store.root.spark_path, self.app_id, version, adds, partition_by=self.partition_by,
                schema=schema if (table_schema is None or self.schema_evolution) else None,
                expect_new_table=expect_new_table, user_metadata=user_metadata)
        except Exception as exc:  # noqa: BLE001 - py4j raises the JVM's errors
            self._raise_if_created_by_another(exc, expect_new_table)
            raise
        self.store.delete_unreferenced(replaced, "replaced by a conformed copy")
        return None

    def _committer(self, spark) -> DeltaLogCommitter:
        """The commit's txn read takes the snapshot append has just brought up to date (TableSnapshot.at)."""
        return DeltaLogCommitter(spark, lambda _path, version: self.snapshot.at(version), self.checkpoints)

    def _conform(self, f: StagedFile, schema: pa.Schema, partition_by: tuple[str, ...]) -> StagedFile:
        """A copy of data file `f` whose columns have the table's types (a file written before a column's type
        widened, or with a column all null): the rare commit that reads a data file."""
        from connector.schema.algebra import conform

        data_schema = pa.schema([fld for fld in schema if fld.name not in partition_by])
        with self.store.fs.open_input_file(self.store.path(f.path)) as source:
            table = conform(renamed(pq.read_table(source), data_schema), data_schema)
        path = f"{f.path[:-len('.parquet')]}-c{uuid.uuid4().hex[:6]}.parquet"
        log.debug("data file %s conformed to the table's schema as %s", f.path, path)
        size, modified_ms, stats = write_parquet(self.store, path, table)
        return replace(f, path=path, bytes=size, modified_ms=modified_ms, stats=stats_json(stats))

    def _spark_frame(self, spark, files: list[tuple[StagedFile, pa.Schema | None]], schema: pa.Schema):
        """The rows of the data files as one DataFrame with `schema`: whole files as they are, files split by
        partition with their partition values as columns again."""
        from pyspark.sql import functions as F

        spark_schema = _spark_schema(spark, schema)
        groups: dict[tuple, list[str]] = {}
        for f, file_schema in files:
            # keyed writes under upsert.missing.fields=keep: a file without a column does not carry it (ABSENT)
            lacking = () if ABSENT not in schema.names or file_schema is None else tuple(sorted(
                n for n in schema.names if n.casefold() not in {m.casefold() for m in file_schema.names}
                and n != OLD_KEY))
            key = (tuple(sorted((f.partition_values or {}).items())), lacking)
            groups.setdefault(key, []).append(self.store.spark_path(f.path))
        frame = None
        for (key, lacking), paths in groups.items():
            values = dict(key)
            data_schema = _spark_schema(spark, pa.schema([fld for fld in schema if fld.name not in values]))
            df = spark.read.schema(data_schema).parquet(*paths)
            for name, value in values.items():
                df = df.withColumn(name, F.lit(value).cast(spark_schema[name].dataType))
            if lacking:
                df = df.withColumn(ABSENT, F.array_union(F.coalesce(F.col(ABSENT), F.array().cast("array<string>")),
                                                         F.array(*[F.lit(n) for n in lacking])))
            df = df.select(*[F.col(quote(name)) for name in schema.names])
            frame = df if frame is None else frame.unionByName(df)
        return frame

    def _append_with_delta_writer(self, spark, version: int, files: list[tuple[StagedFile, pa.Schema | None]],
                                  schema: pa.Schema, table_schema: pa.Schema, profile: TableProfile,
                                  user_metadata: str) -> tuple[int, int]:
        """Delta's writer appends the rows that satisfy the table's constraints; the others are dead-lettered
        first (errors.tolerance=all) or stop the connector naming the first of them (none), before anything of
        the txn is committed."""
        log.debug("txn version %d goes through Delta's writer: %s", version, "; ".join(profile.slow_path_reasons()))
        df = delta_writer.prepare(self._spark_frame(spark, files, schema), profile)
        for column, explicit in profile.identity.items():
            if explicit and column in df.columns and _all_null(files, column):
                df = df.drop(column)  # BY DEFAULT identity: Delta assigns the values no record gave
        good, violations = self._split(df, profile, version)
        total = sum(f.rows for f, _ in files)
        grows = self.schema_evolution and any(table_schema.get_field_index(n) < 0 for n in schema.names)
        if total == len(violations):
            self._committer(spark).commit(
                self.store.root.spark_path, self.app_id, version, [], partition_by=self.partition_by, schema=None,
                expect_new_table=False, user_metadata=user_metadata)
        else:
            delta_writer.write(good, self.store.root.spark_path, self.app_id, version, user_metadata, profile, grows)
        return total - len(violations), len(violations)

    def _split(self, df, profile: TableProfile, version: int) -> tuple[object, list[delta_writer.Violation]]:
        """The rows of `df` that satisfy the table's constraints, and those that do not, already dead-lettered
        (errors.tolerance=all); with errors.tolerance=none the first violation stops the commit, naming it."""
        good, violations = delta_writer.split(df, profile, first_only=self.errors_tolerance != "all")
        if violations and self.errors_tolerance != "all":
            first = violations[0]
            raise ConstraintViolationError(
                f"{first.where()} violates the {first.constraint.name} constraint ({first.constraint.expression}) "
                f"of {self.table_path}; errors.tolerance=none stops here and nothing of txn version {version} was "
                f"committed: fix the record or the constraint, or set errors.tolerance=all to dead-letter such rows")
        if violations:
            if self.dead_letter is None:
                raise CommitError(f"{len(violations)} row(s) violate constraints of {self.table_path} and there "
                                  f"is no dead-letter producer")
            log.warning("%d row(s) of txn version %d violate constraints of %s (first: %s, %s constraint); "
                        "dead-lettering them", len(violations), version, self.table_path, violations[0].where(),
                        violations[0].constraint.name)
            self.dead_letter(violations)
        return good, violations

    def merge_keys(self, statuses: tuple[WriteStatus, ...]) -> tuple[str, ...]:
        """The columns a keyed txn matches rows on: record.key.fields, else the key fields every status with rows
        reports (the Kafka key's fields). Statuses that disagree are a permanent error."""
        if self.upsert.key_fields:
            return tuple(self.upsert.key_fields)
        reported = {}
        for s in statuses:
            if any(f.rows for f in s.files):
                reported.setdefault(tuple(s.key_fields), f"{s.topic}-{s.partition}")
        if len(reported) > 1:
            (a, where_a), (b, where_b) = list(reported.items())[:2]
            raise CommitError(f"the records of {where_a} are keyed by {','.join(a) or 'nothing'} and those of "
                              f"{where_b} by {','.join(b) or 'nothing'}: one table needs one key; set "
                              f"record.key.fields to the key's value fields", permanent=True)
        keys = next(iter(reported), ())
        if not keys:
            raise CommitError(f"write.mode={self.upsert.mode} but the txn's WRITE-STATUS names no key fields: "
                              f"set record.key.fields, or run every worker at this lakesink version", permanent=True)
        return keys

    def _earlier_versions(self, spark):
        """The table at each of its OLD_KEY_VERSIONS versions before the newest, newest first (DataFrames, read
        when asked for): where a primary-key change's old row is when an earlier txn deleted it."""
        newest = self.snapshot.version()
        if newest is None:
            return
        for older in range(newest - 1, max(-1, newest - 1 - merge_source.OLD_KEY_VERSIONS), -1):
            yield spark.read.format("delta").option("versionAsOf", older).load(self.store.root.spark_path)

    def _merge(self, spark, version: int, statuses: tuple[WriteStatus, ...],
               files: list[tuple[StagedFile, pa.Schema | None]], table_schema: pa.Schema | None,
               profile: TableProfile | None, expect_new_table: bool, user_metadata: str) -> tuple[int, int]:
        """Step 2 in a keyed mode: one Delta MERGE of the txn's changes, collapsed per key, with the txn action
        (connector/table/merge.py), or the Spark write that creates the table. (rows staged, rows rejected by the
        table's constraints)."""
        if any(fs is None for _, fs in files):
            raise CommitError("a WRITE-STATUS names data files without their schema: every worker must run this "
                              "lakesink version")
        staged = unify(fold_case([fs for _, fs in files], table_schema))  # `Name` is the table's `name`
        self._check_names(staged, profile, version)
        keys = self.merge_keys(statuses)
        for key in keys:  # a txn of truncates only stages no key column: the table's, null
            if staged.get_field_index(key) < 0 and table_schema is not None and table_schema.get_field_index(key) >= 0:
                staged = staged.append(table_schema.field(key))
        order = self.upsert.order_path(staged.names)
        needed = (*keys, PARTITION, OFFSET)
        missing = [c for c in needed if staged.get_field_index(c) < 0]
        if missing:
            raise CommitError(f"the staged rows of txn version {version} lack the column(s) {', '.join(missing)} "
                              f"that write.mode={self.upsert.mode} needs: check record.key.fields and "
                              f"upsert.order.field, and run every worker at this lakesink version", permanent=True)
        wanted = merge_plan.table_columns(self.upsert, staged)
        if table_schema is None and (self.generated or self.cluster_by):
            self._create_with_layout(spark, wanted, {
                **merge.NEW_TABLE_PROPERTIES, **(COLUMN_MAPPING_PROPERTIES if needing_column_mapping(wanted) else {})})
            dt = self.snapshot.delta()
            table_schema, profile, expect_new_table = table_schema_of(dt), self.check_supported(dt), False
        order_in_table = bool(order) and (table_schema is None or table_schema.get_field_index(order[0]) >= 0)
        if not order_in_table and order and self.upsert.order_field is None and not self.schema_evolution:
            # the source position of Debezium events, which a table made before lakesink kept it lacks: it orders
            # the txn's changes, and Kafka order the changes against the table's rows
            wanted = pa.schema([f for f in wanted if f.name != order[0]])
        if table_schema is not None and not self.schema_evolution:
            new = [n for n in wanted.names if table_schema.get_field_index(n) < 0]
            if new:
                raise CommitError(f"{self.table_path} has no column(s) {', '.join(map(repr, new))}: set "
                                  f"schema.evolution=true to add them, or add them to the table", permanent=True)
        self._enable_timestamp_ntz(spark, profile, wanted)
        identity = profile.identity if profile is not None else {}
        plan = merge_plan.MergePlan(self.upsert, keys, tuple(n for n in wanted.names if identity.get(n, True)),
                               order_in_table or table_schema is None,
                               tuple(n for n in wanted.names if identity.get(n) is True))
        total = sum(f.rows for f, _ in files)
        rejected = 0
        if profile is None or not (profile.constraints or profile.generated):
            # a primary-key change's create takes what it lacks from the old key's row (docs/ARCHITECTURE.md)
            df = merge_source.from_old_keys(self._spark_frame(spark, files, staged), plan, None if table_schema is None
                                            else spark.read.format("delta").load(self.store.root.spark_path),
                                            self._earlier_versions(spark))
        else:
            df, rejected = self._hold_to_rules(spark, version, statuses, files, staged, plan, profile)
            if rejected == total:
                self._committer(spark).commit(
                    self.store.root.spark_path, self.app_id, version, [], partition_by=self.partition_by,
                    schema=None, expect_new_table=False, user_metadata=user_metadata)
                return 0, rejected
        df, truncated = merge_source.truncation(df, plan)
        table = None if table_schema is None else spark.read.format("delta").load(self.store.root.spark_path)
        source = merge_source.source(df, plan, table)
        partition_by = profile.partition_columns if profile is not None else self.partition_by
        log.info("txn version %d: MERGE on %s (write.mode=%s) into %s", version, ",".join(keys), self.upsert.mode,
                 self.table_path)
        try:
            if table_schema is None:
                merge.create(source, plan, self.store.root.spark_path, tuple(partition_by), self.app_id, version,
                             user_metadata, COLUMN_MAPPING_PROPERTIES if needing_column_mapping(wanted) else None)
            else:
                if expect_new_table:
                    raise TableExistsError(f"{self.table_path} was created by another writer")
                from delta.tables import DeltaTable

                target = DeltaTable.forPath(spark, self.store.root.spark_path)
                merge.run(spark, target, source, plan, tuple(partition_by), self.app_id, version, user_metadata,
                          self.schema_evolution, truncated)
        except Exception as exc:  # noqa: BLE001
            self._raise_if_created_by_another(exc, expect_new_table)
            raise
        return total - rejected, rejected

    def _hold_to_rules(self, spark, version: int, statuses: tuple[WriteStatus, ...],
                       files: list[tuple[StagedFile, pa.Schema | None]], staged: pa.Schema, plan: merge_plan.MergePlan,
                       profile: TableProfile) -> tuple[object, int]:
        """(the txn's staged changes without those whose row would break a rule of the table, how many those
        were): each change is checked as the row it writes (merge_rules.written) before the changes are collapsed, and
        the breaking ones are dead-lettered or stop the commit naming the first (`_split`); with soft deletes a
        column tells the MERGE which deleted rows of keys the table lacks it may insert (merge_rules.insertable). Each
        row carries its coordinates: `_kafka_topic`, which connect.meta.data=false leaves out, from its status."""
        from pyspark.sql import functions as F

        if staged.get_field_index(TOPIC) >= 0:
            df = self._spark_frame(spark, files, staged)
        else:
            topic_of = {f.path: s.topic for s in statuses for f in s.files}
            groups: dict[str, list[tuple[StagedFile, pa.Schema | None]]] = {}
            for f, file_schema in files:
                groups.setdefault(topic_of[f.path], []).append((f, file_schema))
            df = None
            for topic, group in groups.items():
                part = self._spark_frame(spark, group, staged).withColumn(TOPIC, F.lit(topic))
                df = part if df is None else df.unionByName(part)
        df = delta_writer.prepare(df, profile)
        target = spark.read.format("delta").load(self.store.root.spark_path)
        # before the rules: the row a primary-key change writes
        df = merge_source.from_old_keys(df, plan, target, self._earlier_versions(spark))
        _, violations = self._split(merge_rules.written(df, target, plan, profile), profile, version)
        df = merge_rules.without(spark, df, violations)
        if plan.spec.mode == "upsert" and plan.spec.soft_delete:
            df = merge_rules.insertable(df, plan, {f.name: f.dataType for f in target.schema}, profile)
        return df, len(violations)

    def _append_with_spark(self, spark, version: int, files: list[tuple[StagedFile, pa.Schema | None]],
                           schema: pa.Schema, partition_by: tuple[str, ...], expect_new_table: bool,
                           user_metadata: str, properties: dict[str, str] | None = None) -> None:
        """A Spark job appends the files' rows; `properties`: the table properties of a table it creates."""
        writer = (self._spark_frame(spark, files, schema).write.format("delta")
                  .mode("errorifexists" if expect_new_table else "append")
                  .option("txnAppId", self.app_id)
                  .option("txnVersion", version)
                  .option("userMetadata", user_metadata))
        if self.schema_evolution:
            writer = writer.option("mergeSchema", "true")
        for key, value in (properties or {}).items():
            writer = writer.option(key, value)  # a Delta option of the write that creates the table: a property
        if partition_by and (expect_new_table or properties):
            writer = writer.partitionBy(*partition_by)
        try:
            writer.save(self.store.root.spark_path)
        except Exception as exc:  # noqa: BLE001
            self._raise_if_created_by_another(exc, expect_new_table)
            raise

    def _enable_timestamp_ntz(self, spark, profile: TableProfile | None, schema: pa.Schema) -> None:
        """Delta gives a table it creates with a TIMESTAMP_NTZ column the `timestampNtz` feature, but refuses any
        commit that adds such a column to an existing table without it (DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT), on
        every write path. Schema evolution that adds one (a source's new `timestamp` column) first enables the
        feature, as `ALTER TABLE ... SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')` would: a
        protocol-only commit, idempotent, that a redo of the txn finds already made. `profile`: the table's (None
        when it does not exist yet)."""
        if profile is None or not self.schema_evolution or not any(_has_timestamp_ntz(f.type) for f in schema):
            return
        if "timestampntz" in {f.lower() for f in profile.features}:
            return
        from delta.tables import DeltaTable

        log.info("%s: adding the timestampNtz table feature for the TIMESTAMP_NTZ column(s) schema evolution adds",
                 self.table_path)
        DeltaTable.forPath(spark, self.store.root.spark_path).addFeatureSupport("timestampNtz")

    def _check_names(self, schema: pa.Schema, profile: TableProfile | None, version: int) -> None:
        """Names the table cannot take fail the txn, never for good (a CommitError that is not permanent): the
        txn is discarded and its records are read again against the table, whose names the participants then
        convert them onto, or make record errors (field.name.policy). Two cases: columns of one file that differ
        only in case (Delta takes them for one column, fold_case cannot merge them), and a name Delta's plain mode
        refuses in a txn for an existing table without column mapping (staged before the table was created)."""
        clashes = case_clashes(schema)
        if clashes:
            raise CommitError(f"txn version {version} has column(s) {', '.join(clashes)} that differ only in case, "
                              f"which Delta takes for one column: the txn's records are read again against "
                              f"{self.table_path}")
        refused = needing_column_mapping(schema) if profile is not None and profile.column_mapping == "none" else []
        if refused:
            raise CommitError(f"txn version {version} has column(s) {', '.join(refused)} whose names "
                              f"{self.table_path} cannot hold: it has no column mapping "
                              f"(delta.columnMapping.mode); the txn's records are read again against it and "
                              f"field.name.policy decides what becomes of such fields")

    def _create_with_layout(self, spark, schema: pa.Schema, properties: dict[str, str]) -> None:
        """Create the table, empty, with its layout (partition.field.name's time transforms as generated columns,
        or table.cluster.by's clustering), which a DataFrame write cannot declare; the txn's rows then go in as into
        any existing table, in a commit of their own with the txn action. A table another coordinator created first:
        FencedError, and recovery runs again."""
        for t in self.generated:
            if schema.get_field_index(t.column) < 0:
                schema = schema.append(pa.field(t.column, t.arrow_type))
        log.info("creating %s with its layout (%s)", self.table_path,
                 f"clustered by {','.join(self.cluster_by)}" if self.cluster_by
                 else f"partitioned by {','.join(self.partition_by)}")
        try:
            self._committer(spark).create(
                self.store.root.spark_path, schema, partition_by=self.partition_by, cluster_by=self.cluster_by,
                generated={t.column: t.expression for t in self.generated}, properties=properties)
        except Exception as exc:  # noqa: BLE001 - py4j raises the JVM's errors
            self._raise_if_created_by_another(exc, True)
            raise
        self.snapshot.forget()

    def _raise_if_created_by_another(self, exc: Exception, expect_new_table: bool) -> None:
        """The commit that was to create the table lost the race to another writer's: FencedError, so that
        the coordinator recovers again under a new epoch."""
        text = str(exc)
        if isinstance(exc, TableExistsError) or (
                expect_new_table and ("already exists" in text or "ConcurrentWrite" in text)):
            raise FencedError(f"another coordinator created {self.table_path} first; recovering again") from exc

    def staged_schema(self, statuses: tuple[WriteStatus, ...]) -> pa.Schema | None:
        """The schema the commit of `statuses` gives a table that does not exist yet (None: no rows)."""
        statuses = resolve(self.store, self.table_path, statuses)
        schemas = [staged_file_schema(s, f) for s in statuses for f in s.files if f.rows > 0]
        if not schemas:
            return None
        if any(schema is None for schema in schemas):
            raise CommitError("a WRITE-STATUS names data files without their schema: every worker must run this "
                              "lakesink version")
        schema = _target_schema(fold_case(schemas), None, self.schema_evolution)  # as the commit will
        return merge_plan.table_columns(self.upsert, schema) if self.upsert.keyed else schema

    def agreeing(self, statuses: tuple[WriteStatus, ...]) -> tuple[tuple[WriteStatus, ...],
                                                                 list[tuple[WriteStatus, str]]]:
        """The statuses whose file groups one commit can take, and those it leaves out with why
        (connector/table/agreement.py `take_groups`)."""
        statuses = resolve(self.store, self.table_path, statuses)
        dt = self.snapshot.delta()
        table_schema = table_schema_of(dt)
        type_widening = table_schema is not None and read_profile(dt).type_widening
        gone = set(self.store.missing([f.path for s in statuses for f in s.files])) if self.check_staged else set()
        columns = (lambda schema: merge_plan.table_columns(self.upsert, schema)) if self.upsert.keyed else None
        return take_groups(statuses, table_schema, evolve=self.schema_evolution, type_widening=type_widening,
                           gone=gone, columns=columns)


def _fits(file_schema: pa.Schema, schema: pa.Schema) -> bool:
    """Whether a file with `file_schema` reads as `schema` by column name, as Delta's readers read files: every
    column the file has is in `schema` with the same type (nullability aside); a column it lacks reads as null."""
    for f in file_schema:
        index = schema.get_field_index(f.name)
        if index < 0 or not _same_type(f.type, schema.field(index).type):
            return False
    return True


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return _fits(pa.schema(list(a)), pa.schema(list(b)))
    if (pa.types.is_list(a) and pa.types.is_list(b)) or (pa.types.is_large_list(a) and pa.types.is_large_list(b)):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) and pa.types.is_map(b):
        return _same_type(a.key_type, b.key_type) and _same_type(a.item_type, b.item_type)
    return a.equals(b)


def _has_timestamp_ntz(kind: pa.DataType) -> bool:
    """Whether a column of `kind` is or holds a timestamp without a time zone (Delta's TIMESTAMP_NTZ)."""
    if pa.types.is_timestamp(kind):
        return kind.tz is None
    if pa.types.is_struct(kind):
        return any(_has_timestamp_ntz(f.type) for f in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_timestamp_ntz(kind.value_type)
    if pa.types.is_map(kind):
        return _has_timestamp_ntz(kind.key_type) or _has_timestamp_ntz(kind.item_type)
    return False


def _target_schema(schemas: list[pa.Schema], table_schema: pa.Schema | None, evolve: bool) -> pa.Schema:
    """The table's schema after a commit of files with `schemas`: theirs unified for a new table, the table's
    grown by them when evolving, else the table's."""
    from connector.schema.algebra import unify

    if table_schema is None:
        return unify(schemas)
    return unify([table_schema, *schemas]) if evolve else table_schema


def _spark_schema(spark, schema: pa.Schema | None):
    from pyspark.sql.pandas.types import from_arrow_schema

    if schema is None:
        raise CommitError("cannot write an empty commit to a table that does not exist yet")
    return from_arrow_schema(schema)



def _all_null(files: list[tuple[StagedFile, pa.Schema | None]], column: str) -> bool:
    """Whether `column` is null in every row of the data files (or not in them), from their statistics."""
    for f, schema in files:
        if schema is not None and schema.get_field_index(column) < 0:
            continue
        stats = json.loads(f.stats or "{}")
        if stats.get("nullCount", {}).get(column) != stats.get("numRecords", -1):
            return False
    return True
