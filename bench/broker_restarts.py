"""A single broker restarted again and again under a worker: does the worker hold its partitions again every time?

    .venv/bin/python bench/broker_restarts.py --cycles 12

Starts its own Kafka broker (connector.local.kafka) in a temporary directory, and one Worker in this process
(no coordinator: a worker joins its group and holds partitions without one). Each cycle stops the broker for
longer than the consumer session, starts it again and times how long the worker takes to hold partitions again.
Its consumers run with `debug=cgrp,metadata` and a metadata refresh every 20 ms, so that some Metadata response
falls in the moment a broker shutting down lists no broker: a client that takes it has lost every broker
(docs/ARCHITECTURE.md, "Kafka clients cut off by a broker's restart"). Prints a line per cycle, then

    cycles=N recovered=R cut_off_responses=C consumers_replaced=K

where C counts the Metadata responses of no broker that the worker's clients took (from their debug log). Exit 0
only when every cycle recovered. Not collected by pytest (bench/).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from connector.config import load_config  # noqa: E402
from connector.local.kafka import LocalKafka  # noqa: E402
from participant.worker import Worker  # noqa: E402
from testkit import chaos_config  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=12)
    p.add_argument("--down-s", type=float, default=8.0, help="how long the broker stays down (session: 6 s)")
    p.add_argument("--hold-timeout-s", type=float, default=120.0)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lakesink-broker-restarts-"))
    debug_log = root / "librdkafka.log"
    # librdkafka's debug lines go to stderr: into a file, to count the cut-off responses after the run
    saved_stderr = os.dup(2)
    os.dup2(os.open(debug_log, os.O_WRONLY | os.O_CREAT, 0o644), 2)
    broker = LocalKafka(root / "kafka").start()
    stop = threading.Event()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        topic = f"restarts-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        cfg = load_config(chaos_config(root, bootstrap, topic, **{
            "consumer.debug": "cgrp,metadata", "consumer.topic.metadata.refresh.interval.ms": 20}))
        worker = Worker(cfg, worker_id="restarts").open()
        thread = threading.Thread(target=_step, args=(worker, stop), daemon=True)
        thread.start()
        _holds(worker, args.hold_timeout_s)
        recovered = 0
        for cycle in range(args.cycles):
            broker.stop()
            time.sleep(args.down_s)
            broker.start()
            took = _holds(worker, args.hold_timeout_s)
            shown = "never" if took is None else f"{took:.1f} s"
            print(f"cycle {cycle}: holds partitions again after {shown} (consumers replaced so far: "
                  f"{worker.stats.consumers_replaced})", file=sys.stdout, flush=True)
            if took is None:
                break
            recovered += 1
        stop.set()
        thread.join(5)
        worker.close()
    finally:
        stop.set()
        broker.stop()
        os.dup2(saved_stderr, 2)
    cut_offs = sum(1 for line in debug_log.read_text(errors="replace").splitlines() if line.endswith(": 0 brokers, 1 topics"))
    print(f"cycles={args.cycles} recovered={recovered} cut_off_responses={cut_offs} "
          f"consumers_replaced={worker.stats.consumers_replaced}")
    return 0 if recovered == args.cycles else 1


def _step(worker: Worker, stop: threading.Event) -> None:
    while not stop.is_set():
        worker.step(0.05)


def _holds(worker: Worker, timeout_s: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if worker.runners:
            return time.monotonic() - began
        time.sleep(0.1)
    return None


if __name__ == "__main__":
    sys.exit(main())
