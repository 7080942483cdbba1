"""`lakesink status`: what the control topic and the table say about a connector, and its live lag.

Read-only throughout: the control topic's recent tail (no topic created, no group joined), the table through
`Recovery.recover` (connector/table/recovery.py: it leaves every manifest alone), watermarks through the AdminClient. Nothing here
needs Spark.

A connector that writes several tables is shown table by table, each as the pipeline its configuration gives it
(connector/routing.py).

Committed offsets and lag count Kafka records. In a keyed table (`write.mode=upsert|dedup`) a row is a key, not a
record, so status shows no row count of the table; the rows of the last commits are what each PROGRESS record says.
"""
from __future__ import annotations

import json
import sys
import time
from typing import IO, Any, Callable

from confluent_kafka.admin import AdminClient

from connector import secrets
from connector.app.plans import table_plans
from connector.protocol.channel import read_tail
from connector.config import LakesinkConfig
from connector.errors import LakesinkError, SetupError
from connector.kafka.clients import KafkaClients, check_connection
from connector.observe.metrics import DeadLetterStreak
from connector.protocol.messages import (
    AckCommit,
    Assignment,
    CommitFailed,
    EndCommit,
    Message,
    Progress,
    StartCommit,
    WriteStatus,
    split_version,
)
from connector.storage.store import Store
from connector.routing import plan
from connector.table.recovery import Recovery
from connector.kafka.watermarks import lag, list_offsets

TAIL = 2000
"""How many of the control topic's newest messages are read."""
KAFKA_TIMEOUT_S = 10.0
"""How long status waits for the brokers to answer."""
LAST_COMMITS = 5


def control_view(messages: list[Message], now: float | None = None, dead_letter_txns: int = 0) -> dict[str, Any]:
    """Latest epoch, the txn in flight and its phase as far as the messages show, the last commits, the
    error of a coordinator that gave up a commit and stopped (`failed`: None once a START followed it), and the
    commits in a row whose every record was dead-lettered (`dead_lettering`, from the PROGRESS records; `degraded`
    at `dead_letter_txns`, health.deadletter.transactions, as the coordinator's /health says), and each worker's
    partitions as it last announced them, with those that wait for the schema registry and the registry's error."""
    now = time.time() if now is None else now
    view: dict[str, Any] = {"messages": len(messages), "latest_epoch": None, "in_flight": None,
                            "last_commits": [], "last_message_age_s": None, "workers": [], "failed": None,
                            "dead_lettering": None}
    if not messages:
        return view
    view["latest_epoch"] = max(m.epoch for m in messages)
    view["last_message_age_s"] = round(max(0.0, now - max(m.sent_at for m in messages)), 1)
    starts = [m for m in messages if isinstance(m, StartCommit)]
    if starts:
        start = max(starts, key=lambda m: (m.epoch, m.txn))
        same = [m for m in messages if (m.epoch, m.txn) == (start.epoch, start.txn)]
        statuses = {m.topic_partition for m in same if isinstance(m, WriteStatus)}
        acks = [m for m in same if isinstance(m, AckCommit)]
        ends = [m for m in same if isinstance(m, EndCommit)]
        if acks:
            phase = "committed" if acks[-1].table_version is not None else "skipped (nothing to commit)"
        elif ends:
            phase = "collecting"
        else:
            phase = "consuming"
        view["in_flight"] = {"epoch": start.epoch, "txn": start.txn, "phase": phase,
                             "write_statuses": len(statuses), "partitions": len(start.offsets),
                             "started_s_ago": round(max(0.0, now - start.sent_at), 1)}
        if phase == "collecting":
            view["in_flight"]["ended_s_ago"] = round(max(0.0, now - ends[0].sent_at), 1)
            view["in_flight"]["waiting_for"] = [{"topic": t, "partition": p}
                                                for t, p in sorted(set(start.offsets) - statuses)]
    latest: dict[str, Assignment] = {}
    owner: dict[tuple[str, int], str] = {}  # who announced each partition last
    for m in messages:
        if isinstance(m, Assignment):
            latest[m.worker] = m
            owner.update(dict.fromkeys(m.partitions, m.worker))
    # a partition another worker announced since is no longer this one's to wait for (it stopped or lost it)
    view["workers"] = [{"worker": w, "partitions": [f"{t}-{p}" for t, p in m.partitions],
                        "registry_waiting": [f"{t}-{p}" for t, p in m.registry_waiting if owner.get((t, p)) == w],
                        "registry_error": m.registry_error, "age_s": round(max(0.0, now - m.sent_at), 1)}
                       for w, m in sorted(latest.items())]
    last_start = max((i for i, m in enumerate(messages) if isinstance(m, StartCommit)), default=-1)
    failed = [m for m in messages[last_start + 1:] if isinstance(m, CommitFailed)]
    if failed:
        f = failed[-1]
        view["failed"] = {"epoch": f.epoch, "txn": f.txn, "attempts": f.attempts, "error": f.error,
                          "age_s": round(max(0.0, now - f.sent_at), 1)}
    streak = DeadLetterStreak()
    for m in messages:
        if isinstance(m, Progress):
            streak.observe(_count(m.payload.get("rows")), _count(m.payload.get("records_dead_lettered")), m.epoch, m.txn)
    if streak.transactions:
        view["dead_lettering"] = {**streak.describe(),
                                  "degraded": 0 < dead_letter_txns <= streak.transactions}
    progress = [m for m in messages if isinstance(m, Progress)][-LAST_COMMITS:]
    view["last_commits"] = [{**{k: m.payload.get(k) for k in ("txn", "epoch", "table_version", "rows", "bytes",
                                                                 "rows_per_s", "commit_duration_s", "lag",
                                                                 "records_dead_lettered", "ended_by")},
                             "age_s": round(max(0.0, now - m.sent_at), 1)} for m in progress]
    upkeep = [m.payload["upkeep"] for m in progress if isinstance(m.payload.get("upkeep"), dict)]
    view["upkeep"] = upkeep[-1] if upkeep else None
    return view


