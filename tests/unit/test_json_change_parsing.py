"""Plain JSON change events are read with orjson where it reads as Python's json module does
(participant/convert/changes.py `_json_value`): the rows, record errors and their messages are the same as with
Python's module alone, over any JSON a producer writes (Python's json module, as it writes NaN, infinities, lone
surrogates as escapes, integers of any size), in each keyed mode."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.upsert import UpsertSpec
from participant.convert import Converter, changes

MODES = {
    "changelog, Debezium": UpsertSpec("changelog", envelope="debezium"),
    "upsert, Debezium, Kafka keys": UpsertSpec("upsert", envelope="debezium", delete_enabled=True),
    "upsert, Debezium, record.key.fields": UpsertSpec("upsert", ("k",), envelope="debezium", delete_enabled=True),
    "upsert, plain rows": UpsertSpec("upsert", ("k",), delete_enabled=True),
    "changelog, plain rows": UpsertSpec("changelog", ("k",)),
}

scalars = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
           | st.floats() | st.text(max_size=4) | st.sampled_from(["\ud800", "x\udfff", "é", "\x00"])
           | st.sampled_from([2**64, 2**64 - 1, -(2**63) - 1, -(2**63), 10**19 - 1, 10**30]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text("abk", max_size=2), inner, max_size=3), max_leaves=6)
rows = st.fixed_dictionaries({"k": st.integers(0, 3)}, optional={"a": values, "b": values, "c": scalars})


@st.composite
def records(draw, envelope: bool):
    """(key, value) of records as Python's json module writes them: rows, or Debezium events around them (op c, u,
    r or d), now and then a tombstone or a value that is no JSON object."""
    out = []
    for lsn, row in enumerate(draw(st.lists(rows, min_size=1, max_size=6))):
        if envelope:
            op = draw(st.sampled_from("curd"))
            event = {"before": row if op == "d" else None, "after": None if op == "d" else row, "op": op,
                     "ts_ms": 0, "source": {"connector": "postgresql", "ts_ms": 0, "lsn": lsn}}
        else:
            event = row
        value = json.dumps(event, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
        value = draw(st.sampled_from([value, value, value, None, b"[1]", value[:-1]]))
        out.append((json.dumps({"k": row["k"]}).encode(), value))
    return out


def _convert(spec: UpsertSpec, batch) -> tuple[pa.Table | None, list]:
    n = len(batch)
    result = Converter("json", spec.meta, upsert=spec).convert_raw(
        "t", 0, list(range(n)), [0] * n, [key for key, _ in batch], [value for _, value in batch])
    return result.table, [(f.offset, f.error_class, f.error_message) for f in result.failures]


def _refused(value: bytes):
    raise changes.orjson.JSONDecodeError("refused", value.decode(errors="replace"), 0)


def _shown(table: pa.Table | None):
    """The table's schema and rows, floats by repr (NaN equals NaN, -0.0 differs from 0.0)."""
    return None if table is None else (table.schema, repr(table.to_pylist()))


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_orjson_reads_every_event_as_pythons_json_module_does(mode, data, monkeypatch):
    spec = MODES[mode]
    batch = data.draw(records(spec.envelope == "debezium"))
    fast = _convert(spec, batch)
    with monkeypatch.context() as python_only:
        python_only.setattr(changes.orjson, "loads", _refused)  # Python's module reads them all
        slow = _convert(spec, batch)
    assert (_shown(fast[0]), fast[1]) == (_shown(slow[0]), slow[1])


def test_integers_orjson_would_round_are_read_by_pythons_module():
    for text in (b"-9223372036854775809", b"18446744073709551616", b"123456789012345678901234567890"):
        assert changes._json_value(text) == (int(text), False)
    assert changes._json_value(b"-9223372036854775808") == (-(2**63), False)  # a negative one of 19 digits
    assert changes._json_value(b"18446744073709551615") == (2**64 - 1, False)  # 20 digits: Python's, to be sure
    assert changes._json_value(b'{"ts_ns": 1700000000123456789}') == ({"ts_ns": 1700000000123456789}, True)
    assert changes._json_value(b'{"a": 9999999999999999999}') == ({"a": 9999999999999999999}, True)
