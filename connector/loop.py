"""The loop every role runs: open, step until asked to stop, and close, also when a step raises."""
from __future__ import annotations

import threading
from typing import Protocol


class Role(Protocol):
    def open(self) -> object: ...

    def step(self) -> None: ...

    def close(self) -> None: ...


def run_until_stopped(role: Role, stop: threading.Event) -> None:
    role.open()
    try:
        while not stop.is_set():
            role.step()
    finally:
        role.close()
