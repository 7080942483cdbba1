"""What a Delta table demands of its writers, read from its protocol and metadata, and how lakesink writes to it.

Three answers, decided by `TableProfile` from the table's own description (docs/ARCHITECTURE.md, "Tables lakesink
writes to"):
- **fast path**: the participants' Parquet files are added as they are. Only for tables where that provably
  writes what Delta's own writer would: no column mapping, no constraint of any kind (CHECK, NOT NULL,
  invariants), no generated column but lakesink's own time transforms (connector/schema/layout.py: the participants
  compute them), no identity column, and no feature whose writers must do more than add files;
- **Delta's writer**: every other table delta-spark can write. Spark's Delta writer writes the transaction's
  rows, so Delta maps column names, computes generated columns, assigns identities and checks every constraint;
  lakesink checks the same constraints first, so that a violating row is dead-lettered or named, not a failed
  commit;
- **refused**: a table a writer of this version cannot write correctly, at start-up with one line.

Pure: the caller reads the protocol and metadata (delta-rs, JVM-free).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from connector.errors import SetupError
from connector.schema import layout
from connector.schema.names import quote as _quote, quote_path

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

DELTA_SPARK_FEATURES = frozenset({
    "adaptivemetadata-preview", "allowcolumndefaults", "appendonly", "catalogmanaged", "changedatafeed",
    "checkconstraints", "checkpointprotection", "clustering", "columnmapping", "coordinatedcommits-preview",
    "deletionvectors", "domainmetadata", "generatedcolumns", "geospatial", "geospatial-dev", "icebergcompatv1",
    "icebergcompatv2", "icebergcompatv3", "identitycolumns", "incommittimestamp", "invariants",
    "materializepartitioncolumns", "rowtracking", "timestampntz", "typewidening", "typewidening-preview",
    "v2checkpoint", "vacuumprotocolcheck", "variantshredding", "variantshredding-preview", "varianttype",
    "varianttype-preview"})
"""The table features the pinned delta-spark (4.4) knows (`TableFeature.allSupportedFeaturesMap`, lower case);
tests/integration/test_table_features.py checks this list against the JVM's."""

FAST_PATH_FEATURES = frozenset({
    "appendonly", "invariants", "checkconstraints", "changedatafeed", "generatedcolumns", "identitycolumns",
    "columnmapping", "deletionvectors", "timestampntz", "v2checkpoint", "vacuumprotocolcheck", "domainmetadata",
    "incommittimestamp", "checkpointprotection", "typewidening", "typewidening-preview"})
"""Features under which adding files as they are is what Delta's writer does for an append, as long as the
table uses none of their content (checked separately: constraints, generated and identity columns, column
mapping). Delta's transaction itself writes in-commit timestamps, checkpoints and domain metadata."""

REFUSED_FEATURES = {
    "catalogmanaged": "its commits go through a catalog, not the table's log",
    "coordinatedcommits-preview": "its commits go through a commit coordinator, not the table's log",
    "varianttype": "variant columns cannot be produced from Kafka records yet",
    "varianttype-preview": "variant columns cannot be produced from Kafka records yet",
    "variantshredding": "variant columns cannot be produced from Kafka records yet",
    "variantshredding-preview": "variant columns cannot be produced from Kafka records yet",
    "geospatial": "geospatial columns cannot be produced from Kafka records yet",
    "geospatial-dev": "geospatial columns cannot be produced from Kafka records yet",
}

_LEGACY_WRITER = {2: ("appendonly", "invariants"), 3: ("checkconstraints",),
                  4: ("changedatafeed", "generatedcolumns"), 5: ("columnmapping",), 6: ("identitycolumns",)}

GENERATION = "delta.generationExpression"
IDENTITY_START = "delta.identity.start"
IDENTITY_EXPLICIT = "delta.identity.allowExplicitInsert"
DEFAULT = "CURRENT_DEFAULT"
INVARIANTS = "delta.invariants"
CONSTRAINT_PREFIX = "delta.constraints."
TYPE_WIDENING = "delta.enableTypeWidening"


