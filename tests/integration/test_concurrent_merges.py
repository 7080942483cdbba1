"""Keyed tables of one connector committing at the same moment (docs/ARCHITECTURE.md "Many tables": every table's
coordinator commits from a thread of its own, all on the process's one Spark context). Each table's MERGE carries its
own txn identity, user metadata and schema evolution, whatever the other tables' MERGEs do meanwhile: its Delta log
holds only its own txn entries, no coordinator takes itself for fenced, no table evolves without schema.evolution,
and every key's row is right.

The first test commits real Delta tables with `DeltaTableSink` on the session's real Spark, one thread per table as
the coordinators run them, a barrier starting every round's commits together so that their MERGEs overlap; the second
runs `lakesink run` on a real broker, three topics to three upsert tables (`${topic}`)."""
from __future__ import annotations

import json
import os
import threading

import pytest

from connector.errors import LakesinkError
from connector.protocol.messages import split_version, txn_version
from connector.table import merge
from connector.table.state import read_commit_metadata
from testkit import LakesinkProcess, create_topic, pipeline_config, wait_until
from testkit.kafka import json_producer
from testkit.merge import APP, TOPIC, Changes, upsert_spec
from testkit.readback import delta_read

pytestmark = pytest.mark.integration

TABLES = 4
ROUNDS = 4
KEYS = 30
SESSION_KEYS = (merge.TXN_APP_ID, merge.TXN_VERSION, merge.USER_METADATA, merge.AUTO_MERGE)


def _round(table: int, r: int, evolves: bool) -> list[dict]:
    """Round `r`'s changes of table `table`: updates, deletes and new keys, and, in a table that evolves, a new
    column from round 1 on."""
    changes = []
    for k in range(KEYS + 3 * r):
        if (k + r) % 7 == 0:
            changes.append({"id": k, "delete": True})
        elif (k + r) % 3 != 0:
            change = {"id": k, "name": f"t{table}-r{r}-{k}"}
            if evolves and r >= 1:
                change["extra"] = f"x{table}-{r}"
            changes.append(change)
    return changes


def _expected(table: int, evolves: bool) -> dict[int, dict]:
    rows = {k: {"id": k, "name": f"t{table}-init-{k}"} for k in range(KEYS)}
    for r in range(ROUNDS):
        for change in _round(table, r, evolves):
            if change.get("delete"):
                rows.pop(change["id"], None)
            else:
                rows[change["id"]] = {**rows.get(change["id"], {}), **change}
    if evolves:
        rows = {k: {"extra": None, **row} for k, row in rows.items()}
    return rows


def _log(path) -> list[tuple[int, dict | None, list[dict]]]:
    """Each commit of the table's Delta log: (Delta version, its commitInfo, its txn actions)."""
    folder = os.path.join(path, "_delta_log")
    out = []
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".json") and n[:-5].isdigit()):
        with open(os.path.join(folder, name)) as f:
            actions = [json.loads(line) for line in f if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
        out.append((int(name[:-5]), info, [a["txn"] for a in actions if "txn" in a]))
    return out


def test_keyed_tables_committing_at_once_each_commit_with_their_own_txn(spark, tmp_path):
    before = {key: spark.conf.get(key, None) for key in SESSION_KEYS}
    evolving = {i for i in range(TABLES) if i % 2 == 1}
    tables = [Changes(spark, tmp_path / f"t{i}", upsert_spec(delete_enabled=True), evolve=i in evolving)
              for i in range(TABLES)]
    for i, t in enumerate(tables):
        t.sink.app_id = f"{APP}.t{i}"  # a table's txnAppId is `<name>.<table>` (connector/routing.py)
    for i, t in enumerate(tables):  # each table created by its first txn (epoch 1), one after the other
        t.apply([{"id": k, "name": f"t{i}-init-{k}"} for k in range(KEYS)])
    committed: list[set[int]] = [{txn_version(1, 1)} for _ in tables]
    errors: list[list[str]] = [[] for _ in tables]
    claims: list[list[int]] = [[] for _ in tables]
    barrier = threading.Barrier(TABLES, timeout=600)

    def coordinator(i: int) -> None:
        """Table i's coordinator: claims an epoch on its existing table, then commits a txn each round; fenced or
        failed, it recovers and claims again, as CoordinatorService does, and commits the round's changes again."""
        t = tables[i]
        epoch = t.sink.claim_epoch(t.sink.recover())
        claims[i].append(epoch)
        committed[i].add(txn_version(epoch, 0))
        for r in range(ROUNDS):
            status = t.status(_round(i, r, i in evolving))
            barrier.wait()
            for _ in range(3):
                t.txn += 1
                version = txn_version(epoch, t.txn)
                try:
                    t.sink.commit(version, {(TOPIC, 0): t.next[0]}, (status,))
                    committed[i].add(version)
                    break
                except LakesinkError as exc:
                    errors[i].append(f"txn {version}: {type(exc).__name__}: {str(exc)[:300]}")
                    try:
                        epoch = t.sink.claim_epoch(t.sink.recover())
                    except LakesinkError as again:
                        errors[i].append(f"recovery: {type(again).__name__}: {str(again)[:300]}")
                        return _sit_out(ROUNDS - r - 1)
                    claims[i].append(epoch)
                    committed[i].add(txn_version(epoch, 0))
                    status = t.status(_round(i, r, i in evolving))

    def _sit_out(rounds: int) -> None:
        for _ in range(rounds):
            barrier.wait()

    def run(i: int) -> None:
        try:
            coordinator(i)
        except BaseException as exc:  # noqa: BLE001 - reported below; the other tables' rounds go on without it
            errors[i].append(f"{type(exc).__name__}: {str(exc)[:300]}")
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), name=f"coordinator-{i}") for i in range(TABLES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)

    foreign_txns, foreign_metadata, without_txn, problems = 0, 0, 0, []
    for i, t in enumerate(tables):
        for version, info, txns in _log(str(t.table)):
            meta = read_commit_metadata((info or {}).get("userMetadata"))
            if not txns:
                without_txn += 1
                problems.append(f"table t{i} Delta version {version} ({(info or {}).get('operation')}): no txn")
            for txn in txns:
                if txn["appId"] != t.sink.app_id or txn["version"] not in committed[i]:
                    foreign_txns += 1
                    problems.append(f"table t{i} Delta version {version}: txn {txn} is not its own")
            if not isinstance(meta, dict) or meta.get("instance") != t.sink.instance or \
                    [txn_version(meta["epoch"], meta["txn"])] != [txn["version"] for txn in txns]:
                foreign_metadata += 1
                problems.append(f"table t{i} Delta version {version}: user metadata {meta} is not its txn's")
    report = (f"{sum(map(len, errors))} failed commits, {sum(len(c) - 1 for c in claims)} epoch claims beyond the "
              f"first, {foreign_txns} foreign txn entries, {foreign_metadata} commits with another's user metadata, "
              f"{without_txn} commits without a txn: "
              + "; ".join([e for es in errors for e in es][:6] + problems[:6]))
    assert not any(errors) and not problems, report
    assert all(len(c) == 1 for c in claims), report
    assert {split_version(v)[0] for c in committed for v in c} == {1, 2}, report
    after = {key: spark.conf.get(key, None) for key in SESSION_KEYS}
    assert after == before, "the shared session kept a MERGE's settings"

    for i, t in enumerate(tables):
        expected = _expected(i, i in evolving)
        assert t.columns() == (["id", "name", "extra"] if i in evolving else ["id", "name"]), t.columns()
        assert t.rows() == expected, f"table t{i}"
        _, _, rows = delta_read(t.table, deletion_vectors=True)
        assert {r["id"]: r for r in rows} == expected, f"table t{i} through delta-rs"
        assert t.sink.txn_version() == txn_version(2, ROUNDS + 1)


