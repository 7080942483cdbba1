"""A SIGTERM stops lakesink whichever of its threads the kernel hands it to (connector/app/service.py)."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, signal, sys, threading, time
logging.basicConfig(level=logging.INFO)
from connector.app.roles import Roles
from connector.app.service import install_signal_handlers

roles = Roles()
install_signal_handlers(roles.stop)
started = threading.Event()

def loop(stop):
    started.set()
    while not stop.is_set():
        time.sleep(0.01)

roles.add("worker", loop)
role_thread = roles._threads[0]

def deliver():
    started.wait(10)
    time.sleep(0.3)
    signal.pthread_kill(role_thread.ident, signal.SIGTERM)  # to the role's thread, not the main one

threading.Thread(target=deliver, daemon=True).start()
roles.run(None, shutdown_timeout_s=5)
print("stopped", roles.stuck)
"""


def test_a_sigterm_delivered_to_a_role_thread_stops_the_process():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "stopped []" in done.stdout, done.stdout + done.stderr
    assert "received SIGTERM: stopping" in done.stderr