class UnsupportedTableError(SetupError):
    """The table uses something lakesink cannot write correctly; nothing was written."""


@dataclass(frozen=True)
class Constraint:
    """A rule every row must satisfy: `predicate` is a Spark SQL expression that is true for a good row."""

    name: str  # as Delta names it: the CHECK constraint's name, "NOT NULL", "generated column x", ...
    expression: str  # what the user declared (shown in errors and dead-letter headers)
    predicate: str


@dataclass(frozen=True)
class TableProfile:
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: frozenset[str] = frozenset()
    writer_features: frozenset[str] = frozenset()
    column_mapping: str = "none"
    partition_columns: tuple[str, ...] = ()
    generated: dict[str, str] = field(default_factory=dict)  # column -> generation expression
    identity: dict[str, bool] = field(default_factory=dict)  # column -> explicit values allowed
    defaults: tuple[str, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    txn_retention_s: float | None = None  # delta.setTransactionRetentionDuration: Delta forgets older txns
    type_widening: bool = False  # delta.enableTypeWidening=true: a column's type may widen (byte -> int, ...)
    deleted_file_retention_s: float | None = None  # delta.deletedFileRetentionDuration: what VACUUM keeps

    def txn_refresh_s(self) -> float | None:
        """How long the connector may go without a commit before it must refresh its txn (an empty commit), so
        that its txn is always younger than the table's retention of txns; None: txns never expire."""
        return None if self.txn_retention_s is None else self.txn_retention_s / 3

    @property
    def features(self) -> frozenset[str]:
        """The writer features in force, legacy protocol versions spelled out as their features."""
        if self.min_writer_version >= 7:
            return self.writer_features | self.reader_features
        implied = {f for version, names in _LEGACY_WRITER.items() if self.min_writer_version >= version
                   for f in names}
        return frozenset(implied)

    def refusal(self) -> str | None:
        """Why lakesink must not write this table (one line), or None."""
        if self.min_reader_version > MAX_READER_VERSION or self.min_writer_version > MAX_WRITER_VERSION:
            return (f"protocol version reader {self.min_reader_version} / writer {self.min_writer_version} is above "
                    f"what this lakesink's Delta ({MAX_READER_VERSION}/{MAX_WRITER_VERSION}) can write")
        for name in sorted(self.features):
            if name.lower() not in DELTA_SPARK_FEATURES:
                return f"table feature '{name}' is unknown to this lakesink's Delta (delta-spark 4.4)"
            reason = REFUSED_FEATURES.get(name.lower())
            if reason:
                return f"table feature '{name}' is not supported: {reason}"
        if self.defaults:
            return (f"column default value(s) on {', '.join(self.defaults)} are not supported: a missing field "
                    f"and a null cannot be told apart after conversion")
        return None

    def slow_path_reasons(self) -> list[str]:
        """Why the fast path cannot write this table (empty: it can)."""
        reasons = [f"table feature '{name}'" for name in sorted(self.features)
                   if name.lower() not in FAST_PATH_FEATURES]
        if self.column_mapping != "none":
            reasons.append(f"column mapping mode '{self.column_mapping}'")
        computed = {t.column for t in layout.recognised(self.generated)}  # the participants write these
        generated = [c for c in self.generated if c not in computed]
        if generated:
            reasons.append(f"generated column(s) {', '.join(generated)}")
        if self.identity:
            reasons.append(f"identity column(s) {', '.join(self.identity)}")
        rules = [c for c in self.constraints if not c.name.startswith("generated column")]
        if rules:
            reasons.append(f"constraint(s) {', '.join(sorted({c.name for c in rules}))}")
        return reasons

    @property
    def fast_path(self) -> bool:
        return not self.slow_path_reasons()

    def check_supported(self, table: str) -> None:
        reason = self.refusal()
        if reason:
            raise UnsupportedTableError(f"lakesink cannot write {table}: {reason}")


def profile(reader_version: int, writer_version: int, reader_features, writer_features, schema: dict,
            configuration: dict[str, str], partition_columns) -> TableProfile:
    """The profile of a table from its protocol, its schema (Delta's JSON form), its configuration."""
    generated: dict[str, str] = {}
    identity: dict[str, bool] = {}
    defaults: list[str] = []
    constraints: list[Constraint] = []
    for top in schema.get("fields", []):
        meta = top.get("metadata") or {}
        name = top["name"]
        if GENERATION in meta:
            generated[name] = meta[GENERATION]
            constraints.append(Constraint(f"generated column {name}", f"{name} = {meta[GENERATION]}",
                                          f"{_quote(name)} <=> ({meta[GENERATION]})"))
        if IDENTITY_START in meta:
            identity[name] = bool(meta.get(IDENTITY_EXPLICIT, False))
            if not identity[name]:
                constraints.append(Constraint(f"identity column {name}", f"{name} GENERATED ALWAYS AS IDENTITY",
                                              f"{_quote(name)} IS NULL"))
        if DEFAULT in meta:
            defaults.append(name)
    for path, parents_nullable, meta, nullable in _fields(schema):
        if not nullable and path[-1] not in identity:
            dotted = ".".join(path)
            guard = " OR ".join(f"{_dotted(parents)} IS NULL" for parents in parents_nullable)
            test = f"{_dotted(path)} IS NOT NULL"
            constraints.append(Constraint("NOT NULL", f"{dotted} NOT NULL", f"({guard} OR {test})" if guard else test))
        invariant = meta.get(INVARIANTS)
        if invariant:
            expression = json.loads(invariant)["expression"]["expression"]
            constraints.append(Constraint(f"invariant on {'.'.join(path)}", expression,
                                          f"coalesce(({expression}), false)"))
    for key, expression in sorted(configuration.items()):
        if key.startswith(CONSTRAINT_PREFIX):
            constraints.append(Constraint(key[len(CONSTRAINT_PREFIX):], expression, f"coalesce(({expression}), false)"))
    return TableProfile(
        int(reader_version), int(writer_version), frozenset(reader_features or ()), frozenset(writer_features or ()),
        configuration.get("delta.columnMapping.mode", "none").lower(), tuple(partition_columns or ()),
        generated, identity, tuple(defaults), tuple(constraints),
        interval_seconds(configuration.get("delta.setTransactionRetentionDuration")),
        configuration.get(TYPE_WIDENING, "false").lower() == "true",
        interval_seconds(configuration.get("delta.deletedFileRetentionDuration")))


_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "millisecond": 0.001}


