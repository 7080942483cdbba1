"""Randomized soak: a long paced stream, N random faults at protocol steps, then drain and audit.

    .venv/bin/python bench/soak.py --faults 50 --seed 1 --max-minutes 60

Starts its own Kafka broker (connector.local.kafka) in a temporary directory, one coordinator and two worker
processes, and a producer thread that keeps producing (testkit.Stream). Each fault picks a random step of
connector.faults.STEPS, restarts the process of that role (a random worker for participant steps) armed with it
(kill, or pause and then kill), waits for it to fire, restarts the process clean and waits for the committed
offsets to move on.
Now and then the broker restarts as well. At the end the producer stops, the pipeline drains, and every
record Kafka holds is compared with the table:

    runs=N lost=L duplicated=D

Exit 0 only when both are 0 (and nothing unexpected is in the table). Not collected by pytest (bench/).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connector.faults import STEPS  # noqa: E402
from testkit import (LakesinkProcess, Stream, audit, chaos_config, create_topic, process_state,  # noqa: E402
                     table_offsets, watermarks)

FIRE_S = 150  # an armed coordinator needs its Spark session first
PROGRESS_S = 240


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = Path(args.workdir or tempfile.mkdtemp(prefix="lakesink-soak-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.began = time.monotonic()
        self.procs: dict[str, LakesinkProcess] = {}
        self.n = 0
        self.stats = Counter()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.began:7.1f} s] {text}", flush=True)

    # --- processes -----------------------------------------------------------------------------------------

    def start(self, name: str, fault: str | None = None, action: str = "kill", after: int = 1) -> LakesinkProcess:
        role = "coordinator" if name == "coordinator" else "worker"
        self.n += 1
        env = {"LAKESINK_FAULT": fault or "", "LAKESINK_FAULT_ACTION": action, "LAKESINK_FAULT_AFTER": str(after)}
        label = (fault or "clean").replace(".", "-")
        proc = LakesinkProcess(role, self.config, self.work / "logs" / f"{self.n:03d}-{name}-{label}.log", env=env)
        self.procs[name] = proc
        return proc

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        if proc.alive() and process_state(proc.proc.pid) != "T" and self.rng.random() < 0.6:
            try:
                proc.terminate(60)
            except AssertionError:
                pass  # terminate() killed it
        proc.__exit__(None, None, None)

    def check_alive(self, skip: str | None = None) -> list[str]:
        """Restart every process (but `skip`) that died on its own (a crash is counted and its log named)."""
        crashed = []
        for name, proc in list(self.procs.items()):
            if name != skip and not proc.alive():
                crashed.append(name)
                self.stats["crashes"] += 1
                self.say(f"  {name} exited by itself ({proc.proc.returncode}), see {proc.log_path}")
                self.stop(name)
                self.start(name)
        return crashed

    # --- the table ---------------------------------------------------------------------------------------

    def committed(self) -> int:
        """Sum of committed offsets (from the table's manifest of its txn version), -1 before the first."""
        from connector.app.verify_table import read_committed

        try:
            state = read_committed(str(self.table), self.name)
        except Exception:  # noqa: BLE001 - mid-write or missing manifest: report as no progress
            return -1
        return sum(o or 0 for o in state.offsets.values()) if state.txn_version is not None else -1

    def wait_progress(self, since: int, timeout_s: float = PROGRESS_S) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            if self.committed() > since:
                return True
            time.sleep(1)
        return False

    # --- one fault -----------------------------------------------------------------------------------------

    def fault(self, i: int) -> None:
        step = self.rng.choice(STEPS)
        name = "coordinator" if step.startswith("coordinator.") else self.rng.choice(["worker-a", "worker-b"])
        action = "pause" if self.rng.random() < 0.3 else "kill"
        after = self.rng.choice([1, 1, 2, 3])
        base = self.committed()
        self.stop(name)
        proc = self.start(name, step, action, after)
        began = time.monotonic()
        fired = False
        while time.monotonic() - began < FIRE_S:
            state = process_state(proc.proc.pid)
            if proc.proc.poll() is not None or state == "T":
                fired = proc.proc.poll() in (None, -signal.SIGKILL) and \
                    f"at {step}" in Path(proc.log_path).read_text(errors="replace")
                break
            self.check_alive(skip=name)
            time.sleep(0.2)
        took = time.monotonic() - began
        if action == "pause" and fired:
            time.sleep(self.rng.uniform(2, 8))  # a scheduled pause, then the kill
        proc.kill()
        if not fired:
            self.stats["not_fired"] += 1
            self.say(f"fault {i}: {step} on {name} ({action}, after={after}) did not fire within {took:.0f} s "
                     f"(exit {proc.proc.returncode}); see {proc.log_path}")
        else:
            self.stats["runs"] += 1
        self.stop(name)
        if self.rng.random() < self.args.broker_restart_rate:
            self.say("  broker restart")
            self.kafka.restart()
            self.stats["broker_restarts"] += 1
        self.start(name)
        ok = self.wait_progress(max(base, self.committed()))
        dup = audit(self.table, {})["duplicated"]
        self.stats["max_duplicated_mid"] = max(self.stats["max_duplicated_mid"], dup)
        self.say(f"fault {i}: {step} on {name} ({action}, after={after}) {'fired' if fired else 'NOT fired'} in "
                 f"{took:.0f} s; {'progress' if ok else 'NO PROGRESS'}; rows {len(table_offsets(self.table))} of "
                 f"{sum(self.stream.delivered.values())} produced, duplicated so far {dup}")
        if not ok:
            self.stats["stalls"] += 1
            for n in list(self.procs):
                self.stop(n)
                self.start(n)

    # --- the whole soak ----------------------------------------------------------------------------------

    def run(self) -> int:
        from confluent_kafka.admin import AdminClient

        from connector.local.kafka import LocalKafka

        args = self.args
        (self.work / "logs").mkdir(exist_ok=True)
        self.kafka = LocalKafka(self.work / "kafka", heap="512m").start()
        try:
            admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
            topic = f"soak-{args.seed}"
            create_topic(admin, topic, args.partitions)
            self.config = chaos_config(self.work, self.kafka.bootstrap, topic, name=f"soak-{args.seed}",
                                       **{"transaction.interval.ms": 1500})
            self.name = f"soak-{args.seed}"
            self.table = self.work / "tables" / "events"
            self.say(f"soak: {args.faults} faults, seed {args.seed}, work dir {self.work}, broker {self.kafka.bootstrap}")
            stream = self.stream = Stream(self.kafka.bootstrap, topic, args.partitions, args.rate)
            for name in ("coordinator", "worker-a", "worker-b"):
                self.start(name)
            if not self.wait_progress(-1):
                self.say("no first commit: giving up")
                return 2
            deadline = self.began + args.max_minutes * 60
            for i in range(1, args.faults + 1):
                if time.monotonic() > deadline:
                    self.say(f"--max-minutes {args.max_minutes} reached after {i - 1} faults")
                    break
                self.fault(i)
            stream.stop()
            try:
                stream.join(600)
            except AssertionError as exc:  # the audit takes the records Kafka holds, whatever the producer saw
                self.say(f"producer: {exc}")
            expected = self.expected(topic)
            self.say(f"draining: {sum(len(r) for r in expected.values())} records in Kafka")
            drain_until = time.monotonic() + 600
            result = audit(self.table, expected)
            while time.monotonic() < drain_until and result["missing"]:
                self.check_alive()
                time.sleep(2)
                result = audit(self.table, expected)
            verify = subprocess.run([sys.executable, "-m", "connector", "verify", "--config", str(self.config)],
                                    capture_output=True, text=True, cwd=ROOT, env={**os.environ, "LAKESINK_FAULT": ""})
            self.say(verify.stdout.strip().splitlines()[-1] if verify.stdout.strip() else verify.stderr.strip())
        finally:
            for name in list(self.procs):
                self.stop(name)
            self.kafka.stop()
        lost, duplicated = result["missing"], result["duplicated"]
        minutes = (time.monotonic() - self.began) / 60
        self.say(f"stats: {dict(self.stats)}, producer replaced {self.stream.replaced}x; audit {result}; "
                 f"verify exit {verify.returncode}; {minutes:.1f} min")
        print(f"runs={self.stats['runs']} lost={lost} duplicated={duplicated}", flush=True)
        return 0 if lost == 0 and duplicated == 0 and result["unexpected"] == 0 else 1

    def expected(self, topic: str) -> dict:
        marks = watermarks(self.kafka.bootstrap, topic, self.args.partitions)
        return {(topic, p): range(low, high) for p, (low, high) in marks.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=50, help="faults to inject (default 50)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-minutes", type=float, default=60, help="stop injecting after this long (default 60)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40, help="records per second produced (default 40)")
    parser.add_argument("--broker-restart-rate", type=float, default=0.1, help="chance of a broker restart per fault")
    parser.add_argument("--workdir", help="keep everything here (default: a new temporary directory)")
    args = parser.parse_args(argv)
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
