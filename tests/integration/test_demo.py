"""`lakesink demo` (what `make demo` runs): a local broker, sample events, a Delta table, exactly once, and output
that is lakesink's own lines; Kafka's, Spark's and the JVM's go to a file it names."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_demo_sinks_exactly_once_and_prints_only_its_own_lines():
    out = subprocess.run([sys.executable, "-m", "connector", "demo", "--records", "3000", "--partitions", "2"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "LAKESINK_FAULT": ""})
    assert out.returncode == 0, f"demo exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    assert "rows: 3000 (produced 3000; distinct source offsets 3000)" in out.stdout, out.stdout
    assert "exactly once: every produced record is in the table once" in out.stdout
    noise = [line for line in (out.stdout + out.stderr).splitlines()
             if re.search(r"^%\d\||\bWARN\b|log4j|Setting default log level|py4j|NativeCodeLoader", line)]
    assert not noise, "third-party output on the console:\n" + "\n".join(noise[:10])
    [named] = re.findall(r"own output: (\S+\.log)\)", out.stdout)
    assert "Spark" in Path(named).read_text(errors="replace"), "Spark's output went to the named file"
