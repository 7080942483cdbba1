"""The steady mode of bench/many_tables.py, its pure parts: how the paced records spread over a layout's topics and
partitions (and so what each table must hold at the end), a measured window's committed rate, and the produce ->
visible figures of many tables (over all records, and each table's p99: the worst and the median). (Running the
bench is tests/integration/test_bench_smoke.py's.)"""
from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from bench.harness import Version
from bench.many_tables import Layout, committed_rps, latencies_ms, visibility


def _layout(topics: int, partitions: int) -> Layout:
    return Layout("tables", "mt", [f"t{i}" for i in range(topics)], partitions, 0, True)


def test_the_paced_records_go_evenly_over_every_partition_of_every_topic():
    layout = _layout(3, 4)
    sent = Counter((layout.topics[i % 3], layout.record(i, 0)[2]) for i in range(3 * 4 * 5))  # PacedProducer's topic
    assert sent == {(topic, partition): 5 for topic in layout.topics for partition in range(4)}
    one = _layout(1, 12)
    assert Counter(one.record(i, 0)[2] for i in range(60)) == {p: 5 for p in range(12)}


def test_what_each_topic_was_sent_counts_the_records_round_robin():
    layout = _layout(3, 4)
    assert layout.produced(0) == {"t0": 0, "t1": 0, "t2": 0}
    assert layout.produced(7) == {"t0": 3, "t1": 2, "t2": 2}
    assert layout.produced(7) == dict(Counter(layout.topics[i % 3] for i in range(7)))


def test_each_record_carries_its_produce_time_and_a_unique_id():
    value, key, _ = _layout(2, 1).record(41, 1_700_000_000_123)
    assert b'"id":41,' in value and b'"ts":1700000000123,' in value and key == b"41"


def test_the_committed_rate_counts_the_commits_visible_within_the_window():
    versions = [Version(0, 99.9, 500, []), Version(1, 100.0, 200, []), Version(2, 105.0, 300, []),
                Version(3, 110.0, 400, [])]
    assert committed_rps(versions, (100.0, 110.0)) == 50.0  # 200 + 300: the one at the window's end is after it


def test_visibility_over_all_records_and_each_tables_p99():
    latencies = {"a": [float(x) for x in range(1, 101)], "b": [float(x) for x in range(1001, 1101)],
                 "c": [500.0] * 100, "idle": []}
    v = visibility(latencies)
    assert v.records == 300
    assert v.table_p99_ms == {"a": 99.0, "b": 1099.0, "c": 500.0}  # a table without measured records is left out
    assert v.table_p99_max_ms == 1099.0 and v.worst_table == "b"
    assert v.table_p99_median_ms == 500.0
    assert v.p50_ms == 500.0 and v.p99_ms == 1097.0 and v.max_ms == 1100.0


def test_visibility_of_nothing_measured_is_none():
    v = visibility({"a": []})
    assert (v.records, v.p50_ms, v.p99_ms, v.max_ms, v.table_p99_max_ms, v.table_p99_median_ms, v.worst_table) \
        == (0, None, None, None, None, None, None)


def test_latencies_are_each_versions_visible_time_less_each_records_ts_from_the_window_on(tmp_path):
    (tmp_path / "part=x y").mkdir()
    pq.write_table(pa.table({"ts": [1000, 2000, 3000]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"ts": [2500]}), tmp_path / "part=x y" / "b.parquet")
    pq.write_table(pa.table({"ts": [4000]}), tmp_path / "c.parquet")
    versions = [Version(0, 3.5, 4, ["a.parquet", "part%3Dx%20y/b.parquet"]), Version(1, 4.25, 1, ["c.parquet"])]
    assert sorted(latencies_ms(tmp_path, versions, since_ms=2000)) == [250.0, 500.0, 1000.0, 1500.0]


def test_a_layouts_report_ends_with_the_first_error_lines_of_its_log():
    from bench.many_tables import Result, _end_lines

    result = Result(_layout(2, 1), 0.0, log_levels=Counter({"ERROR": 2, "WARNING": 1}),
                    errors=["12:00:01 ERROR coordinator: a", "12:00:02 ERROR worker: b"])
    lines = _end_lines(result)
    assert "1 WARNING" in lines[1] and "2 ERROR" in lines[1]
    assert [line.strip() for line in lines[2:]] == result.errors
    assert len(_end_lines(Result(_layout(2, 1), 0.0))) == 2


def test_a_logs_levels_are_counted_by_line_and_its_first_errors_kept_from_lakesinks_own_log_lines():
    import io
    import logging

    from bench.many_tables import ERRORS_SHOWN, log_levels
    from connector.observe.logs import ContextFilter, TextFormatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)  # lakesink's text lines, on a logger of the test's own
    handler.addFilter(ContextFilter())
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("bench.test.log_levels")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("an INFO line that names ERROR and WARNING in its text")
        logger.warning("a WARNING")
        for n in range(ERRORS_SHOWN + 1):
            logger.error("error %d", n)
        logger.critical("the end")
    finally:
        logger.removeHandler(handler)
    levels, errors = log_levels(out.getvalue() + "26/11/30 19:48:18 WARN Utils: Spark's own level names\n")
    assert levels == Counter({"WARNING": 1, "ERROR": ERRORS_SHOWN + 1, "CRITICAL": 1})
    assert [line.rsplit(" ", 1)[-1] for line in errors] == [str(n) for n in range(ERRORS_SHOWN)]
