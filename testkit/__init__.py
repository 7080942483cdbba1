"""The test kit: every piece of test code that more than one test module (or bench/) uses; a test module imports the
kit and the product, never another test module (tests/unit/test_suite_imports.py). What tests/ and bench/ share to
drive real brokers, lakesink processes and audit tables is exported here: topics and a steady producer (kafka.py), a
lakesink process and its properties file (process.py), a table's source coordinates and the exactly-once audit
(table.py), and waits with deadlines (waiting.py). The tests' own pieces are imported from their modules: in-process
pipelines (pipeline.py), tables read back (readback.py), the registry's (registry.py, registry_values.py,
registry_faults.py), the keyed rules' (keyed_fold.py, keyed_rules.py), the chaos tests' processes (chaos.py) and more.
It imports neither tests/ nor bench/, and the product never imports it (the contracts in pyproject.toml)."""
from testkit.kafka import Stream, create_topic, watermarks
from testkit.process import LakesinkProcess, chaos_config, pipeline_config, process_state, s3_settings
from testkit.table import audit, exactly_once, files_in_flight, lakesink_commits, open_table, table_offsets, table_store
from testkit.waiting import DRAIN_S, wait_until

__all__ = ["DRAIN_S", "LakesinkProcess", "Stream", "audit", "chaos_config", "create_topic", "exactly_once",
           "files_in_flight", "lakesink_commits", "open_table", "pipeline_config", "process_state", "s3_settings",
           "table_offsets", "table_store", "wait_until", "watermarks"]
