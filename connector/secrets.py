"""No secret leaves the process in clear: one scrubber that every output runs its text through.

`connector.config.is_secret` says which keys hold secrets, and `LakesinkConfig.secrets()` returns their values.
`protect(cfg)` adds those values to the process's scrubber, which the outputs use: log lines
(connector/observe/logs.py), the PROGRESS and COMMIT_FAILED messages of the control topic
(connector/protocol/channel.py), `/metrics` and `/health` (connector/observe/metrics.py), `lakesink status`, `verify`
and `validate`, and the command line's error line.

There is one scrubber per process, as there is one log handler: text reaches the outputs from every role and
thread, often as an exception a client library built from the configuration, so a value known to be secret is
replaced wherever it turns up rather than only where the code expects it.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import quote

REDACTED = "******"

MIN_LENGTH = 3
"""Values shorter than this are not replaced in free text: every `1` or `ab` of every line would go, and a value
that short protects nothing (a few thousand guesses find it). They are still masked wherever their key is shown
(`LakesinkConfig.describe()`), and `connector.observe.logs.setup_for` warns about them."""


class HasSecrets(Protocol):
    def secrets(self) -> tuple[str, ...]: ...


class Scrubber:
    """Replaces known secret values by ******, in each form they take in text: as they are, inside a JSON string
    (quotes and backslashes escaped), inside a Python repr, and URL-encoded."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._forms: tuple[str, ...] = ()
        self.add(values)

    def add(self, values: Iterable[str]) -> "Scrubber":
        """Scrub these values too, from now on (values shorter than MIN_LENGTH are ignored)."""
        with self._lock:
            new = {v for v in values if isinstance(v, str) and len(v) >= MIN_LENGTH} - self._values
            if new:
                self._values |= new
                forms = set(self._forms).union(*(_forms(v) for v in new))
                # Longest first, so that a secret containing another is replaced whole.
                self._forms = tuple(sorted(forms, key=len, reverse=True))
        return self

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def text(self, text: str) -> str:
        """`text` with every form of every known secret replaced by ******."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def data(self, value: Any) -> Any:
        """A JSON-like value (dicts, lists, tuples, strings, numbers) with every string in it scrubbed."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.data(v) for v in value)
        return value


def _forms(value: str) -> set[str]:
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1],
            quote(value, safe="")}


_PROCESS = Scrubber()


def protect(cfg: HasSecrets) -> Scrubber:
    """Add a configuration's secret values to the process's scrubber (idempotent); returns that scrubber."""
    return _PROCESS.add(cfg.secrets())


def protect_values(values: Iterable[str]) -> Scrubber:
    """Add values to the process's scrubber, for callers holding secrets outside a configuration."""
    return _PROCESS.add(values)


def scrub(text: str) -> str:
    """`text` without any secret value this process knows of."""
    return _PROCESS.text(text)


def scrub_data(value: Any) -> Any:
    """A JSON-like value without any secret value this process knows of, in any of its strings."""
    return _PROCESS.data(value)