def registry_problem(view: dict[str, Any]) -> str | None:
    """The one line that says which partitions wait for the schema registry, as the workers of `view` (a
    control_view) last announced them, and why; None when none does."""
    waiting = [w for w in view["workers"] if w["registry_waiting"]]
    if not waiting:
        return None
    count = sum(len(w["registry_waiting"]) for w in waiting)
    workers = ("worker " if len(waiting) == 1 else "workers ") + ", ".join(w["worker"] for w in waiting)
    error = min(waiting, key=lambda w: w["age_s"])["registry_error"]  # the newest announcement's
    return (f"schema registry: {count} partition{' waits' if count == 1 else 's wait'} for it ({workers})"
            + (f": {error}" if error else ""))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _refusal(kafka: KafkaClients) -> str | None:
    """None when the brokers answer, else why not (a refused login, or no broker)."""
    try:
        check_connection(kafka, KAFKA_TIMEOUT_S)
        return None
    except SetupError as exc:
        return str(exc)


def collect(cfg: LakesinkConfig, refusal: Callable[[KafkaClients], str | None] = _refusal) -> dict[str, Any]:
    """Everything `status` shows of one table, as one JSON-ready dict. `refusal`: whether the brokers answer (the
    tables of one connector share them, so `collect_tables` asks once)."""
    from connector.table.catalog import CatalogConflictError, CatalogUnavailableError, located

    try:
        cfg, catalog_problem = located(cfg), None  # an existing catalog table's location is the table
    except (CatalogUnavailableError, CatalogConflictError) as exc:
        catalog_problem = f"catalog: {exc}; the configured path is shown"
    out: dict[str, Any] = {"connector": cfg.name, "table_path": cfg.table_path, "control_topic": cfg.control_topic_name,
                           "source_topics": list(cfg.topics_description), "write_mode": cfg.write_mode,
                           "key_fields": list(cfg.record_key_fields), "problems": []}
    kafka = KafkaClients.of(cfg)
    refused = refusal(kafka)
    if catalog_problem is not None:
        out["problems"].append(catalog_problem)
    if refused is not None:  # the table's part is still shown
        out["problems"].append(refused)
    try:
        messages = read_tail(kafka, cfg.control_topic_name, cfg.name, TAIL) if refused is None else []
    except Exception as exc:  # noqa: BLE001 - status shows what it can
        messages = []
        out["problems"].append(f"control topic {cfg.control_topic_name}: {exc}")
    out["control"] = control_view(messages, dead_letter_txns=cfg.health_deadletter_transactions)
    waiting = registry_problem(out["control"])
    if waiting is not None:
        out["problems"].append(waiting)

    recovery = Recovery.of(Store.for_config(cfg), cfg.table_path, cfg.name)
    committed: dict = {}
    table: dict[str, Any] = {"exists": False}
    try:
        rec = recovery.recover()  # read-only
        committed = rec.offsets
        table = {"exists": rec.table_version is not None, "delta_version": rec.table_version,
                 "txn_version": rec.version, "epoch": split_version(rec.version)[0] if rec.version is not None else None,
                 "txn": split_version(rec.version)[1] if rec.version is not None else None,
                 "uncommitted_manifests": sum(1 for v in recovery.manifests.versions() if v > (rec.version or -1))}
    except LakesinkError as exc:
        out["problems"].append(str(exc))
    except Exception as exc:  # noqa: BLE001 - an unreadable table is reported, not raised
        out["problems"].append(f"table {cfg.table_path}: {exc}")
    out["table"] = table

    partitions = set(committed)
    if refused is not None:
        out["partitions"] = [{"topic": t, "partition": p, "committed": committed.get((t, p)), "high_watermark": None,
                              "lag": None} for t, p in sorted(partitions)]
        out["total_lag"] = 0
        return out
    admin = AdminClient(kafka.config("admin"))
    try:
        md = admin.list_topics(timeout=KAFKA_TIMEOUT_S)
        for topic in cfg.source_topics(md.topics):
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                out["problems"].append(f"source topic {topic}: {tmd.error if tmd else 'missing'}")
                continue
            partitions |= {(topic, p) for p in tmd.partitions}
    except Exception as exc:  # noqa: BLE001
        out["problems"].append(f"cannot read topic metadata: {exc}")
    high = list_offsets(admin, sorted(partitions))
    low = list_offsets(admin, sorted(partitions), earliest=True)
    lags = lag({tp: committed.get(tp) for tp in partitions}, high, low)
    out["partitions"] = [{"topic": t, "partition": p, "committed": committed.get((t, p)),
                          "high_watermark": high.get((t, p)), "lag": lags.get((t, p))}
                         for t, p in sorted(partitions)]
    out["total_lag"] = sum(v for v in lags.values() if v is not None)
    return out


