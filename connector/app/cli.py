"""`lakesink` command line: exit 0 clean, 1 failure, 2 usage or invalid configuration."""
from __future__ import annotations

import argparse
import difflib
import logging
import sys
import traceback

from connector.errors import ConfigError, LakesinkError, SetupError
from connector.secrets import protect, scrub


def _say(text: str = "", file=None) -> None:
    """print, without any secret value of the configuration: the commands print exception text of client
    libraries (Kafka, S3, Delta), which may echo a setting."""
    print(scrub(text), file=file)


def _cmd_deps(args) -> int:
    from connector.jvm import class_archive, jars
    from connector.local import registry as local_registry

    for bundle in (jars.kafka_jars, jars.delta_jars, jars.s3_jars, jars.connect_jars, jars.metastore_jars):
        found = bundle()
        print(f"{bundle.__name__}: {len(found)} jars in {found[0].parent if found else '-'}")
    print(f"logstore_jar: {jars.logstore_jar()}")
    registry, how = local_registry.build_server()
    if registry is None:
        print(f"local schema registry: not built ({how})")
    else:
        print(f"local schema registry: {registry} ({how}, {registry.stat().st_size // 2**20} MB)")
    archive, how = class_archive.build()
    if archive is None:
        print(f"class archive of the Spark driver: not built ({how}); coordinators start without it, slower")
    else:
        print(f"class archive of the Spark driver: {archive} ({how}, {archive.stat().st_size // 2**20} MB)")
    return 0


def _cmd_kafka(args) -> int:
    from connector.local.kafka import DETACHED

    return _cmd_server(args, DETACHED, "Kafka broker", lambda st: f"bootstrap.servers={st.bootstrap}",
                       lambda st: st.bootstrap)


def _cmd_s3(args) -> int:
    from connector.local.s3 import DETACHED

    return _cmd_server(args, DETACHED, "S3 server", lambda st: f"s3.endpoint={st.endpoint} bucket={st.bucket}",
                       lambda st: st.endpoint, lambda st: f" aws.access.key.id={st.access_key}")


def _cmd_registry(args) -> int:
    from connector.local.registry import DETACHED

    return _cmd_server(args, DETACHED, "schema registry", lambda st: f"schema.registry.url={st.url}",
                       lambda st: st.url)


def _cmd_metastore(args) -> int:
    from connector.local.metastore import DETACHED

    return _cmd_server(args, DETACHED, "Hive metastore", lambda st: f"catalog.hive.metastore.uris={st.uri}",
                       lambda st: st.uri)


def _cmd_server(args, server, noun: str, where, address, extra=lambda st: "") -> int:
    """`lakesink kafka|s3 start|stop|status`: the detached server `server`
    (connector.local.processes.DetachedServer)."""
    if args.action == "start":
        st = server.start(args.port, args.timeout)
        print(f"{noun} running: {where(st)}{extra(st)} (pid {st.pid}, data in {st.data_dir})")
    elif args.action == "stop":
        st = server.stop()
        print(f"{noun} on {address(st)} stopped." if st else f"No {noun} started by lakesink is running.")
    else:
        st = server.running()
        print(f"running: {where(st)} (pid {st.pid})" if st else "not running")
        return 0 if st else 1
    return 0


def _cmd_demo(args) -> int:
    from connector.app import demo

    if args.cdc:
        from connector.app.cdc_demo import run_cdc_demo

        return run_cdc_demo(seconds=args.seconds, verbose=args.verbose)
    return demo.run_demo(records=args.records, partitions=args.partitions, keep_broker=args.keep_broker,
                         verbose=args.verbose, s3=args.s3, fmt=args.format)


def _load(args):
    """The configuration of `--config`, its secrets scrubbed from every output of this process from now on."""
    from connector.config import load_config

    cfg = load_config(args.config)
    protect(cfg)
    return cfg


def _cmd_run(args) -> int:
    import faulthandler
    import signal

    from connector.observe.logs import setup_for
    from connector.app.service import run_roles

    cfg = _load(args)
    if getattr(args, "task", None):  # a worker task that `lakesink run` started (tasks.max > 1)
        from connector.app.tasks import follow_parent

        follow_parent(args.parent)
        cfg = cfg.for_task(args.task)
    setup_for(cfg, verbose=args.verbose)
    faulthandler.enable()  # a crash in a native library prints every thread's Python stack to stderr
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: the same stacks; it runs on
    return run_roles(cfg, coordinator=args.command in ("run", "coordinator"), worker=args.command in ("run", "worker"),
                     timeout_s=args.max_seconds, config_path=args.config, verbose=args.verbose)


def _cmd_status(args) -> int:
    from connector.app.status import print_status

    return print_status(_load(args), as_json=args.json)


def _cmd_verify(args) -> int:
    from connector.app import verify

    return verify.main(_load(args), as_json=args.json, use_kafka=not args.no_kafka)


