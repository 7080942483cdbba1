"""`lakesink demo --cdc`: a PostgreSQL database mirrored into Delta through Debezium, on real parts started for the
demo: a local broker (LocalKafka), a local PostgreSQL (connector/local/postgres.py) with a shop's tables, a Kafka
Connect worker with Debezium's PostgreSQL connector (connector/local/connect.py: JsonConverter with schemas, one
topic per table), and `lakesink run` in upsert mode with `${topic}` routing over `kafka.topic.regex`, deletes and
truncates on (the settings of config/postgres-cdc.properties). A workload of inserts, updates and deletes runs for
`seconds`; once lakesink has committed every change event Debezium wrote, each Delta table is compared with its
database table (connector/app/mirror_check.py) and the demo prints both row counts and "equal", or the first
difference.
"""
from __future__ import annotations

import datetime as dt
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from connector.app import mirror_check
from connector.errors import SetupError

TABLES = {
    "customers": """CREATE TABLE {schema}.customers (
        id bigint PRIMARY KEY, name text NOT NULL, email text, balance numeric(12,2), vip boolean,
        created_at timestamptz)""",
    "products": """CREATE TABLE {schema}.products (
        id integer PRIMARY KEY, name text NOT NULL, price numeric(10,2), weight double precision, rating real,
        tags text[], updated_at timestamptz)""",
    "orders": """CREATE TABLE {schema}.orders (
        id bigint PRIMARY KEY, customer_id bigint, product_id integer, quantity integer, total numeric,
        placed_at timestamptz, status text)""",
}
"""The demo's tables: a numeric of a scale and an unconstrained one, double precision and real, timestamptz, text[]."""

TOPIC_PREFIX = "demo"
"""Debezium's topic.prefix: table `<schema>.<table>` goes to topic `demo.<schema>.<table>`."""

LAKESINK_SETTINGS = {
    "target.table.name": "${topic}",
    "write.mode": "upsert",
    "value.envelope": "debezium",
    "delete.enabled": "true",
    "delete.truncate.enabled": "true",
    "key.converter.schemas.enable": "true",
    "value.converter.schemas.enable": "true",
    "transaction.interval.ms": "2000",
    "topic.refresh.interval.ms": "2000",
    "spark.master": "local[1]",
    "spark.driver.memory": "1g",
}
"""lakesink's settings for Debezium's topics, as config/postgres-cdc.properties holds them (with the demo's shorter
transaction interval and topic refresh, and a small Spark)."""

STATUSES = ("new", "paid", "shipped", "delivered", "returned")
WORDS = ("red", "blue", "large", "small", "organic", "eco", "sale", "gift", "new", "classic")


