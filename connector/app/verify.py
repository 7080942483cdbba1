"""`lakesink verify`: audit a lakesink table against its committed offsets and, when reachable, Kafka.

Read-only. From one Delta snapshot (JVM-free, delta-rs) it takes the connector's txn version, the manifest of
that version (the committed offsets, I1/I2 of docs/ARCHITECTURE.md) and the `_kafka_topic/_kafka_partition/_kafka_offset` columns, and
reports per partition:

- rows, and **duplicated** rows (an offset present more than once);
- **uncommitted** rows: offsets at or beyond the committed offset, visible although no commit covers them (I1);
- **missing** offsets below the committed offset that are not in the table. Offsets may be missing for good
  reasons (dead-lettered records, transaction markers, aborted or compacted records), so each one is checked
  against the partition in Kafka (read_committed) when the broker answers: an offset Kafka no longer holds is
  `expired`, one Kafka does not deliver is `not-in-kafka`, one found in the dead-letter topic (by its
  `__connect.errors.*` headers) or in the dead-letter table (errors.deadletterqueue.table.name: its rows of this
  connector) is `dead-lettered`, and a record Kafka delivers that is in neither place is a real **gap**. Without
  the broker, missing offsets stay `unchecked`. An offset the dead-letter table holds twice is a **duplicated dead
  letter**, which fails the audit as a duplicated row does.

A table that `route.field` fills (participant/route.py) reads its routed topics whole but keeps only the records
whose field names it: a missing offset whose record Kafka delivers and the table's `RecordRouter` leaves to another
table is **elsewhere**, never a gap. The records it answers for as `UnroutableRecord` must be dead-lettered, as any
record error.

A connector that writes several tables is verified table by table, each with the configuration of its own pipeline
(connector/routing.py), and passes only if every table does.

Exit 0 only with no duplicates, nothing uncommitted, no gaps and nothing left unchecked (`--no-kafka` accepts
unchecked offsets); 1 otherwise. The work is bounded: three columns are read, grouped and compared with
pyarrow/numpy, never row by row in Python; Kafka is read only inside the missing ranges, up to a record budget.

A keyed table (`write.mode=upsert|dedup`) holds one row per key, so most offsets are missing on purpose: a change
that a later one for its key replaced, a delete, a duplicate that dedup skipped. There the missing offsets are
**superseded**: counted, never gaps, and Kafka is not read for them. Instead the key columns are read too and
grouped: a key held by more than one row (a soft-deleted row, `_deleted=true`, counts: a key is one row whatever
its flag) is a **duplicated key**, and a row with a null key field a **null key**. Exit 0 only with no duplicated
offsets, no duplicated or null keys and nothing uncommitted. The key columns are `record.key.fields`, else the
table property `lakesink.key.fields`, else the fields of the Kafka key (the `_kafka_key` of a few rows, decoded as
JSON objects); the report says which.

The table is read through delta-rs's query engine, which applies deletion vectors (a MERGE leaves them in a table
with `delta.enableDeletionVectors=true`). A table with type widening (`delta.enableTypeWidening`, which a widening
schema evolution needs), which delta-rs refuses to read, is read from the data files its log lists, each cast to the
table's types; with deletion vectors or column mapping as well, it is refused with one line.

Here: the report and the command. The reads of the table are verify_table.py's, the analysis (pure) is
verify_analysis.py's, and the reading of Kafka verify_kafka.py's.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass

from connector import secrets
from connector.app.plans import table_plans
from connector.app.verify_analysis import KeyReport, PartitionReport, analyse, analyse_keys
from connector.app.verify_kafka import KafkaCheck, classify_missing
from connector.app.verify_table import (
    DeadLetterRows,
    VerifyError,
    key_columns,
    read_committed,
    read_coordinates,
    read_dead_letters,
)
from connector.config import LakesinkConfig
from connector.formats import registry_format
from connector.formats.registry import RegistryReader
from connector.formats.wire import RegistryUnavailable
from connector.routing import Route
from connector.schema.columns import COORDINATES
from connector.errors import LakesinkError, SetupError
from connector.storage.store import Location, Store
from connector.table.catalog import CatalogConflictError, CatalogUnavailableError, located
from connector.upsert import UpsertSpec
from participant.route import RecordRouter

log = logging.getLogger(__name__)


# --- the whole audit -----------------------------------------------------------------------------------

@dataclass
class Report:
    table_path: str
    connector: str
    table_exists: bool
    table_version: int | None
    txn_version: int | None
    kafka: str
    partitions: list[PartitionReport]
    notes: list[str]
    accept_unchecked: bool = False
    keys: KeyReport | None = None
    """Set for a keyed table (write.mode=upsert|dedup)."""
    route: Route | None = None
    """Set for a table that `route.field` fills."""
    dead_letters: DeadLetterRows | None = None
    """Set with errors.deadletterqueue.table.name once that table exists: this connector's rows in it."""

    def totals(self) -> dict[str, int]:
        names = ("rows", "duplicated", "missing", "uncommitted", "gaps", "dead_lettered", "not_in_kafka", "expired",
                 "unchecked", "elsewhere", "superseded")
        out = {"partitions": len(self.partitions)}
        out.update({k: sum(getattr(p, k) for p in self.partitions) for k in names})
        if self.keys is not None:
            out.update(duplicated_keys=self.keys.duplicated_keys, duplicated_key_rows=self.keys.duplicated_key_rows,
                       null_keys=self.keys.null_keys)
        if self.dead_letters is not None:
            out.update(dead_letter_rows=self.dead_letters.rows,
                       dead_letter_duplicated=self.dead_letters.duplicated)
        return out

    @property
    def ok(self) -> bool:
        t = self.totals()
        keys_ok = self.keys is None or (self.keys.duplicated_keys == 0 and self.keys.null_keys == 0)
        return (t["duplicated"] == 0 and t["uncommitted"] == 0 and t["gaps"] == 0 and keys_ok
                and t.get("dead_letter_duplicated", 0) == 0 and (t["unchecked"] == 0 or self.accept_unchecked))

    def summary(self) -> str:
        t = self.totals()
        result = f"result={'ok' if self.ok else 'FAILED'}"
        if self.keys is not None:
            return (f"verify: mode={self.keys.mode} key={','.join(self.keys.key)} partitions={t['partitions']} "
                    f"rows={t['rows']} duplicated={t['duplicated']} uncommitted={t['uncommitted']} "
                    f"superseded={t['superseded']} duplicated_keys={t['duplicated_keys']} null_keys={t['null_keys']} "
                    f"{result}")
        elsewhere = f"elsewhere={t['elsewhere']} " if self.route is not None else ""
        letters = (f"dead_lettered={t['dead_lettered']} dead_letter_rows={t['dead_letter_rows']} "
                   f"dead_letter_duplicated={t['dead_letter_duplicated']} " if self.dead_letters is not None else "")
        return (f"verify: partitions={t['partitions']} rows={t['rows']} duplicated={t['duplicated']} "
                f"missing={t['missing']} {elsewhere}uncommitted={t['uncommitted']} {letters}gaps={t['gaps']} "
                f"unchecked={t['unchecked']} {result}")

    def to_json(self) -> dict:
        out = {"table": self.table_path, "connector": self.connector, "table_exists": self.table_exists,
               "table_version": self.table_version, "txn_version": self.txn_version, "kafka": self.kafka,
               "ok": self.ok, "totals": self.totals(), "notes": self.notes,
               "partitions": [p.public() for p in self.partitions]}
        if self.keys is not None:
            out["keys"] = asdict(self.keys)
        return out

    def render(self) -> str:
        if self.keys is None:
            head = ("topic", "part", "committed", "rows", "dup", "uncommitted", "missing", "not-in-kafka", "expired",
                    *(("elsewhere",) if self.route is not None else ()), "dlq", "gaps", "unchecked")
            cells = [(p.rows, p.duplicated, p.uncommitted, p.missing, p.not_in_kafka, p.expired,
                      *((p.elsewhere,) if self.route is not None else ()), p.dead_lettered, p.gaps, p.unchecked)
                     for p in self.partitions]
        else:
            head = ("topic", "part", "committed", "rows", "dup", "uncommitted", "superseded")
            cells = [(p.rows, p.duplicated, p.uncommitted, p.superseded) for p in self.partitions]
        rows = [head] + [(p.topic, str(p.partition), "-" if p.committed is None else str(p.committed),
                          *(str(c) for c in cs)) for p, cs in zip(self.partitions, cells)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"table {self.table_path} (connector {self.connector}): Delta version {self.table_version}, "
                 f"lakesink txn version {self.txn_version}; Kafka: {self.kafka}"]
        if self.keys is not None:
            lines.append(f"keyed table (write.mode={self.keys.mode}), key {', '.join(self.keys.key)} "
                         f"({self.keys.key_source}): offsets the table lacks are superseded, not gaps")
        if self.route is not None:
            topics = ", ".join(sorted(self.route.topics)) if self.route.topics is not None else "every source topic"
            lines.append(f"routed table: the records of {topics} whose {self.route.field!r} sends them to another "
                         f"table are elsewhere, not gaps")
        lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  for r in rows]
        for p in self.partitions:
            tp = f"{p.topic}-{p.partition}"
            if p.duplicate_samples:
                lines.append(f"  {tp}: duplicated offsets, e.g. {p.duplicate_samples}")
            if p.uncommitted_samples:
                lines.append(f"  {tp}: rows at or beyond committed offset {p.committed}, e.g. {p.uncommitted_samples}")
            if p.gap_samples:
                lines.append(f"  {tp}: records in Kafka but neither in the table nor dead-lettered, e.g. {p.gap_samples}")
            if p.superseded_samples:
                lines.append(f"  {tp}: superseded offsets, e.g. {p.superseded_samples}")
        if self.keys is not None and self.keys.duplicated_keys:
            shown = "; ".join(", ".join(f"{k}={v!r}" for k, v in s["key"].items()) + f" ({s['rows']} rows)"
                              for s in self.keys.duplicated_key_samples)
            lines.append(f"  {self.keys.duplicated_keys} key(s) held by more than one row, e.g. {shown}")
        if self.dead_letters is not None and self.dead_letters.duplicated:
            lines.append(f"  {self.dead_letters.duplicated} dead-letter row(s) repeat an offset, e.g. "
                         f"{self.dead_letters.duplicate_samples}")
        if self.keys is not None and self.keys.null_keys:
            lines.append(f"  {self.keys.null_keys} row(s) with a null key column")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(self.summary())
        return "\n".join(lines)