def _cmd_validate(args) -> int:
    from connector.config import validate_file
    from connector.storage.store import Location, S3Settings, Store

    problems = validate_file(args.config)
    cfg = _load(args) if not problems else None
    if cfg is not None:
        problems = _unwritten_tables(cfg)
    if problems:
        _say(f"{args.config}: {len(problems)} problem(s)")
        for p in problems:
            _say(f"  - {p}")
        return 2
    _say(f"{args.config}: valid")
    for warning in cfg.warnings():
        _say(f"  warning: {warning}")
    where = cfg.target_base_path if cfg.many_tables else cfg.table_path  # the tables of many share the base path
    try:
        store = Store(Location.parse(where), S3Settings.from_config(cfg))
    except SetupError as exc:
        _say(f"table {where}: {exc}")
        return 2
    if store.root.is_s3 and _validate_storage(store, cfg.name):
        return 2
    if _validate_dead_letter_table(cfg):
        return 2
    if _validate_kafka(cfg):
        return 2
    if _validate_registry(cfg):
        return 2
    if _validate_catalog(cfg):
        return 2
    if cfg.many_tables:
        return _validate_tables(cfg)
    return _validate_table(cfg, store)


def _unwritten_tables(cfg) -> list[str]:
    """A problem per table that `table.<table>.*` keys name but a `kafka.topic.names` connector never writes: a
    misspelt table would leave its keys without effect."""
    from connector.routing import plan

    if not cfg.table_settings or cfg.kafka_topic_regex is not None:
        return []
    written = [p.table for p in plan(cfg)]
    problems = []
    for table, own in sorted(cfg.table_settings.items()):
        if table in written:
            continue
        keys = ", ".join(f"table.{table}.{attr.replace('_', '.')}" for attr in own)
        close = difflib.get_close_matches(table, written, n=1)
        problems.append(f"{keys}: the connector writes no table {table!r} (its tables: {', '.join(written)})"
                        + (f"; did you mean {close[0]!r}?" if close else ""))
    return problems


def _validate_tables(cfg) -> int:
    """The tables of a connector that writes several, each with its topics and checked as `_validate_table` checks
    one. With `kafka.topic.regex` they come from the topics that exist: checked when Kafka lists them."""
    from connector.app.plans import existing_topics
    from connector.routing import plan
    from connector.storage.store import Store

    topics: list[str] = []
    if cfg.kafka_topic_regex is not None:
        _say(f"tables: from the topics matching kafka.topic.regex={cfg.kafka_topic_regex} at run time (a topic "
             f"created later may add one)")
        try:
            topics = existing_topics(cfg, VALIDATE_KAFKA_TIMEOUT_S)
        except SetupError:  # nothing to check now; `run` looks for them when it starts
            return 0
        plans = plan(cfg, topics)
        _say(f"  the topics that exist now give {len(plans)} table(s)")
    else:
        plans = plan(cfg)
        _say(f"tables: {len(plans)}")
    for table_plan in plans:
        fed = ", ".join(table_plan.cfg.source_topics(topics)) or "no topic yet"
        routed = f" (routed by {table_plan.route.field!r})" if table_plan.route is not None else ""
        _say(f"  {table_plan.table}: {fed}{routed}")
    codes = []
    for table_plan in plans:
        try:
            store = Store.for_config(table_plan.cfg)
        except SetupError as exc:
            _say(f"table {table_plan.cfg.table_path}: {exc}")
            codes.append(2)
            continue
        codes.append(_validate_table(table_plan.cfg, store))
    return max(codes, default=0)


def _validate_catalog(cfg) -> int:
    """catalog.type=hive: that the metastore answers and that each table's database takes a table, a line each."""
    if cfg.catalog_type != "hive":
        return 0
    from connector.table.catalog import CatalogConflictError, CatalogTable, CatalogUnavailableError

    uris = ",".join(cfg.catalog_hive_metastore_uris)
    databases = {cfg.catalog_database, *(own["catalog_database"] for own in cfg.table_settings.values()
                                         if "catalog_database" in own)}
    failed = 0
    for database in sorted(databases):
        try:
            found = CatalogTable(cfg.catalog_hive_metastore_uris, database, "").check_writable()
        except CatalogUnavailableError as exc:
            _say(f"catalog {uris}: {exc}")
            return 1
        except CatalogConflictError as exc:
            found = str(exc)
            failed += 1
        _say(f"catalog {uris}: {found}")
    return failed


def _validate_registry(cfg) -> int:
    """value.converter / key.converter read through a schema registry: that it answers, one line each."""
    failed = 0
    for part in ("value", "key"):
        settings = cfg.registry_settings(part)
        if settings is None:
            continue
        from connector.formats.registry import check_registry

        problem = check_registry(getattr(cfg, f"{part}_converter"), settings, part)
        _say(f"schema registry of {part}.converter ({settings.get('url')}): {problem or 'answers'}")
        failed += problem is not None
    return failed