@dataclass
class Workload:
    """Inserts, updates and deletes on the demo's tables, one short transaction at a time; what it has done."""
    connection: object
    schema: str
    rng: random.Random = field(default_factory=lambda: random.Random(42))
    ids: dict[str, list[int]] = field(default_factory=lambda: {t: [] for t in TABLES})
    next_id: dict[str, int] = field(default_factory=lambda: {t: 1 for t in TABLES})
    done: dict[str, int] = field(default_factory=lambda: {"insert": 0, "update": 0, "delete": 0})

    def _now(self) -> dt.datetime:
        # now and then an instant after 2262, beyond what 64-bit nanoseconds since 1970 hold
        r = self.rng
        if r.random() < 0.05:
            return dt.datetime(2300 + r.randrange(7000), 1 + r.randrange(12), 1 + r.randrange(28), r.randrange(24),
                               r.randrange(60), r.randrange(60), r.randrange(1_000_000), tzinfo=dt.timezone.utc)
        return dt.datetime.now(dt.timezone.utc).replace(microsecond=r.randrange(1_000_000))

    def _row(self, table: str, id_: int) -> tuple:
        r = self.rng
        if table == "customers":
            return (id_, f"customer {id_}", f"c{id_}@example.com" if r.random() < 0.9 else None,
                    Decimal(r.randrange(-10_000_00, 1_000_000_00)) / 100, r.random() < 0.2, self._now())
        if table == "products":
            tags = [r.choice(WORDS) for _ in range(r.randrange(4))] if r.random() < 0.9 else None
            return (id_, f"product {id_}", Decimal(r.randrange(1, 100_000_00)) / 100, r.uniform(0.01, 80.0),
                    round(r.uniform(0, 5), 3), tags, self._now())
        customer = r.choice(self.ids["customers"]) if self.ids["customers"] else None
        product = r.choice(self.ids["products"]) if self.ids["products"] else None
        quantity = r.randrange(1, 20)
        return (id_, customer, product, quantity, Decimal(r.randrange(1, 10**9)) / Decimal(10) ** r.randrange(0, 9),
                self._now(), r.choice(STATUSES))

    def insert(self, table: str, n: int = 1) -> None:
        rows = []
        for _ in range(n):
            rows.append(self._row(table, self.next_id[table]))
            self.ids[table].append(self.next_id[table])
            self.next_id[table] += 1
        marks = ", ".join(["%s"] * len(rows[0]))
        with self.connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {self.schema}.{table} VALUES ({marks})", rows)
        self.done["insert"] += n

    def update(self, table: str) -> None:
        if not self.ids[table]:
            return self.insert(table)
        id_ = self.rng.choice(self.ids[table])
        r = self.rng
        statement, values = {
            "customers": ("UPDATE {t} SET balance = balance + %s, vip = NOT vip, email = %s WHERE id = %s",
                          (Decimal(r.randrange(-100_00, 100_00)) / 100, f"new{id_}@example.com", id_)),
            "products": ("UPDATE {t} SET price = %s, weight = weight * 1.5, rating = %s, "
                         "tags = array_append(tags, %s), updated_at = %s WHERE id = %s",
                         (Decimal(r.randrange(1, 100_000_00)) / 100, r.uniform(0, 5), r.choice(WORDS), self._now(),
                          id_)),
            "orders": ("UPDATE {t} SET status = %s, quantity = quantity + 1, total = round(total * 1.1, 4) WHERE id = %s",
                       (r.choice(STATUSES), id_)),
        }[table]
        with self.connection.cursor() as cursor:
            cursor.execute(statement.replace("{t}", f"{self.schema}.{table}"), values)
        self.done["update"] += 1

    def delete(self, table: str) -> None:
        if len(self.ids[table]) < 5:
            return self.insert(table)
        id_ = self.ids[table].pop(self.rng.randrange(len(self.ids[table])))
        with self.connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.schema}.{table} WHERE id = %s", (id_,))
        self.done["delete"] += 1

    def step(self) -> None:
        """One transaction of one to four changes."""
        with self.connection.transaction():
            for _ in range(self.rng.randrange(1, 5)):
                table = self.rng.choice(list(TABLES))
                kind = self.rng.random()
                if kind < 0.45:
                    self.insert(table)
                elif kind < 0.85:
                    self.update(table)
                else:
                    self.delete(table)

    def describe(self) -> str:
        return ", ".join(f"{n} {kind}s" for kind, n in self.done.items())


def preflight(postgres_server: bool = True) -> None:
    """Raise a one-line SetupError before anything starts when a part the demo needs is missing: Java (the broker,
    Connect and Spark), psycopg, PostgreSQL's server programs (`postgres_server`)."""
    from connector.jvm import jars
    from connector.local.postgres import bin_dir

    jars.require_java()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise SetupError("the demo reads PostgreSQL with psycopg, which is not installed: "
                         "pip install 'psycopg[binary]' (make setup installs it)") from None
    if postgres_server:
        bin_dir()


def run_cdc_demo(seconds: float = 60.0, verbose: bool = False) -> int:
    """The CLI's `demo --cdc`; unless `verbose`, what Spark and the Kafka clients of this process write goes to a
    file under the demo folder (the servers and lakesink write files of their own)."""
    from connector.app.demo import _third_party_output_to, demo_dir

    preflight()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with _third_party_output_to(None if verbose else demo_dir() / f"demo-cdc-{stamp}.log"):
        comparisons = cdc_demo(seconds, demo_dir() / f"cdc-{stamp}")
    return 0 if comparisons and all(c.equal for c in comparisons) else 1