def verify(cfg: LakesinkConfig, use_kafka: bool = True, kafka_budget: int = 10_000_000,
           kafka_timeout_s: float = 15.0, route: Route | None = None) -> Report:
    """The report of one table: `cfg` is the configuration of its pipeline, `route` its share of a routed topic's
    records (a connector that writes several tables: `verify_tables`)."""
    if cfg.many_tables:
        raise VerifyError(f"connector {cfg.name!r} writes several tables: verify each with its own configuration "
                          f"(verify_tables)")
    if not cfg.connect_meta_data:
        raise VerifyError(
            f"connector {cfg.name!r} runs with connect.meta.data=false: its rows carry no _kafka_topic/_kafka_partition/"
            f"_kafka_offset columns, so verify cannot compare them with the committed offsets. Set "
            f"connect.meta.data=true (it applies to a new table; an existing table keeps its schema)")
    try:
        cfg = located(cfg)  # an existing catalog table's location is the table
    except (CatalogUnavailableError, CatalogConflictError) as exc:
        raise VerifyError(f"the table's catalog entry cannot be read: {exc}") from None
    spec = UpsertSpec.from_config(cfg)
    store = Store.for_config(cfg)
    state = read_committed(cfg.table_path, cfg.name, store)
    if state.snapshot is None:
        return Report(cfg.table_path, cfg.name, False, None, None, "not needed", [],
                      ["the table does not exist yet: nothing was committed, nothing to verify"])
    keys = key_columns(spec.key_fields, state.snapshot, store) if spec.keyed else None
    rows = read_coordinates(state.snapshot, keys.names if keys else (), store)
    coords = rows.select(list(COORDINATES))
    nulls = coords.num_rows - coords.drop_null().num_rows
    notes: list[str] = []
    if state.txn_version is None:
        notes.append(f"the table has no lakesink commit of connector {cfg.name!r}: every row counts as uncommitted")
    letters = read_dead_letters(cfg.name, Store(Location.parse(cfg.dead_letter_table_path), store.s3)) \
        if cfg.dead_letter_table_path is not None else None
    kafka_status = "skipped (--no-kafka)"
    marks: dict[tuple[str, int], tuple[int, int]] = {}
    kafka: KafkaCheck | None = None
    if use_kafka:
        kafka = KafkaCheck(cfg, kafka_budget, kafka_timeout_s)
        why = kafka.reachable()
        if why is None:
            kafka_status = "reachable"
        else:
            kafka_status = f"unreachable ({why})"
            kafka.close()
            kafka = None
    try:
        partitions = set(state.offsets)
        if kafka is not None:
            present = coords.drop_null().group_by(["_kafka_topic", "_kafka_partition"]).aggregate([])
            partitions |= set(zip(present["_kafka_topic"].to_pylist(), present["_kafka_partition"].to_pylist()))
            for key in sorted(partitions):
                wm = kafka.watermarks(*key)
                if wm is not None:
                    marks[key] = wm
        lows = {k: wm[0] for k, wm in marks.items()} if cfg.kafka_auto_offset_reset == "earliest" else {}
        reports = analyse(coords, state.offsets, lows, keyed=spec.keyed)
        if kafka is not None and spec.keyed:
            kafka_status += ", watermarks only (superseded offsets are not read)"
        elif kafka is not None:
            router = _router(cfg, route) if route is not None else None
            try:
                notes += classify_missing(reports, kafka, cfg, marks, router,
                                          letters.offsets if letters is not None else None)
            except RegistryUnavailable as exc:
                raise VerifyError(f"the schema registry did not answer, so the {route.field!r} field of the routed "
                                  f"records cannot be read to tell which table each went to: {exc}") from None
            kafka_status += f", {kafka.records_read} record(s) read"
    finally:
        if kafka is not None:
            kafka.close()
    if nulls:
        notes.append(f"{nulls} row(s) have no source coordinates (null _kafka_* values): they were not written by "
                     f"lakesink")
    key_report = analyse_keys(rows, keys, spec.mode) if keys is not None else None
    report = Report(cfg.table_path, cfg.name, True, state.table_version, state.txn_version, kafka_status, reports,
                    notes, accept_unchecked=not use_kafka, keys=key_report, route=route, dead_letters=letters)
    if nulls:
        report.partitions.append(PartitionReport("<null>", -1, None, rows=nulls, uncommitted=nulls))
    return report


