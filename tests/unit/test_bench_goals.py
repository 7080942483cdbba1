"""The goals' judgement in bench/goals.py, which `make bench` prints on its last lines: a figure beside its goal is
met or not by the right comparison, a figure a step could not give is "not measured" with its reason and never
counted as met, and the last line's count holds only what was measured. (Running the steps themselves is
tests/integration/test_bench_smoke.py's.)"""
from __future__ import annotations

from types import SimpleNamespace

from bench.goals import (FULL, Figure, formats_figures, goal_figures, last_line, many_tables_figures, parse_args, step_argv,
                         report, steps, titles, upsert_figures)


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


def test_nested_rows_are_measured_against_plain_json_of_the_nested_rows():
    runs = {"formats.json": {"results": {"lakesink": {"e2e_rps": 1000.0}}},
            "formats.json@nested": {"results": {"lakesink": {"e2e_rps": 500.0}}},
            "formats.avro@nested": {"results": {"lakesink": {"e2e_rps": 450.0}}},
            "formats.protobuf@nested": None}
    figures = {f.key: f for f in formats_figures(runs, ("json", "json@nested", "avro@nested", "protobuf@nested"))}
    assert set(figures) == {"ratio_avro_nested", "ratio_protobuf_nested"}  # the baselines are no figures
    assert figures["ratio_avro_nested"].value == 0.9 and figures["ratio_avro_nested"].label == \
        "avro@nested x json@nested"
    assert figures["ratio_protobuf_nested"].value is None
    without_baseline = formats_figures({**runs, "formats.json@nested": None}, ("json", "json@nested", "avro@nested"))
    assert without_baseline[0].value is None and "formats.json@nested step failed" in without_baseline[0].why
    args = parse_args(["--only", "formats", "--formats", "avro@nested"])
    assert args.formats == ("json", "json@nested", "avro@nested")  # each run's baseline runs with it
    plan = steps(args)
    assert [step.argv[-2:] for step in plan] == [("--shape", "flat"), ("--shape", "flat"), ("--shape", "nested"),
                                                 ("--shape", "nested")]
    assert plan[0].name == "formats.warm-up" and "formats.warm-up" not in {f"formats.{name}" for name in args.formats}