def _validate_kafka(cfg) -> int:
    """A secured cluster (security.protocol, or a client's own, is not PLAINTEXT): the login and certificates as
    start-up checks them (connector/kafka/clients.py), one line, passed or the failure. A plaintext one is not
    contacted."""
    from connector.kafka.clients import KafkaClients, check_connection

    kafka = KafkaClients.of(cfg)
    protocols = {str(kafka.config(role).get("security.protocol", "plaintext")).upper()
                 for role in ("admin", "producer")}
    if protocols == {"PLAINTEXT"}:
        return 0
    try:
        brokers = check_connection(kafka, VALIDATE_KAFKA_TIMEOUT_S)
    except SetupError as exc:
        _say(str(exc))
        return 2
    _say(f"kafka {cfg.kafka_bootstrap_servers}: connected over {', '.join(sorted(protocols))} ({brokers} broker(s))")
    return 0


VALIDATE_KAFKA_TIMEOUT_S = 15.0


def _validate_dead_letter_table(cfg) -> int:
    """errors.deadletterqueue.table.name: a table of that name that is not a dead-letter table is refused (exit 2)."""
    if cfg.dead_letter_table_path is None:
        return 0
    from connector.storage.store import Location, S3Settings, Store
    from connector.table.dead_letter_table import DeadLetterTable

    table = DeadLetterTable(Store(Location.parse(cfg.dead_letter_table_path), S3Settings.from_config(cfg)),
                            cfg.errors_deadletterqueue_table_name)
    try:
        dt = table.snapshot()
        refusal = table.refusal(dt)
    except Exception as exc:  # noqa: BLE001 - delta-rs cannot read the table's log
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _say(f"dead-letter table {cfg.dead_letter_table_path}: cannot be read ({why})")
        return 2
    if refusal:
        _say(refusal)
        return 2
    _say(f"dead-letter table {cfg.dead_letter_table_path}: "
         + ("exists" if dt is not None else "does not exist yet; the first record error creates it"))
    return 0


def _validate_storage(store, connector: str) -> int:
    """The start-up checks of an S3 target (connector/storage/checks.py): one line, passed or the failure."""
    from connector.storage.checks import check_store, passed

    try:
        check_store(store, connector)
    except SetupError as exc:
        _say(str(exc))
        return 2
    _say(f"storage {store.root.delta_uri}: {passed(store)}")
    return 0