def _router(cfg: LakesinkConfig, route: Route) -> RecordRouter:
    """The router of the table's worker (participant/worker.py): the same reading of the route field."""
    settings, key_settings = cfg.registry_settings("value"), cfg.registry_settings("key")
    registry = RegistryReader(registry_format(cfg.value_converter), settings) if settings is not None else None
    key_registry = RegistryReader(registry_format(cfg.key_converter), key_settings, is_key=True) \
        if key_settings is not None else None
    return RecordRouter(route, cfg.value_converter, cfg.value_converter_schemas_enable,
                        cfg.value_envelope == "debezium", registry, key_registry)


@dataclass
class TablesReport:
    """The reports of a connector that writes several tables, and why a table could not be verified."""

    reports: dict[str, Report]
    errors: dict[str, str]

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.ok for r in self.reports.values())

    def tables(self) -> list[str]:
        return sorted({*self.reports, *self.errors})

    def to_json(self) -> dict:
        return {"tables": {t: self.reports[t].to_json() if t in self.reports else {"ok": False, "error": self.errors[t]}
                           for t in self.tables()}, "ok": self.ok}

    def render(self) -> str:
        """Each table's report, then one line for them all."""
        blocks = [self.reports[t].render() if t in self.reports else
                  f"table {t}: cannot be verified: {self.errors[t]}\nverify: result=FAILED" for t in self.tables()]
        passed = sum(r.ok for r in self.reports.values())
        return "\n\n".join([*blocks, f"verify: tables={len(self.tables())} ok={passed} "
                                      f"result={'ok' if self.ok else 'FAILED'}"])