def test_a_warm_up_run_of_plain_json_goes_first_and_is_no_figure():
    """The first step of a run met a cold machine (in one run flat JSON's first commit took 9.1 s against 5.0 s for
    the Avro run after it, and the ratios of the formats to it were overstated); the warm-up takes that."""
    plan = steps(parse_args(["--only", "formats,visibility"]))
    assert [step.name for step in plan][:3] == ["formats.warm-up", "formats.json", "formats.avro"]
    assert plan[0].argv[plan[0].argv.index("--records") + 1] == str(parse_args([]).sizes.formats_records // 5)
    runs = {"formats.warm-up": {"results": {"lakesink": {"e2e_rps": 10.0}}},
            "formats.json": {"results": {"lakesink": {"e2e_rps": 1000.0}}},
            "formats.avro": {"results": {"lakesink": {"e2e_rps": 900.0}}}}
    assert [(f.key, f.value) for f in formats_figures(runs, ("json", "avro"))] == [("ratio_avro", 0.9)]
    assert not any(step.name == "formats.warm-up" for step in steps(parse_args(["--only", "visibility"])))


def test_the_last_line_counts_only_measured_goals_and_names_every_figure():
    args = SimpleNamespace(only=["formats", "many-tables"], formats=("json", "avro"), sizes=FULL)
    runs = {"formats.json": {"results": {"lakesink": {"e2e_rps": 1000.0}}},
            "formats.avro": {"results": {"lakesink": {"e2e_rps": 700.0}}},
            "many-tables": {"last_line": last_line(
                "noise\nsteady_ratio=0.900 tables40_steady_rps=4500 table1_steady_rps=5000 tables40_p99_ms=2400 "
                "tables40_table_p99_max_ms=2950 tables40_table_p99_median_ms=2300 table1_p99_ms=2100\n")}}
    lines = report(goal_figures(runs, args), titles(args))
    pairs = last_line("\n".join(lines))
    assert pairs["goals_met"] == "1/2"  # avro 0.70 < 0.8, many tables 0.900 >= 0.8; the p99s are not goals
    assert pairs["ratio_avro"] == "0.70" and pairs["many_tables_ratio"] == "0.900"
    assert pairs["many_tables_table_p99_max_ms"] == "2950" and pairs["many_tables_table1_p99_ms"] == "2100"
    assert any("p99 visibility of the worst table 2,950 ms" in line and "goal" not in line for line in lines)


def test_many_tables_judges_the_steady_ratio_and_reports_each_p99_without_a_goal():
    line = last_line("steady_ratio=0.790 tables40_steady_rps=3950 table1_steady_rps=5000 "
                     "tables40_table_p99_max_ms=4100 tables40_table_p99_median_ms=n/a table1_p99_ms=1900")
    figures = {f.key: f for f in many_tables_figures({"last_line": line}, 40)}
    assert figures["many_tables_ratio"].value == 0.79 and figures["many_tables_ratio"].met is False
    assert figures["many_tables_table_p99_max_ms"].value == 4100 and figures["many_tables_table_p99_max_ms"].met is None
    assert figures["many_tables_table1_p99_ms"].value == 1900
    assert figures["many_tables_table_p99_median_ms"].value is None  # n/a: not measured, and never met
    backlog = {f.key: f for f in many_tables_figures({"last_line": last_line("ratio=0.95 tables40_rps=1")}, 40)}
    assert backlog["many_tables_ratio"].value is None  # a backlog run's ratio is not the steady one
    failed = many_tables_figures(None, 40)
    assert all(f.value is None and "many-tables step failed" in f.why for f in failed)


UPSERT_LINE = ("upsert lakesink_cps=21891 baseline_cps=27963 ratio={cold} lakesink_p50_ms=45700 baseline_p50_ms=35800 "
               "check=lakesink:ok,baseline:ok lakesink_stream_cps=28730 baseline_stream_cps=23591 stream_ratio={warm} "
               "lakesink_stream_p50_ms=21100 baseline_stream_p50_ms=29200 lakesink_stream_p99_ms=29900 "
               "baseline_stream_p99_ms=39200 envelope={envelope}")


def test_the_upsert_goal_runs_the_changelog_plain_and_as_debezium_events_at_the_same_sizes():
    plain, debezium = steps(parse_args(["--only", "upsert"]))
    assert (plain.name, plain.goal, debezium.name, debezium.goal) == ("upsert", "upsert", "upsert-debezium", "upsert")

    def options(step):
        return dict(zip(step.argv[::2], step.argv[1::2]))
    assert options(plain)["--envelope"] == "none" and options(debezium)["--envelope"] == "debezium"
    sizes = {k: v for k, v in options(plain).items() if k != "--envelope"}
    assert sizes == {k: v for k, v in options(debezium).items() if k != "--envelope"}
    assert sizes["--rows"] == "10000000" and sizes["--stream-rate"] == "50000"


def test_the_upsert_figures_are_each_changelogs_ratios_and_a_failed_step_unmeasures_only_its_own():
    plain = {"last_line": last_line(UPSERT_LINE.format(cold="0.783", warm="1.218", envelope="none"))}
    debezium = {"last_line": last_line(UPSERT_LINE.format(cold="1.050", warm="n/a", envelope="debezium"))}
    figures = {f.key: f for f in upsert_figures(plain, debezium)}
    assert list(figures) == ["upsert_warm_ratio", "upsert_cold_ratio", "upsert_debezium_warm_ratio",
                             "upsert_debezium_cold_ratio"]
    assert figures["upsert_warm_ratio"].value == 1.218 and figures["upsert_warm_ratio"].met is False  # goal >= 2
    assert figures["upsert_cold_ratio"].value == 0.783 and figures["upsert_cold_ratio"].met is False  # goal >= 1
    assert figures["upsert_debezium_cold_ratio"].value == 1.05 and figures["upsert_debezium_cold_ratio"].met is True
    unmeasured = figures["upsert_debezium_warm_ratio"]  # n/a: the baseline did not run
    assert unmeasured.value is None and unmeasured.met is None and "--no-sss" in unmeasured.why
    assert unmeasured.text().startswith("Debezium events: warm (stream) x foreachBatch + MERGE: not measured")
    failed = {f.key: f for f in upsert_figures(plain, None)}
    assert failed["upsert_warm_ratio"].value == 1.218
    assert all(failed[k].value is None and "upsert-debezium step failed" in failed[k].why
               for k in ("upsert_debezium_warm_ratio", "upsert_debezium_cold_ratio"))
    args = parse_args(["--only", "upsert"])
    pairs = last_line("\n".join(report(goal_figures({"upsert": plain, "upsert-debezium": debezium}, args),
                                       titles(args))))
    assert pairs["goals_met"] == "1/3" and pairs["upsert_debezium_warm_ratio"] == "n/a"
    assert pairs["upsert_debezium_cold_ratio"] == "1.05"


def test_the_many_tables_step_runs_on_a_broker_of_its_own_unless_one_is_given():
    plan = {step.name: step for step in steps(parse_args([]))}
    assert [name for name, step in plan.items() if step.own_broker] == ["many-tables"]
    assert "--bootstrap" not in step_argv(plan["many-tables"], "127.0.0.1:9092")
    assert step_argv(plan["append"], "127.0.0.1:9092")[2:4] == ["--bootstrap", "127.0.0.1:9092"]
    given = {step.name: step for step in steps(parse_args(["--bootstrap", "127.0.0.1:9092"]))}
    assert not any(step.own_broker for step in given.values())
    assert step_argv(given["many-tables"], "127.0.0.1:9092")[2:4] == ["--bootstrap", "127.0.0.1:9092"]