def _say(text: str) -> None:
    print(text, flush=True)


def cdc_demo(seconds: float, work_dir: Path, bootstrap: str | None = None, postgres=None, schema: str = "shop",
             progress_s: float = 5.0, settle_timeout_s: float = 180.0) -> list[mirror_check.Comparison]:
    """The demo in `work_dir`: a broker and a PostgreSQL of its own unless given (`bootstrap`, a LocalPostgres
    `postgres`, which it leaves running, its slot and publication dropped); its tables in `schema`. Returns each
    table's comparison (printed too)."""
    import psycopg

    from connector.local.kafka import LocalKafka
    from connector.local.connect import LocalConnect, debezium_settings
    from connector.local.postgres import LocalPostgres

    if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
        raise SetupError(f"the demo's schema name must be a plain lower-case identifier, not {schema!r}")
    preflight(postgres_server=postgres is None)
    work_dir.mkdir(parents=True, exist_ok=True)
    broker = own_postgres = connect = lakesink = connection = None
    try:
        if bootstrap is None:
            _say("starting a local Kafka broker (KRaft) ...")
            broker = LocalKafka(work_dir / "kafka")
            broker.start()
            bootstrap = broker.bootstrap
        if postgres is None:
            _say("starting a local PostgreSQL (Debian's server programs, wal_level=logical) ...")
            postgres = own_postgres = LocalPostgres().start()
        _say(f"PostgreSQL up on {postgres.dsn}; broker on {bootstrap}")
        connection = psycopg.connect(postgres.dsn, autocommit=True)
        workload = Workload(connection, schema)
        connection.execute(f"CREATE SCHEMA {schema}")
        for table, ddl in TABLES.items():
            connection.execute(ddl.format(schema=schema))
        with connection.transaction():  # rows for Debezium's snapshot
            for table, n in (("customers", 50), ("products", 20), ("orders", 100)):
                workload.insert(table, n)
        _say(f"tables {', '.join(f'{schema}.{t}' for t in TABLES)} created, "
             f"{sum(workload.done.values())} rows inserted")

        name = f"demo_{schema}"
        prefix = f"{TOPIC_PREFIX}-{schema}".replace("_", "-") if broker is None else TOPIC_PREFIX
        connector = debezium_settings(postgres, name, prefix, [f"{schema}.{t}" for t in TABLES])
        _say("starting a Kafka Connect worker with Debezium's PostgreSQL connector (snapshot, then streaming) ...")
        connect = LocalConnect(work_dir / "connect", bootstrap, postgres, connector, schemas_enable=True)
        connect.start()
        topics = {t: f"{prefix}.{schema}.{t}" for t in TABLES}
        _say(f"Debezium streams {len(TABLES)} tables into topics {prefix}.{schema}.* (its log: {connect.log_file})")

        config = _write_config(work_dir, bootstrap, prefix, schema, name)
        log_path = work_dir / "lakesink.log"
        _say(f"starting `lakesink run --config {config}` (its log: {log_path}) ...")
        with open(log_path, "ab") as log:
            lakesink = subprocess.Popen([sys.executable, "-m", "connector", "run", "--config", str(config)],
                                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)

        _say(f"running a workload of inserts, updates and deletes for {seconds:g} s ...")
        started = time.monotonic()
        report_at = started + progress_s
        while time.monotonic() - started < seconds:
            workload.step()
            _check_alive(lakesink, log_path)
            if time.monotonic() >= report_at:
                report_at += progress_s
                _say(f"  {time.monotonic() - started:4.0f} s: {workload.describe()}")
            time.sleep(0.02)
        _say(f"workload done: {workload.describe()}")

        paths = _wait_committed(config, topics, lakesink, log_path, settle_timeout_s)
        _say("")
        comparisons = [mirror_check.compare(connection, schema, t, paths[t]) for t in TABLES]
        for comparison in comparisons:
            _say(f"  {schema}.{comparison.summary()}")
        everything = all(c.equal for c in comparisons)
        _say("every Delta table equals its database table" if everything else
             "MISMATCH: a Delta table differs from its database table (see above)")
        return comparisons
    finally:
        if connection is not None:
            connection.close()
        if lakesink is not None:
            from connector.local.processes import stop_child

            stop_child(lakesink, 60)
        if connect is not None:
            connect.stop()
            if own_postgres is None and postgres is not None:  # the caller's server: leave no slot behind
                postgres.wait_slot_inactive(connect.slot)
                postgres.sql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             f"WHERE slot_name = '{connect.slot}'")
                postgres.sql(f'DROP PUBLICATION IF EXISTS "{connect.slot}"')
        if own_postgres is not None:
            own_postgres.stop()
        if broker is not None:
            broker.stop()