def _delta_log_txns(table) -> list[dict]:
    return [txn for _, _, txns in _log(str(table)) for txn in txns]


def test_a_connector_of_upsert_tables_commits_each_with_its_own_txn(spark, admin, kafka_bootstrap, tmp_path):
    """`lakesink run`, three topics each upserted into its own table: their coordinators commit every second, so
    their MERGEs overlap on the process's one Spark context."""
    prefix = f"ups{os.urandom(4).hex()}"
    topics = [f"{prefix}-{x}" for x in ("a", "b", "c")]
    for topic in topics:
        create_topic(admin, topic, 1)
    name = f"multi-{prefix}"
    config = pipeline_config(tmp_path, kafka_bootstrap, ",".join(topics), name=name, **{
        "target.table.name": "${topic}", "write.mode": "upsert", "record.key.fields": "id",
        "transaction.interval.ms": 1000, "consumer.session.timeout.ms": 6000})
    tables = {topic: tmp_path / "tables" / topic.replace("-", "_") for topic in topics}
    app = {topic: f"{name}.{tables[topic].name}" for topic in topics}
    keys, waves, per_wave = 40, 8, 120
    expected = {topic: {} for topic in topics}
    log_path = tmp_path / "run.log"
    with LakesinkProcess("run", config, log_path, env={"LAKESINK_FAULT": ""}) as proc:
        producer = json_producer(kafka_bootstrap)
        for wave in range(waves):
            for t, topic in enumerate(topics):
                for i in range(per_wave):
                    key = (i * 7 + wave) % keys
                    value = {"id": key, "topic": t, "wave": wave, "n": i}
                    producer.produce(topic, key=str(key).encode(), value=json.dumps(value).encode())
                    expected[topic][key] = value
            assert producer.flush(30) == 0
            wait_until(lambda: proc.alive(), 5, "lakesink run alive")
            if wave < waves - 1:
                threading.Event().wait(1.0)  # the next wave goes to the next txns

        def done() -> bool:
            assert proc.alive(), proc.tail()
            text = log_path.read_text()
            assert "stepping down" not in text and "claimed epoch" not in text, proc.tail()
            return all(_committed(tables[t], app[t]) >= waves * per_wave for t in topics)

        wait_until(done, 180, f"every table committing its records ({log_path})", interval_s=0.5)
        assert proc.terminate() == 0, proc.tail()
    for topic in topics:
        txns = _delta_log_txns(tables[topic])
        assert {txn["appId"] for txn in txns} == {app[topic]}, f"{topic}: {txns}"
        assert {split_version(txn["version"])[0] for txn in txns} == {1}, f"{topic}: an epoch claimed again"
        rows = spark.read.format("delta").load(str(tables[topic])).select("id", "topic", "wave", "n").collect()
        assert {r["id"]: r.asDict() for r in rows} == expected[topic], topic


def _committed(table, app_id: str) -> int:
    from connector.table.sink import DeltaTableSink

    if not (table / "_delta_log").exists():
        return 0
    return sum((DeltaTableSink(str(table), app_id).recover().offsets or {}).values())
