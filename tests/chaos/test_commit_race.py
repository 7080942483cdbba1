"""Two coordinator processes of one connector race each other's commits on an S3 table for at least 100 table
versions, with every PUT of a Delta log file held back by a loopback proxy (tests/s3proxy.py) so that a commit of
one lands while the other's is in flight. Each coordinator that steps down (fenced by the other's epoch claim) is
started again at once, so they take the table from each other over and over. Every record lands exactly once, no
log file is ever written twice, and every commit a coordinator reported is the one the table holds at that version.

With Delta's default S3 log store (`LAKESINK_RACE_LOG_STORE=default`, run by hand: it writes without a condition)
the same race overwrites log versions, and commits a coordinator reported are not in the table."""
from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import replace

import pytest

from bench.harness import chaos_config, open_table
from connector.storage.store import Store
from tests.chaos.harness import expected_ranges
from tests.s3proxy import S3Proxy

pytestmark = pytest.mark.chaos

VERSIONS = 100
LOG_PUT_DELAY_S = 0.25
RESTART_AFTER_S = 15.0
_COMMITTED = re.compile(r"committed txn (\d+) epoch (\d+): .* table version (\d+),")
_LOG_FILE = re.compile(r"/_delta_log/(\d{20})\.json$")


def test_two_coordinators_racing_for_100_versions_lose_and_duplicate_nothing(kafka_bootstrap, make_topic, tmp_path,
                                                                             cluster_of, s3_server, spark, report):
    default_store = os.environ.get("LAKESINK_RACE_LOG_STORE") == "default"
    topic = make_topic(partitions=2)
    with S3Proxy(s3_server.endpoint, put_delay_s=LOG_PUT_DELAY_S, delay_path_pattern=_LOG_FILE.pattern) as proxy:
        extra = {"s3.endpoint": proxy.endpoint, "transaction.interval.ms": 300,
                 "coordinator.writestatus.timeout.ms": 10000}
        if default_store:
            extra["spark.delta.logStore.s3a.impl"] = "io.delta.storage.S3SingleDriverLogStore"
        config = chaos_config(tmp_path, kafka_bootstrap, topic, s3=s3_server, **extra)
        c = cluster_of(config)
        # the test reads the table straight from the server; only the lakesink processes go through the proxy
        c.table = Store(c.table.root, replace(c.table.s3, endpoint=s3_server.endpoint))
        # the table exists before the race, without checkpoints every 10 versions (each costs seconds on S3 and
        # is not what this test races)
        for key, value in {**c.table.s3.hadoop_conf(), "fs.s3a.endpoint": s3_server.endpoint}.items():
            spark.sparkContext._jsc.hadoopConfiguration().set(key, value)  # straight to the server, not the proxy
        spark.sql(f"CREATE TABLE delta.`{c.table.root.spark_path}` (id BIGINT, user STRING, amount DOUBLE, "
                  f"_kafka_topic STRING, _kafka_partition INT, _kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, "
                  f"_kafka_key BINARY) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '1000')")
        stream = c.stream(kafka_bootstrap, topic, partitions=2, rate=100)
        worker = c.start("worker")
        coordinators = [c.start("coordinator")]
        c.wait_rows_above(0, (worker, coordinators[0]), what="a first commit")
        coordinators.append(c.start("coordinator"))
        started, takeovers = time.monotonic(), 0
        restart_at: dict[int, float] = {}
        while _table_version(c.table) < VERSIONS:
            assert time.monotonic() - started < 420, f"{VERSIONS} versions not reached: {_table_version(c.table)}"
            c.assert_alive(worker)
            for i, proc in enumerate(coordinators):
                if proc.proc.poll() is None:
                    continue
                if i not in restart_at:
                    text = proc.tail(200)
                    assert proc.proc.returncode == 1 and ("steps down" in text or "stepping down" in text), \
                        f"a coordinator exited {proc.proc.returncode}, not fenced:\n{text}"
                    takeovers += 1
                    # the survivor commits for a while before this one comes back and claims the table again
                    restart_at[i] = time.monotonic() + RESTART_AFTER_S
                elif time.monotonic() >= restart_at[i]:
                    del restart_at[i]
                    coordinators[i] = c.start("coordinator")
            time.sleep(0.3)
        raced_s = time.monotonic() - started
        stream.stop()
        produced = stream.join()
        # the race ends: the last coordinator started keeps the table, the other steps down or is stopped
        survivor = max(coordinators, key=lambda p: p.proc.pid if p.proc.poll() is None else -1)
        for proc in coordinators:
            if proc is not survivor and proc.proc.poll() is None:
                proc.terminate()
        if survivor.proc.poll() is not None:
            survivor = c.start("coordinator")
        c.drain(expected_ranges(topic, produced), (worker, survivor))
        answers = list(proxy.counters.answers)
        written = Counter(m.group(1) for method, path, status in answers if method == "PUT" and 200 <= status < 300
                          for m in [_LOG_FILE.search(path)] if m)
        refused = sum(1 for method, path, status in answers
                      if method == "PUT" and status == 412 and _LOG_FILE.search(path))
        overwritten = sorted(v for v, n in written.items() if n > 1)
        reported = _reported_commits(tmp_path)
        held = _held_commits(c.table)
        lost = sorted((v, e, t) for v, e, t in reported if held.get(v) != (e, t))
        report(f"commit race on S3 ({'Delta default' if default_store else 'lakesink conditional'} log store, log "
               f"PUTs +{LOG_PUT_DELAY_S} s): {_table_version(c.table)} versions in {raced_s:.0f} s, {takeovers} "
               f"takeovers, {refused} log PUTs refused (412), {len(overwritten)} log versions written twice, "
               f"{len(reported)} commits reported, {len(lost)} of them not in the table")
        assert takeovers >= 2, f"the coordinators did not take the table from each other: {takeovers}"
        assert overwritten == [], f"log versions written twice: {overwritten}"
        assert lost == [], f"commits reported but not in the table (version, epoch, txn): {lost}"
        c.verify()


def _table_version(table) -> int:
    dt = open_table(table)
    return -1 if dt is None else dt.version()


def _reported_commits(tmp_path) -> list[tuple[int, int, int]]:
    """(table version, epoch, txn) of every commit a coordinator logged as done."""
    out = []
    for log in tmp_path.glob("*-coordinator-*.log"):
        for m in _COMMITTED.finditer(log.read_text(errors="replace")):
            out.append((int(m.group(3)), int(m.group(2)), int(m.group(1))))
    return out


def _held_commits(table) -> dict[int, tuple[int, int]]:
    """table version -> (epoch, txn) of the lakesink commit the table holds there."""
    import json

    held = {}
    for h in open_table(table).history():
        meta = h.get("userMetadata")
        if meta and "lakesink" in meta:
            m = json.loads(meta)["lakesink"]
            held[h["version"]] = (m["epoch"], m["txn"])
    return held
