"""The suite as a designed thing: what test modules share lives in the test kit (testkit/), so a file under tests/
imports the kit and the product, never another module of tests/ (the import contract in pyproject.toml says the same
for the test packages; this covers every file, conftest.py and the root's included)."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imports_of_tests(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import ...")
            elif node.module == "tests" or (node.module or "").startswith("tests."):
                found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name == "tests" or a.name.startswith("tests.")]
    return found


def test_no_file_under_tests_imports_another_test_module():
    offenders = {str(p.relative_to(TESTS.parent)): found for p in sorted(TESTS.rglob("*.py"))
                 if (found := _imports_of_tests(p))}
    assert not offenders, f"test modules importing test modules (move what they share into testkit/): {offenders}"


def test_the_check_sees_each_form_of_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import tests.support\nfrom tests import support\nfrom tests.unit.x import y\nfrom . import z\n"
                      "def f():\n    from tests.chaos import harness\nimport testkit\nfrom testkit.kafka import Stream\n")
    assert [line.split(":")[0] for line in _imports_of_tests(sample)] == ["line 1", "line 2", "line 3", "line 4",
                                                                          "line 6"]
