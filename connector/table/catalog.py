"""The table in a Hive metastore (catalog.type=hive; docs/ARCHITECTURE.md, "The catalog").

A catalog table is an external Delta table: the metastore holds its name, its location and its provider, and every
reader takes the schema, its evolution and the table's properties from the Delta log at that location, so a
commit never has to tell the catalog of a new column. Two jobs, on two sides:

- `location()` and `check_writable()` ask the metastore over its Thrift API (JVM-free: the workers, `validate` and the
  coordinator alike find the location of an existing catalog table before they touch storage);
- `register(spark, location)` makes the database when absent (over Thrift, so that the metastore places it in its own
  warehouse) and the catalog table with the coordinator's Spark session (Hive support on),
  `CREATE TABLE IF NOT EXISTS ... USING delta LOCATION`, once the table exists on storage: what Spark itself writes
  into the metastore is what other Spark sessions read back.

A metastore that does not answer raises `CatalogUnavailableError`; the commit path turns it into a transient
CommitError, retried as any other (connector/table/sink.py).
"""
from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from connector.errors import LakesinkError
from connector.storage.store import Location

if TYPE_CHECKING:
    from connector.config import LakesinkConfig

log = logging.getLogger(__name__)

CLIENT_TIMEOUT_S = 60
"""The Thrift socket timeout of lakesink's metastore calls and of the Spark session's Hive client
(`hive.metastore.client.socket.timeout`, whose default of 600 s would hold a commit that long on a metastore that
accepts connections and does not answer)."""


class CatalogUnavailableError(LakesinkError):
    """No metastore of catalog.hive.metastore.uris answered: worth a retry."""


class CatalogConflictError(LakesinkError):
    """The catalog holds something else under the table's name (a view, a table of another format)."""


def spark_settings(cfg: "LakesinkConfig") -> dict[str, str]:
    """The Spark session's settings for catalog.type=hive (none otherwise): Spark's Hive support on the metastore.
    A `spark.*` key of the configuration overrides each."""
    if cfg.catalog_type != "hive":
        return {}
    return {"spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": ",".join(cfg.catalog_hive_metastore_uris),
            "spark.hadoop.hive.metastore.client.socket.timeout": f"{CLIENT_TIMEOUT_S}s",
            "spark.hadoop.hive.metastore.connect.retries": "1"}


