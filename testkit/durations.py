"""The suite's time per test file: a pytest plugin that adds up the setup, call and teardown durations of every test
of a file and prints the files that took longest in the terminal summary (pytest's --durations lists single tests).
Reports reach the controlling process from pytest-xdist's workers too, so the totals are the whole run's."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

SHOWN = 20


class FileDurations:
    """Registered by tests/conftest.py; `pytest_runtest_logreport` sees every phase's report once."""

    def __init__(self, shown: int = SHOWN):
        self.shown = shown
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, set[str]] = defaultdict(set)
        self.phases: dict[str, dict[str, float]] = defaultdict(dict)

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] += report.duration
        self.tests[path].add(report.nodeid)
        self.phases[report.nodeid][report.when] = round(report.duration, 2)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.seconds:
            return
        self._write_all()
        slowest = sorted(self.seconds.items(), key=lambda item: item[1], reverse=True)[:self.shown]
        total = sum(self.seconds.values())
        terminalreporter.section(f"slowest {len(slowest)} files (setup + call + teardown of their tests)")
        terminalreporter.write_line(f"{'seconds':>9} {'share':>6} {'tests':>5}  file")
        for path, seconds in slowest:
            terminalreporter.write_line(f"{seconds:9.2f} {seconds / total:6.1%} {len(self.tests[path]):5d}  {path}")
        terminalreporter.write_line(f"{total:9.2f} s in all, {len(self.seconds)} files (the sum of every test's "
                                    f"phases, not wall time)")

    def _write_all(self) -> None:
        """Every test's phases into LAKESINK_DURATIONS_FILE (.cache/test-durations.json unless set)."""
        target = Path(os.environ.get("LAKESINK_DURATIONS_FILE", ".cache/test-durations.json"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(dict(sorted(self.phases.items())), indent=1))