def verify_tables(cfg: LakesinkConfig, use_kafka: bool = True, kafka_timeout_s: float = 15.0) -> TablesReport:
    """Verify each table of a connector that writes several with its pipeline's configuration (connector/routing.py).
    With `kafka.topic.regex` the tables come from the topics that exist, so the brokers must list them."""
    if cfg.kafka_topic_regex is not None and not use_kafka:
        raise VerifyError("the tables of kafka.topic.regex come from the topics that exist: verify needs Kafka to "
                          "list them (drop --no-kafka)")
    try:
        plans = table_plans(cfg, kafka_timeout_s)
    except SetupError as exc:
        raise VerifyError(f"the tables of kafka.topic.regex come from the topics that exist, which Kafka did not "
                          f"list: {exc}") from None
    out = TablesReport({}, {})
    for table_plan in plans:
        try:
            out.reports[table_plan.table] = verify(table_plan.cfg, use_kafka, kafka_timeout_s=kafka_timeout_s,
                                                   route=table_plan.route)
        except LakesinkError as exc:  # the other tables are still verified
            out.errors[table_plan.table] = str(exc)
    return out


def main(cfg: LakesinkConfig, as_json: bool = False, use_kafka: bool = True) -> int:
    """Print the report, without any secret value (it quotes the broker's errors)."""
    report = verify_tables(cfg, use_kafka=use_kafka) if cfg.many_tables else verify(cfg, use_kafka=use_kafka)
    scrubber = secrets.protect(cfg)
    if as_json:
        # key values may be dates or decimals
        print(scrubber.text(json.dumps(report.to_json(), indent=2, default=str)))
    else:
        print(scrubber.text(report.render()))
    return 0 if report.ok else 1
