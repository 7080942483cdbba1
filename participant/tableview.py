"""The table as a worker's converters see it: its data schema, key type, type widening and column mapping, read
again after each commit that changed the table (`refresh`), or before the table exists the schema a START carries
(`set_table_schema`); the columns its data files are split by (`split_by`); one converter per partition, each shown
the table (what a partition's records infer never depends on which partitions share the worker), and the schema
registry readers they share, so each writer schema is fetched and compiled once per worker."""
from __future__ import annotations

from connector.config import LakesinkConfig
from connector.formats import registry_format
from connector.formats.registry import RegistryReader
from connector.schema import layout
from connector.schema.columns import KEY, META_COLUMNS
from connector.table.features import read_profile
from connector.table.snapshot import TableSnapshot
from connector.upsert import UpsertSpec
from participant.convert import Converter


class TableView:
    def __init__(self, cfg: LakesinkConfig, table: TableSnapshot) -> None:
        self.cfg = cfg
        self._table = table
        # how data files are split: the table's partition columns when Delta's log takes its files as they are,
        # None when its commits go through Spark (which rewrites them); before the table exists, the configured
        self.split_by: tuple[str, ...] | None = layout.partition_columns(cfg.partition_field_name)
        # the generated columns the participants compute (time transforms): the table's own once it exists
        self.generated: tuple[layout.Transform, ...] = layout.transforms(cfg.partition_field_name)
        self.schema_version: int | None = -1
        """The table version the view was read at; -1: no table yet."""
        # one converter per partition: what a partition's records infer never depends on which partitions share
        # this worker; each holds the table's view (data schema, key type, type widening) set on all of them
        self.converters: dict[tuple[str, int], Converter] = {}
        self._table_view: tuple = (None, None, False, None)
        # the schema registry's readers (value.converter / key.converter = avro, protobuf, json_schema): shared by
        # the partitions, so each writer schema is fetched and compiled once per worker
        self._registries: dict[str, RegistryReader | None] = {}

    def converter(self, key: tuple[str, int]) -> Converter:
        converter = self.converters.get(key)
        if converter is None:
            cfg = self.cfg
            converter = Converter(cfg.value_converter, cfg.connect_meta_data, cfg.max_record_bytes,
                                  cfg.schema_evolution, UpsertSpec.from_config(cfg), cfg.value_converter_schemas_enable,
                                  cfg.key_converter_schemas_enable, self.registry("value"), self.registry("key"),
                                  cfg.connect_meta_headers, cfg.connect_meta_header_columns)
            self._show_table(converter)
            self.converters[key] = converter
        return converter

    def forget(self, key: tuple[str, int]) -> None:
        """The partition left this worker: its converter goes."""
        self.converters.pop(key, None)

    def registry(self, part: str) -> RegistryReader | None:
        """The reader of the value's (or key's) registry format; None when that converter reads none."""
        if part not in self._registries:
            settings = self.cfg.registry_settings(part)
            self._registries[part] = None if settings is None else \
                RegistryReader(registry_format(getattr(self.cfg, f"{part}_converter")), settings, is_key=part == "key")
        return self._registries[part]

    def _show_table(self, converter: Converter) -> None:
        schema, key, widening, maps_names = self._table_view
        converter.set_schema(schema)
        converter.set_key_type(key)
        converter.set_type_widening(widening)
        converter.set_name_policy(self.cfg.field_name_policy, maps_names)
        converter.set_generated(self.generated)

    def refresh(self, table_version: int | None = None) -> None:
        """Read the table's view again, unless it is at `table_version` already or the versions since the one it
        was read at changed only data (TableSnapshot.changes_layout: a read of each new log entry, where loading
        the snapshot again lists the log and reads its checkpoint pointer and checksums)."""
        if table_version is not None and table_version == self.schema_version:
            return
        if (table_version is not None and self.schema_version is not None and 0 <= self.schema_version < table_version
                and not self._table.changes_layout(self.schema_version, table_version)):
            self.schema_version = table_version
            return
        dt = self._table.delta()
        if dt is None:
            return
        profile = read_profile(dt)
        self.split_by = profile.partition_columns if profile.fast_path else None
        self.generated = layout.recognised(profile.generated)
        self.set_table_schema(self._table.arrow_schema(dt))
        schema, key, _, _ = self._table_view
        self._table_view = (schema, key, profile.type_widening and self.cfg.schema_evolution,
                            profile.column_mapping != "none")
        for converter in self.converters.values():
            converter.set_type_widening(self._table_view[2])
            converter.set_name_policy(self.cfg.field_name_policy, self._table_view[3])
            converter.set_generated(self.generated)
        self.schema_version = dt.version() if table_version is None else table_version

    def set_table_schema(self, schema) -> None:
        import pyarrow as pa

        data = None if schema is None else pa.schema([f for f in schema if f.name not in META_COLUMNS])
        key = None if schema is None or schema.get_field_index(KEY) < 0 else schema.field(KEY).type
        self._table_view = (data, key, *self._table_view[2:])
        for converter in self.converters.values():
            converter.set_schema(data)
            converter.set_key_type(key)