def _write_config(work_dir: Path, bootstrap: str, prefix: str, schema: str, name: str) -> Path:
    import javaproperties

    settings = {"name": name, "kafka.bootstrap.servers": bootstrap,
                "kafka.topic.regex": re.escape(f"{prefix}.{schema}.") + ".*",
                "target.base.path": str(work_dir / "tables"), **LAKESINK_SETTINGS}
    path = work_dir / "lakesink.properties"
    path.write_text(javaproperties.dumps(settings, timestamp=False))
    return path


def _check_alive(lakesink: subprocess.Popen, log_path: Path) -> None:
    if lakesink.poll() is not None:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        raise SetupError(f"`lakesink run` exited with code {lakesink.returncode}: {' / '.join(tail)} "
                         f"(see {log_path})")


def _wait_committed(config: Path, topics: dict[str, str], lakesink: subprocess.Popen, log_path: Path,
                    timeout_s: float) -> dict[str, str]:
    """Wait until Debezium's topics have stopped growing and each table's commits hold every record of its topic;
    return each database table's Delta table path."""
    from confluent_kafka.admin import AdminClient

    from connector.config import load_config
    from connector.kafka.clients import KafkaClients
    from connector.kafka.watermarks import list_offsets
    from connector.routing import plan, table_of_topic
    from connector.storage.store import Store
    from connector.table.recovery import Recovery

    cfg = load_config(str(config))
    admin = AdminClient(KafkaClients.of(cfg).config("admin"))
    by_table = {p.table: p for p in plan(cfg, list(topics.values()))}
    plans = {topic: by_table[table_of_topic(cfg.target_table_name, topic)] for topic in topics.values()}
    paths = {t: plans[topic].cfg.table_path for t, topic in topics.items()}
    metadata = admin.list_topics(timeout=30).topics
    partitions = [(topic, p) for topic in topics.values() for p in (metadata[topic].partitions if topic in metadata
                                                                      else [0])]
    _say("waiting until lakesink has committed every change event Debezium wrote ...")
    deadline, stable_since, last_ends, last_said = time.monotonic() + timeout_s, time.monotonic(), None, 0.0
    while True:
        _check_alive(lakesink, log_path)
        ends = list_offsets(admin, partitions)
        if ends != last_ends:
            last_ends, stable_since = ends, time.monotonic()
        committed: dict = {}
        for topic in topics.values():
            table_cfg = plans[topic].cfg
            committed.update(Recovery.of(Store.for_config(table_cfg), table_cfg.table_path,
                                         table_cfg.name).recover().offsets)
        behind = sum(max(0, end - (committed.get(tp) or 0)) for tp, end in ends.items())
        if len(ends) == len(partitions) and behind == 0 and time.monotonic() - stable_since >= 3:
            _say(f"lakesink has committed all {sum(ends.values())} change events of {len(topics)} topics")
            return paths
        if time.monotonic() > deadline:
            raise SetupError(f"lakesink had not committed {behind} change events after {timeout_s:g} s "
                             f"(see {log_path})")
        if time.monotonic() - last_said >= 5:
            last_said = time.monotonic()
            _say(f"  {behind} change events of {sum(ends.values())} not committed yet")
        time.sleep(0.5)
