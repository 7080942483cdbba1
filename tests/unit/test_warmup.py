"""The coordinator's Spark warm-up (coordinator/warmup.py): the session is handed out as soon as it is built, while
the commit path's warm-up still runs; a warm-up that fails costs nothing but a log line; a factory's failure reaches
the coordinator's thread."""
from __future__ import annotations

import logging
import threading

import pytest

from coordinator.warmup import SparkWarmUp


def test_the_session_is_handed_out_while_the_warm_up_still_runs():
    release, warmed = threading.Event(), []

    def warm(session):
        release.wait(30)
        warmed.append(session)

    spark = SparkWarmUp(lambda: "session", warm)
    spark.start()
    assert spark.session() == "session" and warmed == []
    release.set()
    spark._thread.join(30)
    assert warmed == ["session"]


def test_a_failed_warm_up_is_a_log_line(caplog):
    def warm(session):
        raise OSError("no space left on device")

    spark = SparkWarmUp(lambda: "session", warm)
    with caplog.at_level(logging.INFO, logger="coordinator.warmup"):
        spark.start()
        spark._thread.join(30)
    assert spark.session() == "session"
    assert "the commit path was not warmed up: no space left on device" in caplog.text


def test_the_factory_failure_reaches_the_caller_and_nothing_is_warmed():
    warmed = []

    def factory():
        raise RuntimeError("JAVA_HOME is not set")

    spark = SparkWarmUp(factory, warmed.append)
    spark.start()
    with pytest.raises(RuntimeError, match="JAVA_HOME"):
        spark.session()
    assert warmed == []
