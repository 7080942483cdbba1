"""Plain-JSON Debezium events read a batch at a time (participant/convert/plain_events.py) equal the per-record path
as a property: random `after` rows (nesting, `{}` / `[]` / null, integers around 2^53 and beyond 2^63, large doubles,
ISO times, arrays with nulls first, names that differ in case, texts with escapes) in Debezium PostgreSQL events
(testkit/debezium.py `pg_change`), mostly creates with some updates, reads and deletes, in a few batches through two
converters of the same settings, one without the batch path: the same rows, types, changes, record errors and
offsets, batch after batch, inferred or held to a table's schema. Derandomized, so every run checks the same
examples."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.upsert import UpsertSpec
from participant.convert.converter import Converter
from testkit.debezium import convert_both, pg_change

EXACT = 1 << 53
NAMES = ["a", "A", "b", "n", "x y", "tags", "when"]
CHILD_NAMES = ["k", "K", "v"]
TIMES = ["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123456+02:00", "2024-01-02 03:04:05", "2024-01-02",
         "2024-13-02", "0000-01-01T00:00:00Z"]


def leaves() -> st.SearchStrategy:
    ints = st.integers(-1000, 1000) | st.sampled_from([EXACT - 1, EXACT, EXACT + 1, -(EXACT + 1), 2 ** 63 - 1,
                                                       -(2 ** 63), 2 ** 63 + 5, 2 ** 64])
    floats = st.sampled_from([0.5, -0.0, 1e16, 9007199254740993.0, 1e300, 2.5e-7]) | \
        st.floats(allow_nan=False, allow_infinity=False)
    texts = st.sampled_from(["", "x", "é€", 'q"\\', "tab\there", "line\nbreak", "\U0001f600"]) | \
        st.sampled_from(TIMES) | st.text(max_size=5)
    return st.none() | st.booleans() | ints | floats | texts | st.sampled_from([{}, [], [None], [None, 1], [[]]])


def anything(depth: int = 0) -> st.SearchStrategy:
    if depth >= 2:
        return leaves()
    return leaves() | st.lists(anything(depth + 1), max_size=3) | \
        st.dictionaries(st.sampled_from(CHILD_NAMES), anything(depth + 1), max_size=3)


@st.composite
def profiles(draw) -> dict[str, st.SearchStrategy]:
    """Per field name, the values it takes in a stream: mostly one kind, so that batches can agree."""
    kinds = {"int": st.integers(-10 ** 6, 10 ** 6), "float": st.floats(-1e6, 1e6, allow_nan=False),
             "text": st.text(max_size=4), "time": st.sampled_from(TIMES[:2]), "bool": st.booleans(),
             "list": st.lists(st.integers(0, 9) | st.none(), max_size=3),
             "object": st.fixed_dictionaries({"k": st.integers(0, 9)}, optional={"v": st.text(max_size=2)}),
             "any": anything()}
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    return {name: kinds[draw(st.sampled_from(sorted(kinds)))] | (st.none() if draw(st.booleans()) else st.nothing())
            for name in names}


@st.composite
def streams(draw) -> list[list[bytes]]:
    """Batches of events of one stream, their lsns rising."""
    profile = draw(profiles())
    lsn, batches = 0, []
    for _ in range(draw(st.integers(1, 4))):
        batch = []
        for _ in range(draw(st.integers(1, 8))):
            lsn += 1
            row = {name: draw(values) for name, values in profile.items() if draw(st.integers(0, 9))}
            op = draw(st.sampled_from("ccccccur") if draw(st.integers(0, 19)) else st.sampled_from("d"))
            event = pg_change(op, lsn, after=None if op == "d" else row, before=row if op == "d" else None)
            batch.append(json.dumps(event, separators=(",", ":")).encode())
        batches.append(batch)
    return batches


@pytest.mark.parametrize("meta", [True, False])
@settings(max_examples=120, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=streams(), hold=st.booleans())
def test_plain_debezium_batches_equal_the_per_record_path(meta, batches, hold):
    spec = UpsertSpec(envelope="debezium", meta=meta)
    fast, slow = Converter("json", meta, upsert=spec), Converter("json", meta, upsert=spec)
    slow._changes.plain_events = None
    offset = 0
    for n, values in enumerate(batches):
        args = ("dbserver1.inventory.customers", 0, list(range(offset, offset + len(values))), [0] * len(values),
                [None] * len(values), values)
        convert_both(fast, slow, f"batch {n}", args, path="plain_events")
        offset += len(values)
        if hold and fast.schema is not None and n == 0:  # the table exists now: later batches are held to it
            schema = pa.schema([f for f in fast.schema if not f.name.startswith("_")])
            fast.set_schema(schema)
            slow.set_schema(schema)