def interval_seconds(text: str | None) -> float | None:
    """Seconds of a Delta interval property (`interval 7 days`, `interval 1 day 12 hours`); None when unset or not
    an interval lakesink can read (then it is treated as unset: no refresh commits)."""
    if not text:
        return None
    parts = re.findall(r"(\d+)\s*([a-z]+?)s?\b", text.lower().removeprefix("interval"))
    if not parts or any(unit not in _UNIT_S for _, unit in parts):
        return None
    return sum(int(n) * _UNIT_S[unit] for n, unit in parts)


def read_profile(delta_table) -> TableProfile:
    """The profile of a loaded `deltalake.DeltaTable`."""
    protocol = delta_table.protocol()
    metadata = delta_table.metadata()
    return profile(protocol.min_reader_version, protocol.min_writer_version, protocol.reader_features,
                   protocol.writer_features, json.loads(delta_table.schema().to_json()),
                   dict(metadata.configuration or {}), metadata.partition_columns)


def _fields(schema: dict, path: tuple[str, ...] = (), nullable_parents: tuple[tuple[str, ...], ...] = ()):
    """(path, nullable ancestors, metadata, nullable) of every field under struct types, depth first."""
    for f in schema.get("fields", []):
        here = (*path, f["name"])
        yield here, nullable_parents, f.get("metadata") or {}, f.get("nullable", True)
        kind = f.get("type")
        if isinstance(kind, dict) and kind.get("type") == "struct":
            parents = (*nullable_parents, here) if f.get("nullable", True) else nullable_parents
            yield from _fields(kind, here, parents)


def _dotted(path: tuple[str, ...]) -> str:
    return quote_path(path)
