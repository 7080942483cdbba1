"""Two coordinator processes of one connector race each other's commits on an S3 table for at least 40 table
versions. At each takeover a loopback proxy (testkit/s3proxy.py) holds
the live coordinator's next Delta log PUT until a newly started coordinator, which recovered the table without that
version and claims it, PUTs the same log version: the two PUTs go on together. The loser steps down and the race
goes on from the survivor. Every record lands exactly once, no log file is ever written twice, and every commit a
coordinator reported is the one the table holds at that version.

With Delta's default S3 log store (`LAKESINK_RACE_LOG_STORE=default`, run by hand: it writes without a condition)
the same race overwrites a log version at every takeover, and commits a coordinator reported are not in the
table: this test fails there."""
from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import replace

import pytest

from connector.storage.store import Store
from testkit import chaos_config, lakesink_commits, open_table, wait_until
from testkit.chaos import expected_ranges
from testkit.s3proxy import S3Proxy

pytestmark = pytest.mark.chaos

VERSIONS = 40
LOG_PUT_DELAY_S = 0.0  # the rendezvous makes the collision; no other log PUT needs holding back
STRIDE = 10  # versions the live coordinator commits before each takeover (each takeover is one race)
MIN_TAKEOVERS = 3
_COMMITTED = re.compile(r"committed txn (\d+) epoch (\d+): .* table version (\d+),")
_LOG_FILE = re.compile(r"/_delta_log/(\d{20})\.json$")


def test_two_coordinators_racing_for_40_versions_lose_and_duplicate_nothing(kafka_bootstrap, make_topic, tmp_path,
                                                                             cluster_of, s3_server, spark, report):
    default_store = os.environ.get("LAKESINK_RACE_LOG_STORE") == "default"
    topic = make_topic(partitions=2)
    with S3Proxy(s3_server.endpoint, put_delay_s=LOG_PUT_DELAY_S, delay_path_pattern=_LOG_FILE.pattern) as proxy:
        # compaction off: its OPTIMIZE commits are log PUTs too, and the race is between the coordinators' own
        extra = {"s3.endpoint": proxy.endpoint, "transaction.interval.ms": 300,
                 "coordinator.writestatus.timeout.ms": 10000, "compaction.enabled": "false"}
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
        live = c.start("coordinator")
        c.wait_rows_above(0, (worker, live), what="a first commit")
        started, takeovers, met = time.monotonic(), 0, 0

        def reached(version):
            def check():
                nonlocal live
                c.assert_alive(worker)
                live = _running(c, live)
                return _table_version(c.table) >= version
            return check

        while takeovers < MIN_TAKEOVERS:
            wait_until(reached(_table_version(c.table) + STRIDE), 150, f"{STRIDE} more versions", interval_s=0.3)
            # the live coordinator's next log PUT waits in the proxy while a new coordinator starts, recovers the
            # table without that version and claims it: their two PUTs of one log version go on together
            proxy.arm_rendezvous()
            wait_until(lambda: c.assert_alive(worker, live) or proxy.held, 60, "a held log PUT", interval_s=0.1)
            claimer = c.start("coordinator")
            rendezvous = len(proxy.rendezvous)
            wait_until(lambda: c.assert_alive(worker) or len(proxy.rendezvous) > rendezvous
                       or claimer.proc.poll() is not None, 90, "the claimer's PUT of the held version",
                       interval_s=0.1)
            proxy.release()
            met += len(proxy.rendezvous) - rendezvous
            wait_until(lambda: c.assert_alive(worker) or live.proc.poll() is not None
                       or claimer.proc.poll() is not None, 120, "one of the two to step down", interval_s=0.3)
            # the one left running may step down later too (when their two commits of one log version overwrote
            # each other, each can see the other's): the next wait starts a coordinator again then
            if live.proc.poll() is not None:
                _assert_stepped_down(live)
                live = claimer
            else:
                _assert_stepped_down(claimer)
            takeovers += 1
        wait_until(reached(VERSIONS), 150, f"{VERSIONS} versions", interval_s=0.3)
        raced_s = time.monotonic() - started
        stream.stop()
        produced = stream.join()
        answers = list(proxy.counters.answers)
        written = Counter(m.group(1) for method, path, status in answers if method == "PUT" and 200 <= status < 300
                          for m in [_LOG_FILE.search(path)] if m)
        refused = sum(1 for method, path, status in answers
                      if method == "PUT" and status == 412 and _LOG_FILE.search(path))
        overwritten = sorted(v for v, n in written.items() if n > 1)
        reported = _reported_commits(tmp_path)
        held = {v: (e, t) for v, e, t, _ in lakesink_commits(c.table)}
        lost = sorted((v, e, t) for v, e, t in reported if held.get(v) != (e, t))
        report(f"commit race on S3 ({'Delta default' if default_store else 'lakesink conditional'} log store, log "
               f"PUTs +{LOG_PUT_DELAY_S} s): {_table_version(c.table)} versions in {raced_s:.0f} s, {takeovers} "
               f"takeovers, {met} log versions PUT by both at once, {refused} log PUTs refused (412), "
               f"{len(overwritten)} log versions written twice, {len(reported)} commits reported, {len(lost)} of "
               f"them not in the table")
        assert met >= MIN_TAKEOVERS // 2, f"too few takeovers raced one log version: {met} of {takeovers}"
        assert overwritten == [], f"log versions written twice: {overwritten}"
        assert lost == [], f"commits reported but not in the table (version, epoch, txn): {lost}"
        live = _running(c, live)
        c.drain(expected_ranges(topic, produced), (worker, live))
        c.verify()


def _running(c, coordinator):
    """`coordinator` while it runs; once it has stepped down, a new one."""
    if coordinator.proc.poll() is None:
        return coordinator
    _assert_stepped_down(coordinator)
    return c.start("coordinator")


def _assert_stepped_down(proc) -> None:
    text = proc.tail(200)
    assert proc.proc.wait(30) == 1 and ("steps down" in text or "stepping down" in text), \
        f"a coordinator exited {proc.proc.returncode}, not fenced:\n{text}"


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
