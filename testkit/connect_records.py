"""Kafka Connect records as Kafka's own JsonConverter writes them, with what every value means: the reference input of
the Connect-JSON tests (testkit/java/io/lakesink/testkit/ConnectRecords.java says what the records are).

The Java helper is compiled once with javac against Kafka's connect-json and connect-api (a bundle resolved from Maven
Central with Maven, as connector/jvm/jars.py resolves every bundle) into the cache, rebuilt when its source changes:
`make test` builds it before the suite (`make testkit`), and a test run without it builds it on first use. `records()` runs
it and returns its records; `delta_value()` maps a value's meaning to the value the documented Delta type holds
(docs/configuration.md, "Types"), as Spark and delta-rs read it back."""
from __future__ import annotations

import base64
import datetime as dt
import fcntl
import functools
import hashlib
import json
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from connector.app.mirror_check import arrow_rows, same  # noqa: F401 - the tests read tables and compare values with them
from connector.jvm import jars

CONNECT_JSON_BUNDLE = jars.Bundle(
    f"connect-json-{jars.KAFKA_VERSION}",
    (jars.Artifact("org.apache.kafka", "connect-json", jars.KAFKA_VERSION),
     jars.Artifact("org.apache.kafka", "connect-api", jars.KAFKA_VERSION)),
)
SOURCE = Path(__file__).resolve().parent / "java"
MAIN = "io.lakesink.testkit.ConnectRecords"
SCENARIOS = ("append", "debezium")


@dataclass(frozen=True)
class ConnectRecord:
    """One record the helper wrote: `value` with schemas.enable=true and decimal.format=BASE64 (the converter's
    defaults but schemas), `numeric` the same with decimal.format=NUMERIC, `plain` with schemas.enable=false; `expect`
    the meaning of each field of the row (None: no row); `bad` the field a decoder must refuse."""

    set: str
    id: int
    key: bytes | None
    value: bytes | None
    numeric: bytes | None
    plain: bytes | None
    expect: dict[str, Any] | None
    bad: str | None = None
    op: str | None = None
    lsn: int | None = None


def helper_classpath() -> list[Path]:
    """The helper's classes folder and its jars: fetched and compiled once (under a lock: test workers may ask at once),
    again when the source changes."""
    sources = sorted(SOURCE.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    root = jars.cache_root() / "jars"
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"lakesink-connect-records-{digest}"
    with open(root / ".connect-records.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        classpath = jars.resolve(CONNECT_JSON_BUNDLE)
        if not (target / ".complete").exists():
            javac = shutil.which("javac", path=jars._java_path())
            if not javac:
                raise RuntimeError("javac (a JDK 17) is needed to build the test kit's Connect records helper")
            if target.exists():
                shutil.rmtree(target)
            (target / "classes").mkdir(parents=True)
            proc = subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(target / "classes"), "-cp",
                                   os.pathsep.join(map(str, classpath)), *map(str, sources)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"compiling {MAIN} failed: {(proc.stdout + proc.stderr).strip()[-2000:]}")
            (target / ".complete").write_text("ok\n")
    return [target / "classes", *classpath]


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


@functools.cache
def records(scenario: str) -> tuple[ConnectRecord, ...]:
    """The records of `scenario` ("append": the base rows under a schema without maps (set "flat") and with maps
    ("full"), floating-point specials ("special"), and one record a decoder must refuse; "debezium": PostgreSQL
    change events), in order."""
    if scenario not in SCENARIOS:
        raise ValueError(f"no scenario {scenario!r}: one of {SCENARIOS}")
    java = jars.require_java()
    proc = subprocess.run([java, "-cp", os.pathsep.join(map(str, helper_classpath())), MAIN, scenario],
                          capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{MAIN} {scenario} failed: {proc.stderr.decode(errors='replace').strip()[-2000:]}")
    out = []
    for line in proc.stdout.decode("utf-8").split("\n")[:-1]:  # one record a line (U+2028 is no line break here)
        r = json.loads(line)
        out.append(ConnectRecord(r["set"], r["id"], _bytes(r["key"]), _bytes(r["value"]), _bytes(r["numeric"]),
                                 _bytes(r["plain"]), r["expect"], r.get("bad"), r.get("op"), r.get("lsn")))
    return tuple(out)


# --- what a meaning is in the table ---------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1)
_UTC = dt.timezone.utc


def _micros(seconds: int, nanos: int) -> int:
    """Microseconds since the epoch, nanoseconds floored (docs/configuration.md, "Types")."""
    return seconds * 1_000_000 + nanos // 1_000


def delta_value(meaning: Any) -> Any:
    """The value a meaning's documented Delta type holds, as Python holds what Spark and delta-rs read: decimals as
    Decimal, dates as date, instants (`timestamp`) as UTC datetimes, local date-times (`timestamp_ntz`) as naive
    ones, times of day (Delta has none) as `HH:MM:SS.ffffff` text, binary as bytes, maps as dicts."""
    if meaning is None:
        return None
    kind, *parts = meaning
    if kind in ("int", "boolean", "string", "zoned_time"):
        return parts[0]
    if kind == "float32":
        return struct.unpack("<f", struct.pack("<i", parts[0]))[0]
    if kind == "float64":
        return struct.unpack("<d", struct.pack("<q", parts[0]))[0]
    if kind == "bytes":
        return base64.b64decode(parts[0])
    if kind == "decimal":
        return Decimal(f"{parts[0]}E{-parts[1]}")  # exact (scaleb would round to the context's 28 digits)
    if kind == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=parts[0])
    if kind == "time":
        micros = parts[0] // 1_000
        seconds, fraction = divmod(micros, 1_000_000)
        return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"
    if kind == "instant":
        return dt.datetime(1970, 1, 1, tzinfo=_UTC) + dt.timedelta(microseconds=_micros(*parts))
    if kind == "local":
        return _EPOCH + dt.timedelta(microseconds=_micros(*parts))
    if kind == "duration":
        return _micros(*parts)
    if kind == "list":
        return [delta_value(item) for item in parts[0]]
    if kind == "map":
        return {delta_value(k): delta_value(v) for k, v in parts[0]}
    if kind == "struct":
        return {name: delta_value(v) for name, v in parts[0].items()}
    raise ValueError(f"no meaning {kind!r}")


def expected_row(record: ConnectRecord) -> dict[str, Any]:
    """The row a record's values must be in the table (every field of its schema)."""
    return {name: delta_value(meaning) for name, meaning in (record.expect or {}).items()}


def connect_rows(fields: list[tuple[str, str]], rows: list[dict[str, Any]], envelope: str = "plain") -> list[bytes]:
    """`rows` of the shape `fields` ((name, kind), the kinds of bench/registry_rows.py; a decimal as its text) as
    Kafka's JsonConverter writes them with schemas, plain or (`envelope="debezium"`) each in a Debezium change event
    of op c; `envelope="changes"`: each of `rows` is a change event `{"op", "before", "after"}` (rows or None), its
    rows' fields optional, a field a row lacks null (testkit/java/io/lakesink/testkit/ConnectRows.java)."""
    java = jars.require_java()
    lines = [json.dumps([list(f) for f in fields])] + [json.dumps(row) for row in rows]
    proc = subprocess.run([java, "-cp", os.pathsep.join(map(str, helper_classpath())),
                           "io.lakesink.testkit.ConnectRows", envelope],
                          input="\n".join(lines).encode() + b"\n", capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ConnectRows {envelope} failed: {proc.stderr.decode(errors='replace').strip()[-2000:]}")
    return [base64.b64decode(line) for line in proc.stdout.decode().split("\n")[:-1]]
