"""`lakesink demo --cdc` without Java or without PostgreSQL's server programs: one line saying what to install, exit
code 1, before anything starts (no demo folder made)."""
from __future__ import annotations

import os
import shutil

from connector.app import cli
from connector.local import postgres


def _demo(capsys) -> tuple[int, list[str]]:
    code = cli.main(["demo", "--cdc", "--seconds", "1"])
    err = capsys.readouterr().err
    return code, err.strip().splitlines()


def test_without_java_the_cdc_demo_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LAKESINK_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    code, lines = _demo(capsys)
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("lakesink: Java 17 or newer is not on PATH: install OpenJDK 17"), lines
    assert not (tmp_path / "demo").exists()


def test_without_postgresql_the_cdc_demo_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    java = shutil.which("java", path=os.environ.get("JAVA_HOME", "") + "/bin:" + os.environ["PATH"])
    assert java, "this test needs Java, to get past its check"
    monkeypatch.setenv("LAKESINK_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", os.path.dirname(os.path.realpath(java)))
    monkeypatch.setattr(postgres, "DEBIAN_ROOT", tmp_path / "no-postgresql")
    code, lines = _demo(capsys)
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith(
        "lakesink: PostgreSQL's server programs (initdb, pg_ctl) were not found: install Debian's `postgresql` "
        "package"), lines
    assert not (tmp_path / "demo").exists()
