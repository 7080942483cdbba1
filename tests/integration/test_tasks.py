"""`tasks.max`: `lakesink run` reads with more worker processes than its own (connector/app/tasks.py), exactly once,
and leaves none behind when it is killed or stopped."""
from __future__ import annotations

from pathlib import Path

import pytest

from connector.config import load_config
from connector.kafka.clients import KafkaClients
from connector.protocol.channel import read_tail
from connector.protocol.messages import WriteStatus
from testkit import LakesinkProcess, audit, exactly_once, pipeline_config, table_store, wait_until
from testkit.kafka import produce_json

pytestmark = pytest.mark.integration


def _tasks_of(pid: int) -> list[int]:
    """The pids of the worker tasks that `lakesink run` `pid` started (their command line names it their parent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--parent" in argv and argv[argv.index(b"--parent") + 1:][:1] == [str(pid).encode()]:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_two_tasks_share_the_partitions_exactly_once_and_die_with_a_killed_run(kafka_bootstrap, make_topic, tmp_path):
    topic = make_topic(partitions=4)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"tasks.max": 2, "transaction.interval.ms": 1500})
    cfg = load_config(str(config))
    table = table_store(config)
    produced = produce_json(kafka_bootstrap, topic, 8000, partitions=4)
    with LakesinkProcess("run", config, tmp_path / "run1.log") as run:
        [task] = wait_until(lambda: _tasks_of(run.proc.pid), 30, "the second worker task to start")
        wait_until(lambda: audit(table, {})["rows"] > 0 or not run.alive(), 180, "a first commit", interval_s=1)
        more = produce_json(kafka_bootstrap, topic, 8000, partitions=4, start=8000)
        expected = {(topic, p): range(produced[p] + more[p]) for p in produced}

        def writers() -> set[str]:
            assert run.alive(), run.tail()
            return {m.worker for m in read_tail(KafkaClients.of(cfg), cfg.control_topic_name, cfg.name)
                    if isinstance(m, WriteStatus) and m.rows}

        wait_until(lambda: exactly_once(table, expected) and len(writers()) == 2, 180,
                   "every record once, written by both workers", interval_s=1)
        run.kill()  # SIGKILL: the task lives in a session of its own, and the kernel stops it
        wait_until(lambda: not _alive(task), 30, f"worker task {task} to stop with the killed run")

    later = produce_json(kafka_bootstrap, topic, 4000, partitions=4, start=16000)
    expected = {(topic, p): range(produced[p] + more[p] + later[p]) for p in produced}
    with LakesinkProcess("run", config, tmp_path / "run2.log") as run:
        [task] = wait_until(lambda: _tasks_of(run.proc.pid), 30, "the second worker task to start")
        wait_until(lambda: exactly_once(table, expected) or not run.alive(), 180, "every record once after the kill",
                   interval_s=1)
        assert run.terminate() == 0, run.tail()
        assert not _alive(task), "a stopped run stops its worker tasks"
    assert audit(table, expected) == {"rows": 20_000, "missing": 0, "duplicated": 0, "unexpected": 0}