def collect_tables(cfg: LakesinkConfig) -> dict[str, Any]:
    """`collect` for each table of a connector that writes several: {"connector", "tables": {table: its dict}}, and
    "problems" when the brokers did not list the topics that `kafka.topic.regex` makes tables of."""
    refused = _refusal(KafkaClients.of(cfg))
    out: dict[str, Any] = {"connector": cfg.name, "tables": {}}
    problem = None
    if refused is not None and cfg.kafka_topic_regex is not None:
        problem, plans = refused, plan(cfg)
    else:
        try:
            plans = table_plans(cfg, KAFKA_TIMEOUT_S)
        except SetupError as exc:
            problem, plans = str(exc), plan(cfg)
    if problem is not None:
        out["problems"] = [f"the tables of kafka.topic.regex come from the topics that exist, which Kafka did not "
                           f"list; only the tables known without them are shown: {problem}"]
    for table_plan in plans:
        out["tables"][table_plan.table] = collect(table_plan.cfg, lambda _: refused)
    return out


def render(s: dict[str, Any]) -> str:
    """The status as a few readable lines and tables: a block per table for a connector that writes several."""
    if "tables" in s:
        return _render_tables(s)
    lines = [f"connector  {s['connector']}", f"table      {s['table_path']}"]
    t = s["table"]
    if t.get("exists"):
        lines.append(f"           Delta version {t['delta_version']}; committed by epoch {t['epoch']} txn {t['txn']}"
                     f" (txn version {t['txn_version']})" + (f"; {t['uncommitted_manifests']} uncommitted "
                                                             f"manifest(s)" if t["uncommitted_manifests"] else ""))
    else:
        lines.append("           does not exist yet (nothing committed)")
    mode = s.get("write_mode", "append")
    if mode != "append":
        key = ", ".join(s.get("key_fields") or ()) or "the fields of the Kafka key"
        lines.append(f"write      {mode} on {key}: a row per key; committed offsets and lag count Kafka records")
    c = s["control"]
    lines.append(f"control    {s['control_topic']}: {c['messages']} recent message(s) of this connector"
                 + (f", the newest {c['last_message_age_s']} s old" if c["last_message_age_s"] is not None else ""))
    if c["latest_epoch"] is not None:
        lines.append(f"epoch      {c['latest_epoch']}")
    failed = c.get("failed")
    if failed:
        lines.append(f"FAILED     the coordinator stopped {failed['age_s']} s ago after {failed['attempts']} failed "
                     f"commit(s): {failed['error']}")
    dead = c.get("dead_lettering")
    if dead and dead["degraded"]:
        lines.append(f"DEGRADED   the last {dead['transactions']} commits dead-lettered every record ({dead['records']} "
                     f"records since txn {dead['since_txn']} of epoch {dead['since_epoch']}): no row reaches the "
                     f"table; the dead letters' __connect.errors.exception.message says why")
    f = c["in_flight"]
    if f:
        lines.append(f"txn        {f['txn']} (epoch {f['epoch']}): {f['phase']}, {f['write_statuses']}/"
                     f"{f['partitions']} write statuses, started {f['started_s_ago']} s ago")
        if f.get("waiting_for"):
            lines.append(f"           END-COMMIT sent {f['ended_s_ago']} s ago; waiting for "
                         + ", ".join(f"{w['topic']}-{w['partition']}" for w in f["waiting_for"]))
    lines += _upkeep_lines(c.get("upkeep"))
    for w in c["workers"]:
        lines.append(f"worker     {w['worker']}: {', '.join(w['partitions']) or 'no partitions'} "
                     f"(announced {w['age_s']} s ago)"
                     + (f"; {', '.join(w['registry_waiting'])} "
                        f"wait{'s' if len(w['registry_waiting']) == 1 else ''} for the schema registry"
                        if w["registry_waiting"] else ""))
    lines.append("")
    rows = [("partition", "committed", "high watermark", "lag")]
    for p in s["partitions"]:
        rows.append((f"{p['topic']}-{p['partition']}", _text(p["committed"], "none"), _text(p["high_watermark"]),
                     _text(p["lag"])))
    lines += _table(rows)
    lines.append(f"total lag  {s['total_lag']}")
    if c["last_commits"]:
        lines.append("")
        lines.append("last commits")
        rows = [("txn", "epoch", "rows", "rows/s", "commit s", "lag", "table version", "ended by", "age s")]
        for k in c["last_commits"]:
            rows.append(tuple(_text(k[n]) for n in ("txn", "epoch", "rows", "rows_per_s", "commit_duration_s", "lag",
                                                     "table_version", "ended_by", "age_s")))
        lines += _table(rows)
    for problem in s["problems"]:
        lines.append(f"problem    {problem}")
    return "\n".join(lines) + "\n"