def _validate_table(cfg, store) -> int:
    """The target table, if it exists: refused (exit 2, one line naming the feature, or what the first commit of this
    configuration would refuse: connector/table/preflight.py), or how it is written."""
    import pyarrow as pa

    from connector.table.features import read_profile
    from connector.table.preflight import config_refusal

    from connector.storage.store import Store
    from connector.table.catalog import CatalogConflictError, CatalogUnavailableError, located

    try:
        found = located(cfg)  # an existing catalog table's location is the table
    except (CatalogUnavailableError, CatalogConflictError) as exc:
        _say(f"table {cfg.table_path}: its catalog entry: {exc}")
        return 2
    if found.table_path != cfg.table_path:
        _say(f"table {cfg.table_path}: the catalog table {cfg.catalog_database}.{cfg.target_table_name} is at "
             f"{found.table_path}, which lakesink writes")
        cfg, store = found, Store.for_config(found)
    try:
        table = store.delta_table()
        profile = read_profile(table) if table is not None else None
        schema = pa.schema(table.schema().to_arrow()) if table is not None else None
    except Exception as exc:  # noqa: BLE001 - delta-rs cannot read the table's log
        _say(f"table {cfg.table_path}: cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
        return 2
    if profile is None:
        _say(f"table {cfg.table_path}: does not exist yet; the first commit creates it")
        return 0
    refusal = profile.refusal()
    if refusal:
        _say(f"table {cfg.table_path}: lakesink cannot write it: {refusal}")
        return 2
    refusal = config_refusal(cfg, schema, profile.partition_columns, profile.generated, profile.features)
    if refusal:
        _say(f"table {cfg.table_path}: the first commit would fail: {refusal}")
        return 2
    how = "the fast path (files added as written)" if profile.fast_path else \
        f"Delta's writer ({'; '.join(profile.slow_path_reasons())})"
    _say(f"table {cfg.table_path}: supported, written by {how}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakesink", description="Sink Kafka topics into Delta tables exactly once.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging; for demo, also the output of Kafka, Spark and the JVM (else in a file)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("deps", help="fetch the Kafka, Delta, Kafka Connect + Debezium and Hive metastore jars from "
                                    "Maven Central "
                                    "into the cache and build "
                                    "the Spark driver's class archive and the local schema registry (once)")
    p.set_defaults(func=_cmd_deps)

    p = sub.add_parser("kafka", help="start/stop a local Kafka broker (KRaft) on 127.0.0.1")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=9092, help="listener port (0 picks a free one; default 9092)")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the broker to answer")
    p.set_defaults(func=_cmd_kafka)

    p = sub.add_parser("s3", help="start/stop a local S3-compatible server (SeaweedFS) on 127.0.0.1")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=8333, help="S3 port (0 picks a free one; default 8333)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the server to answer")
    p.set_defaults(func=_cmd_s3)

    p = sub.add_parser("registry", help="start/stop a local schema registry (Confluent's REST API, schemas in "
                                        "memory) on 127.0.0.1")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=8081, help="HTTP port (0 picks a free one; default 8081)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the registry to answer")
    p.set_defaults(func=_cmd_registry)

    p = sub.add_parser("metastore", help="start/stop a local Hive metastore (Apache Hive's standalone metastore, "
                                         "embedded Derby) on 127.0.0.1, for catalog.type=hive")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=9083, help="Thrift port (0 picks a free one; default 9083)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the metastore to listen")
    p.set_defaults(func=_cmd_metastore)

    for name, text in (("run", "coordinator and worker in one process (the embedded default)"),
                       ("coordinator", "the coordinator only (needs Spark)"),
                       ("worker", "a worker only: participants for the partitions the consumer group assigns it")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True, help="the .properties file")
        p.add_argument("--max-seconds", type=float, default=None, help=argparse.SUPPRESS)
        if name == "worker":
            p.add_argument("--task", type=int, default=None, help=argparse.SUPPRESS)
            p.add_argument("--parent", type=int, default=None, help=argparse.SUPPRESS)
        p.set_defaults(func=_cmd_run)

    p = sub.add_parser("validate", help="check a .properties file, and for an s3:// target that the bucket answers, the "
                                        "credentials can write and conditional writes are honoured; exit 0 when "
                                        "valid, 2 when not")
    p.add_argument("--config", required=True)
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("status", help="epoch, txn in flight, last commits, committed offsets and live lag "
                                      "(reads the control topic and the table; changes nothing)")
    p.add_argument("--config", required=True, help="the .properties file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("verify", help="audit the table: duplicates, uncommitted rows and gaps against the committed "
                                      "offsets and Kafka; exit 0 only when exactly once (reads only, changes nothing)")
    p.add_argument("--config", required=True, help="the .properties file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-kafka", action="store_true",
                   help="do not contact the broker: missing offsets are reported unchecked and do not fail")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("demo", help="the embedded default: local broker, sample events, sink into a local Delta table")
    p.add_argument("--records", type=int, default=20000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--keep-broker", action="store_true", help="leave the demo broker running afterwards")
    p.add_argument("--s3", action="store_true", help="write the table to s3://lakesink/demo/ on a local S3 server "
                                                     "(SeaweedFS) started for the demo and stopped after it")
    p.add_argument("--format", choices=("json", "avro", "protobuf"), default="json",
                   help="the events' format: avro and protobuf are written by confluent-kafka's serializer against a "
                        "local schema registry started for the demo, and read with value.converter=<format>")
    p.add_argument("--cdc", action="store_true", help="mirror a PostgreSQL database instead: a local PostgreSQL, "
                   "Debezium's PostgreSQL connector on a Kafka Connect worker, lakesink in upsert mode with ${topic} "
                   "routing; a workload of inserts, updates and deletes, then each table compared with its Delta "
                   "table")
    p.add_argument("--seconds", type=float, default=60.0, help="with --cdc: how long the workload runs (default 60)")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.func is not _cmd_run:  # the roles log as log.format / log.level say, once the config is read
        from connector.observe.logs import TextFormatter

        handler = logging.StreamHandler()
        handler.setFormatter(TextFormatter())  # secrets scrubbed, as in the roles' lines
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    code = _dispatch(args)
    if args.func is _cmd_run:
        # A stopped service may still hold threads in native code: the Spark session its coordinator was building
        # when it stopped, a Kafka client's, Delta's. Finalising the interpreter under them can crash the process
        # (SIGSEGV instead of the exit code); everything it must keep is written, so it leaves without finalising.
        from connector.app.service import hard_exit

        hard_exit(code)
    return code


def _dispatch(args) -> int:
    """The command's exit code: 2 for a configuration error, 1 for a failure, with one line on stderr."""
    try:
        return args.func(args)
    except ConfigError as exc:
        _say(f"lakesink: {exc}", file=sys.stderr)
        return 2
    except LakesinkError as exc:
        _say(f"lakesink: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - the interpreter would print the traceback unscrubbed
        sys.stderr.write(scrub(traceback.format_exc()))
        return 1


if __name__ == "__main__":
    sys.exit(main())
