"""The goals' judgement in bench/goals.py, which `make bench` prints on its last lines: a figure beside its goal is
met or not by the right comparison, a figure a step could not give is "not measured" with its reason and never
counted as met, and the last line's count holds only what was measured. (Running the steps themselves is
tests/integration/test_bench_smoke.py's.)"""
from __future__ import annotations

from types import SimpleNamespace

from bench.goals import FULL, Figure, formats_figures, goal_figures, last_line, report, titles


def test_a_figure_is_met_by_its_own_comparison_and_unmeasured_ones_are_neither():
    assert Figure("a", "p99", 1499.0, 1500, at_most=True).met is True
    assert Figure("a", "p99", 1501.0, 1500, at_most=True).met is False
    assert Figure("a", "ratio", 0.8, 0.8).met is True
    assert Figure("a", "ratio", 0.79, 0.8).met is False
    assert Figure("a", "rounds", 3.0).met is None  # no goal: reported only
    unmeasured = Figure("a", "ratio", None, 0.8, why="the step failed")
    assert unmeasured.met is None
    assert unmeasured.text() == "ratio: not measured (the step failed)"
    assert "NOT met" in Figure("a", "ratio", 0.5, 0.8, unit="x").text()


def test_a_failed_format_run_is_not_measured_and_a_failed_baseline_unmeasures_every_format():
    runs = {"formats.json": {"results": {"lakesink": {"e2e_rps": 1000.0}}},
            "formats.avro": {"results": {"lakesink": {"e2e_rps": 900.0}}},
            "formats.protobuf": None}
    figures = {f.label: f for f in formats_figures(runs, ("json", "avro", "protobuf"))}
    assert figures["avro"].value == 0.9 and figures["avro"].met is True
    assert figures["protobuf"].value is None and "formats.protobuf step failed" in figures["protobuf"].why
    without_baseline = formats_figures({**runs, "formats.json": None}, ("json", "avro"))
    assert without_baseline[0].value is None and "formats.json step failed" in without_baseline[0].why


def test_the_last_line_counts_only_measured_goals_and_names_every_figure():
    args = SimpleNamespace(only=["formats", "many-tables"], formats=("json", "avro"), sizes=FULL)
    runs = {"formats.json": {"results": {"lakesink": {"e2e_rps": 1000.0}}},
            "formats.avro": {"results": {"lakesink": {"e2e_rps": 700.0}}},
            "many-tables": {"last_line": last_line("noise\ntables40_rps=90 table1_rps=100 ratio=0.900\n")}}
    lines = report(goal_figures(runs, args), titles(args))
    pairs = last_line("\n".join(lines))
    assert pairs["goals_met"] == "1/2"  # avro 0.70 < 0.8, many tables 0.900 >= 0.8
    assert pairs["ratio_avro"] == "0.70" and pairs["many_tables_ratio"] == "0.900"
    assert any("nested Avro/Protobuf records: not measured" in line for line in lines)