@dataclass(frozen=True)
class CatalogTable:
    """The catalog entry `database`.`name` of a table, on the metastores `uris` (tried in order)."""

    uris: tuple[str, ...]
    database: str
    name: str
    timeout_s: float = CLIENT_TIMEOUT_S

    @classmethod
    def of(cls, cfg: "LakesinkConfig") -> "CatalogTable | None":
        """The catalog table of one table's configuration; None with catalog.type=none."""
        if cfg.catalog_type != "hive":
            return None
        return cls(tuple(cfg.catalog_hive_metastore_uris), cfg.catalog_database, cfg.target_table_name.lower())

    def __str__(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def sql_name(self) -> str:
        return f"`{self.database}`.`{self.name}`"

    # --- over Thrift -----------------------------------------------------------------------------------------

    def location(self) -> str | None:
        """The location of the catalog table (as lakesink names locations: a local path or s3://), None when the
        catalog has no table of that name. Raises CatalogUnavailableError, or CatalogConflictError for an entry
        that is not a Delta table."""
        from pymetastore.hive_metastore.ttypes import NoSuchObjectException

        def read(client):
            try:
                return client.get_table(self.database, self.name)
            except NoSuchObjectException:
                return None

        table = self._call(read)
        if table is None:
            return None
        found = table_location(table.parameters or {}, _serde_parameters(table), table.sd.location if table.sd else None,
                               table.tableType)
        if found is None:
            raise CatalogConflictError(f"the catalog table {self} is not a Delta table (type {table.tableType}, "
                                       f"provider {(table.parameters or {}).get('spark.sql.sources.provider')}): "
                                       f"drop it or set catalog.database / target.table.name to another name")
        return found

    def check_writable(self) -> str:
        """That the metastore answers and the table's database takes a new table: a probe table made and dropped
        in it, or, when the database does not exist yet, a probe database (the first commit creates it). One line
        of what was found; raises CatalogUnavailableError, or CatalogConflictError with the metastore's refusal."""
        import uuid

        from pymetastore.hive_metastore import ttypes

        probe = f"lakesink_probe_{uuid.uuid4().hex[:12]}"

        def probe_write(client):
            try:
                client.get_database(self.database)
            except ttypes.NoSuchObjectException:
                client.create_database(ttypes.Database(name=probe, description="lakesink validate probe",
                                                       parameters={}))
                client.drop_database(probe, True, True)  # with its directory
                return f"database {self.database} does not exist yet (the first commit creates it); databases " \
                       f"can be created"
            table = ttypes.Table(tableName=probe, dbName=self.database, tableType="MANAGED_TABLE", parameters={},
                                 partitionKeys=[],
                                 sd=ttypes.StorageDescriptor(cols=[], serdeInfo=ttypes.SerDeInfo(parameters={}),
                                                             parameters={}))
            client.create_table(table)
            client.drop_table(self.database, probe, True)  # with its directory in the database's location
            return f"database {self.database} is writable"

        try:
            return self._call(probe_write)
        except (ttypes.MetaException, ttypes.InvalidObjectException, ttypes.AlreadyExistsException) as exc:
            raise CatalogConflictError(f"the metastore refused a table in database {self.database}: "
                                       f"{getattr(exc, 'message', exc)}") from None

    def ensure_database(self) -> None:
        """The database, created when absent by the metastore itself, in its own warehouse: Spark's CREATE DATABASE
        would record the coordinator session's spark.sql.warehouse.dir, a directory of the coordinator's machine, as
        the location of every managed table another engine makes in it."""
        from pymetastore.hive_metastore import ttypes

        def ensure(client):
            try:
                client.get_database(self.database)
                return
            except ttypes.NoSuchObjectException:
                pass
            try:
                client.create_database(ttypes.Database(name=self.database, description="created by lakesink",
                                                       parameters={}))
            except ttypes.AlreadyExistsException:  # another coordinator's, made meanwhile
                pass

        self._call(ensure)

    def _call(self, work):
        """`work(client)` on the first metastore of `uris` that accepts a connection."""
        from pymetastore.hive_metastore import ThriftHiveMetastore
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport
        from thrift.transport.TTransport import TTransportException

        failures = []
        for uri in self.uris:
            parsed = urllib.parse.urlparse(uri)
            sock = TSocket.TSocket(parsed.hostname, parsed.port)
            sock.setTimeout(self.timeout_s * 1000)
            transport = TTransport.TBufferedTransport(sock)
            try:
                transport.open()
            except TTransportException as exc:
                failures.append(f"{uri}: {exc}")
                continue
            try:
                return work(ThriftHiveMetastore.Client(TBinaryProtocol.TBinaryProtocol(transport)))
            except (TTransportException, OSError, EOFError) as exc:
                failures.append(f"{uri}: {exc}")
            finally:
                transport.close()
        raise CatalogUnavailableError(f"no Hive metastore answered ({'; '.join(failures)}): start it, or check "
                                      f"catalog.hive.metastore.uris")

    # --- with the coordinator's Spark session ----------------------------------------------------------------

    def register(self, spark, location: str) -> None:
        """Create the database when absent and the catalog table at `location` when absent (both idempotent); then
        check that the catalog's table is the one at `location` (another writer may have made one elsewhere)."""
        where = Location.parse(location)
        if spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "hive":
            raise CatalogConflictError("catalog.type=hive needs the coordinator's Spark session built with Hive "
                                       "support (spark.sql.catalogImplementation=hive)")
        self.ensure_database()
        spark.sql(f"CREATE TABLE IF NOT EXISTS {self.sql_name} USING delta LOCATION '{_quoted(where.spark_path)}'")
        found = self.location()
        if found is None or Location.parse(found) != where:
            raise CatalogConflictError(f"the catalog table {self} is at {found}, not at {where.delta_uri}: drop it or "
                                       f"restart the connector (an existing catalog table's location wins)")
        log.info("catalog table %s is the Delta table at %s", self, where.delta_uri)


def located(cfg: "LakesinkConfig") -> "LakesinkConfig":
    """`cfg` with the table where its catalog table is, when the catalog has one of its name at another location
    (an existing catalog table is honoured as an existing path is); `cfg` itself with catalog.type=none or no
    such catalog table. Raises CatalogUnavailableError or CatalogConflictError."""
    table = CatalogTable.of(cfg)
    if table is None:
        return cfg
    found = table.location()
    if found is None or Location.parse(found) == Location.parse(cfg.table_path):
        return cfg
    log.info("catalog table %s is at %s: that is the table (not %s)", table, found, cfg.table_path)
    return cfg.at_location(found)


def table_location(parameters: dict[str, str], serde: dict[str, str], sd_location: str | None,
                   table_type: str | None) -> str | None:
    """Where the Delta table of a catalog entry lives, as lakesink names locations; None for an entry that is no
    Delta table. Spark keeps a data source table's path in its storage parameters (`path`) and a placeholder as the
    Hive location; other engines (Trino's Delta connector) set the location itself."""
    if table_type == "VIRTUAL_VIEW":
        return None
    provider = parameters.get("spark.sql.sources.provider")
    if provider is None or provider.lower() != "delta":
        return None
    path = serde.get("path") or sd_location
    if not path:
        return None
    return Location.parse(path).delta_uri


def _serde_parameters(table) -> dict[str, str]:
    sd = table.sd
    return dict(sd.serdeInfo.parameters or {}) if sd is not None and sd.serdeInfo is not None else {}


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