def _upkeep_lines(u: dict[str, Any] | None) -> list[str]:
    """The table's files and its last compaction and VACUUM, as the last PROGRESS that carried them says."""
    if not u:
        return []
    lines = [f"files      {_text(u.get('files'))} data files ({_text(u.get('small_files'))} small), "
             f"{_text(u.get('bytes'))} bytes; checkpoint at version {_text(u.get('checkpoint_version'))}"]
    done = u.get("last_compaction")
    if done:
        lines.append(f"compacted  {done['partitions']} partition(s): {done['files_removed']} files into "
                     f"{done['files_added']} ({done['bytes_rewritten']} bytes rewritten) in {done['duration_s']} s"
                     f"{', ' + time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(done['at'])) + ' UTC'}"
                     + (f"; deferred: {done['deferred']}" if done.get("deferred") else ""))
    vacuum = u.get("last_vacuum")
    if vacuum:
        lines.append(f"vacuumed   {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(vacuum['at']))} UTC, retention "
                     f"{vacuum['retention_hours']} h, in {vacuum['duration_s']} s")
    return lines


def _render_tables(s: dict[str, Any]) -> str:
    tables = s["tables"]
    lines = [f"connector  {s['connector']}: {len(tables)} table{'' if len(tables) == 1 else 's'}"
             + (f" ({', '.join(tables)})" if tables else "")]
    lines += [f"problem    {problem}" for problem in s.get("problems", ())]
    blocks = [f"== table {table}\n{render(status)}" for table, status in tables.items()]
    return "\n".join(lines) + "\n" + "".join(f"\n{block}" for block in blocks)


def _text(value: Any, none: str = "-") -> str:
    return none if value is None else str(value)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
            for r in rows]


def print_status(cfg: LakesinkConfig, as_json: bool = False, out: IO[str] | None = None) -> int:
    """Print the status, without any secret value: its problems quote client libraries' errors, and a
    COMMIT_FAILED's error is whatever the coordinator that sent it (maybe an older lakesink) wrote."""
    status = secrets.protect(cfg).data(collect_tables(cfg) if cfg.many_tables else collect(cfg))
    out = out or sys.stdout
    out.write(json.dumps(status, indent=2) + "\n" if as_json else render(status))
    return 0
