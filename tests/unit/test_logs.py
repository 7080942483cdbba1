"""connector/observe/logs.py: context on every line, text and JSON, log.level honoured, secrets never written."""
from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from connector.config import config_from_dict
from connector.observe import logs

BASE = {
    "name": "orders-sink",
    "kafka.bootstrap.servers": "127.0.0.1:9092",
    "kafka.topic.names": "orders",
    "target.base.path": "/tmp/tables",
    "target.table.name": "orders",
}


@pytest.fixture
def capture():
    """setup_logging into a buffer; the handler is removed and the context cleared afterwards."""
    installed: list[logging.Handler] = []
    root = logging.getLogger()
    level = root.level

    def setup(**kwargs) -> io.StringIO:
        buffer = io.StringIO()
        installed.append(logs.setup_logging(stream=buffer, **kwargs))
        return buffer

    token = logs._context.set({})
    yield setup
    logs._context.reset(token)
    for handler in installed:
        root.removeHandler(handler)
    root.setLevel(level)
    logs._process.clear()


def test_text_lines_carry_connector_role_epoch_txn_and_partition(capture):
    out = capture(level="INFO", fmt="text", connector="orders-sink")
    logs.bind(role="worker", epoch=3, txn=7)
    with logs.context(tp=logs.tp("orders", 2)):
        logging.getLogger("participant.worker").info("staged %d rows", 10)
    logging.getLogger("participant.worker").info("between partitions")

    first, second = out.getvalue().splitlines()
    assert "INFO participant.worker [connector=orders-sink role=worker epoch=3 txn=7 tp=orders-2] staged 10 rows" \
        in first
    assert "[connector=orders-sink role=worker epoch=3 txn=7] between partitions" in second


def test_json_lines_are_objects_with_the_context_fields(capture):
    out = capture(level="INFO", fmt="json", connector="orders-sink")
    logs.bind(role="coordinator", epoch=2, txn=41)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("coordinator.service").exception("commit failed")

    [line] = out.getvalue().splitlines()
    body = json.loads(line)
    assert body["message"] == "commit failed" and body["level"] == "ERROR"
    assert (body["connector"], body["role"], body["epoch"], body["txn"]) == ("orders-sink", "coordinator", 2, 41)
    assert body["logger"] == "coordinator.service" and body["ts"].endswith("Z")
    assert "ValueError: boom" in body["exception"]
    assert "tp" not in body


def test_log_level_is_honoured(capture):
    out = capture(level="WARNING", fmt="text")
    log = logging.getLogger("participant.worker")
    log.info("not shown")
    log.debug("not shown either")
    log.warning("shown")
    assert [line.split("participant.worker ", 1)[-1] for line in out.getvalue().splitlines()] == ["shown"]


def test_each_thread_has_its_own_context(capture):
    out = capture(level="INFO", fmt="json", connector="c")
    log = logging.getLogger("t")

    def worker() -> None:
        logs.bind(role="worker", epoch=1, txn=1)
        log.info("from the worker")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    log.info("from main")
    bodies = {b["message"]: b for b in map(json.loads, out.getvalue().splitlines())}
    assert bodies["from the worker"]["role"] == "worker"
    assert "role" not in bodies["from main"] and bodies["from main"]["connector"] == "c"


def test_secrets_never_reach_the_log(capture):
    cfg = config_from_dict({**BASE, "consumer.sasl.password": "hunter2-very-secret",
                            "producer.ssl.keystore.password": "ks-pass-123"}, env={})
    buffer = io.StringIO()
    handler = logs.setup_for(cfg)
    handler.setStream(buffer)
    try:
        log = logging.getLogger("connector.app.service")
        log.info("starting with %s", cfg.describe())
        log.info("config object %r", cfg)
        log.error("connection failed: sasl.password=hunter2-very-secret rejected (ks-pass-123)")
    finally:
        logging.getLogger().removeHandler(handler)
    text = buffer.getvalue()
    assert "hunter2-very-secret" not in text and "ks-pass-123" not in text
    assert text.count(logs.REDACTED) >= 4
    assert "[connector=orders-sink]" in text


def test_setup_for_reads_format_and_level_from_the_config(capture):
    cfg = config_from_dict({**BASE, "log.format": "json", "log.level": "DEBUG"}, env={})
    buffer = io.StringIO()
    handler = logs.setup_for(cfg)
    handler.setStream(buffer)
    try:
        logging.getLogger("x").debug("debug line")
    finally:
        logging.getLogger().removeHandler(handler)
    assert json.loads(buffer.getvalue())["message"] == "debug line"
    assert isinstance(handler.formatter, logs.JsonFormatter) and logging.getLogger().level == logging.DEBUG


def test_setting_up_twice_keeps_one_handler(capture):
    first = capture(level="INFO", fmt="text")
    second = capture(level="INFO", fmt="text")
    logging.getLogger("x").info("once")
    assert first.getvalue() == "" and second.getvalue().count("once") == 1
