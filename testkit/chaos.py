"""Driving lakesink processes through faults: start them with a fault armed, wait for the fault to fire,
restart, drain, and audit (the process, stream and audit helpers are testkit's, shared with the soak)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from testkit import (
    DRAIN_S,
    LakesinkProcess,
    Stream,
    audit,
    exactly_once,
    process_state,
    table_offsets,
    table_store,
    wait_until,
)

FAULT_S = 120  # a coordinator needs its Spark session (15-30 s) before it reaches any step

COORDINATOR_STEPS = ("coordinator.after-start-sent", "coordinator.after-end-sent", "coordinator.after-manifest",
                     "coordinator.after-delta-commit", "coordinator.after-ack", "coordinator.during-sweep")
PARTICIPANT_STEPS = ("participant.after-start-received", "participant.mid-consume", "participant.after-end-received",
                     "participant.after-staging", "participant.after-write-status")


def expected_ranges(topic: str, per_partition: dict[int, int]) -> dict:
    return {(topic, p): range(n) for p, n in per_partition.items()}


class Cluster:
    """The lakesink processes of one test. Every process started here is killed at teardown."""

    def __init__(self, tmp_path: Path, config: Path):
        self.tmp_path = tmp_path
        self.config = config
        self.table = table_store(config)  # connector.storage.store.Store: a local directory or an S3 prefix
        self.procs: list[LakesinkProcess] = []
        self.faults_fired: list[str] = []
        self.streams: list[Stream] = []
        self._n = 0

    def stream(self, bootstrap: str, topic: str, partitions: int, rate: float) -> "Stream":
        """Records produced until the test calls stop() (or teardown does)."""
        s = Stream(bootstrap, topic, partitions, rate)
        self.streams.append(s)
        return s

    def start(self, role: str, fault: str | None = None, action: str = "kill", after: int = 1,
              delay_ms: int | None = None, config: Path | None = None) -> LakesinkProcess:
        self._n += 1
        label = (fault or "clean").replace(".", "-")
        env = {"LAKESINK_FAULT": fault, "LAKESINK_FAULT_ACTION": action, "LAKESINK_FAULT_AFTER": str(after)} \
            if fault else {"LAKESINK_FAULT": ""}
        if delay_ms is not None:
            env["LAKESINK_FAULT_DELAY_MS"] = str(delay_ms)
        proc = LakesinkProcess(role, config or self.config, self.tmp_path / f"{self._n:02d}-{role}-{label}.log", env=env)
        proc.role, proc.fault = role, fault
        self.procs.append(proc)
        return proc

    def wait_fault(self, proc: LakesinkProcess, timeout_s: float = FAULT_S) -> None:
        """The armed fault kills the process at its step: exit by SIGKILL and the step named in its log."""
        wait_until(lambda: proc.proc.poll() is not None, timeout_s,
                   f"{proc.role} to die at {proc.fault} ({proc.log_path})", interval_s=0.2)
        assert proc.proc.returncode == -signal.SIGKILL, \
            f"{proc.role} armed with {proc.fault} exited with {proc.proc.returncode}, not by the fault:\n{proc.tail()}"
        text = Path(proc.log_path).read_text(errors="replace")
        assert f"at {proc.fault}" in text, f"{proc.log_path} does not name the fault step {proc.fault}"
        self.faults_fired.append(proc.fault)

    def wait_paused(self, proc: LakesinkProcess, timeout_s: float = FAULT_S) -> None:
        wait_until(lambda: process_state(proc.proc.pid) in ("T", None), timeout_s,
                   f"{proc.role} to stop itself at {proc.fault} ({proc.log_path})", interval_s=0.2)
        assert process_state(proc.proc.pid) == "T", f"{proc.role} exited instead of pausing:\n{proc.tail()}"
        self.faults_fired.append(proc.fault)

    def rows(self) -> int:
        return len(table_offsets(self.table))

    def assert_alive(self, *procs: LakesinkProcess) -> None:
        for p in procs:
            assert p.alive(), f"{p.role} exited ({p.proc.returncode}):\n{p.tail()}"

    def wait_rows_above(self, rows: int, alive: tuple[LakesinkProcess, ...], timeout_s: float = DRAIN_S,
                        what: str = "a commit") -> int:
        def grown():
            self.assert_alive(*alive)
            n = self.rows()
            return n if n > rows else None
        return wait_until(grown, timeout_s, f"{what}: table rows above {rows}", interval_s=0.5)

    def no_duplicates_yet(self) -> None:
        mid = audit(self.table, {})
        assert mid["duplicated"] == 0, f"duplicates after {self.faults_fired}: {mid}"

    def drain(self, expected: dict, alive: tuple[LakesinkProcess, ...], timeout_s: float = DRAIN_S) -> None:
        def done():
            self.assert_alive(*alive)
            return exactly_once(self.table, expected)
        try:
            wait_until(done, timeout_s, f"every produced record exactly once after {self.faults_fired}", interval_s=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\naudit: {audit(self.table, expected)}") from None

    def verify(self) -> str:
        """`lakesink verify` must find nothing wrong (exit 0)."""
        out = subprocess.run([sys.executable, "-m", "connector", "verify", "--config", str(self.config)],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "LAKESINK_FAULT": ""})
        assert out.returncode == 0, f"lakesink verify exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
        assert "duplicated=0" in out.stdout and "uncommitted=0" in out.stdout, out.stdout
        return out.stdout

    def close(self) -> None:
        for s in self.streams:
            s.stop()
        for p in self.procs:
            if p.proc.poll() is None:
                try:
                    os.killpg(p.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            p.__exit__(None, None, None)


def stopped_again(run: LakesinkProcess, step: str, seen: int) -> int:
    """Wait until the process has stopped itself at `step` once more than `seen` times; the new count."""
    marker = f"fault injection: pause at {step}"

    def stopped():
        if run.proc.poll() is not None:
            raise AssertionError(f"lakesink run exited ({run.proc.returncode}):\n{run.tail()}")
        count = Path(run.log_path).read_text(errors="replace").count(marker)
        return count if count > seen and process_state(run.proc.pid) == "T" else None

    return wait_until(stopped, 120, f"lakesink run to stop at {step} ({run.log_path})", interval_s=0.05)


__all__ = ["Cluster", "expected_ranges", "stopped_again", "COORDINATOR_STEPS", "PARTICIPANT_STEPS"]

