"""Logging set up in one place: every line carries connector, table (of a connector that writes several), role,
epoch, txn and topic-partition where known.

The roles bind what they know with `bind(...)` (for the rest of their thread) or `context(...)` (for a block);
the values live in a ContextVar, so each role's thread has its own. `setup_logging` installs one handler on the
root logger with `ContextFilter` and a text or JSON formatter; every line goes through the process's secret
scrubber (connector/secrets.py), so no secret value of the configuration is ever written.
"""
from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import IO, Any

from connector import secrets

FIELDS = ("connector", "table", "role", "epoch", "txn", "tp")
REDACTED = secrets.REDACTED

_context: ContextVar[dict[str, Any]] = ContextVar("lakesink_log_context", default={})
_process: dict[str, Any] = {}


def bind(**fields: Any) -> None:
    """Set context fields for the rest of this thread (or task); a None value removes the field."""
    merged = {**_context.get(), **fields}
    _context.set({k: v for k, v in merged.items() if v is not None})


@contextlib.contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Context fields for a block only."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def current() -> dict[str, Any]:
    """The context fields a log line written here would carry."""
    return {**_process, **_context.get()}


def tp(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class ContextFilter(logging.Filter):
    """Puts the context fields on every record (as attributes; missing ones are None)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = current()
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name))
        return True


class TextFormatter(logging.Formatter):
    """`2026-01-01 12:00:00,000 INFO participant.worker [connector=c role=worker epoch=2 txn=7 tp=t-0] message`"""

    def __init__(self) -> None:
        super().__init__(fmt="%(asctime)s %(levelname)s %(name)s %(lakesink_context)s%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        shown = " ".join(f"{n}={getattr(record, n)}" for n in FIELDS if getattr(record, n, None) is not None)
        record.lakesink_context = f"[{shown}] " if shown else ""
        return secrets.scrub(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, thread, message, the context fields, exception text."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                body[name] = value
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            body["stack"] = self.formatStack(record.stack_info)
        return secrets.scrub(json.dumps(body, default=str, ensure_ascii=False))


_HANDLER_MARK = "_lakesink_handler"


def setup_logging(level: str = "INFO", fmt: str = "text", connector: str | None = None,
                  secret_values: Iterable[str] = (), stream: IO[str] | None = None) -> logging.Handler:
    """Install the one lakesink handler on the root logger (replacing an earlier one); returns it.
    `secret_values` join the process's scrubber, which every line goes through."""
    secrets.protect_values(secret_values)
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _HANDLER_MARK, False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper())
    _process.clear()
    if connector is not None:
        _process["connector"] = connector
    # a line per JVM call or connection (py4j), per schema-registry request (httpx, httpcore)
    for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return handler


def setup_for(cfg: Any, verbose: bool = False) -> logging.Handler:
    """setup_logging from a LakesinkConfig's log.format and log.level (`-v` forces DEBUG), its secrets scrubbed
    from every line; warns of secret values too short to be scrubbed from free text."""
    secrets.protect(cfg)
    handler = setup_logging("DEBUG" if verbose else cfg.log_level, cfg.log_format, cfg.name)
    short = sorted(key for key, value in cfg.secret_properties().items() if len(value) < secrets.MIN_LENGTH)
    if short:
        logging.getLogger(__name__).warning(
            "%s: shorter than %d characters, so masked where the key is shown but not replaced in other text "
            "(an exception echoing it, say); use a longer secret", ", ".join(short), secrets.MIN_LENGTH)
    return handler
