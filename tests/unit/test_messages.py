import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.errors import ProtocolError
from connector.protocol.messages import (
    SCHEMA_VERSION,
    AckCommit,
    Assignment,
    Buffered,
    CommitFailed,
    DecodeError,
    EndCommit,
    Message,
    Progress,
    StagedFile,
    StartCommit,
    UnknownMessageType,
    WriteStatus,
    decode,
    encode,
    split_version,
    txn_version,
)

OFFSETS = {("orders", 0): 42, ("orders", 1): None, ("payments", 0): 0}

SAMPLES: list[Message] = [
    StartCommit("sink", 3, 7, OFFSETS),
    EndCommit("sink", 3, 7),
    WriteStatus(
        "sink",
        3,
        7,
        topic="orders",
        partition=0,
        worker="w-1",
        start_offset=42,
        first_offset=42,
        next_offset=50,
        files=(StagedFile("_lakesink/staging/7/a.parquet", 8, 1024), StagedFile("b.parquet", 0, 10)),
        rows=8,
        bytes=1034,
        records_failed=1,
        records_dead_lettered=1,
        key_fields=("id", "région"),
    ),
    WriteStatus(
        "sink", 3, 7, "orders", 1, "w-2", start_offset=None, first_offset=None, next_offset=None,
        files=(), rows=0, bytes=0,
    ),
    AckCommit("sink", 3, 7, table_version=12, offsets=OFFSETS),
    AckCommit("sink", 3, 8, table_version=None, offsets={}),
    Progress("sink", 3, 7, {"rows": 8, "rate": 1.5, "partitions": [{"p": 0}], "note": "ünïcode"}),
    Assignment("sink", 3, 7, worker="w-1", partitions=(("orders", 0), ("payments", 0))),
    Assignment("sink", 0, 0, worker="w-2", partitions=()),
    EndCommit("sink", 3, 7, offsets=OFFSETS),
    CommitFailed("sink", 3, 7, error="txn 7 of epoch 3 cannot be committed to /t: ünïcode; start it again", attempts=2),
    Buffered("sink", 3, 7, worker="w-1", records=120_000, bytes=48 << 20),
]


def _body(msg: Message) -> dict:
    return json.loads(encode(msg))


def _bytes(body: dict) -> bytes:
    return json.dumps(body).encode()


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: Message) -> None:
    assert decode(encode(msg)) == msg


def test_common_fields_have_defaults() -> None:
    a, b = EndCommit("sink", 1, 1), EndCommit("sink", 1, 1)
    assert len(a.message_id) == 32 and a.message_id != b.message_id
    assert a.sent_at > 1_600_000_000


def test_wire_format_names_type_and_version_and_lists_offsets() -> None:
    body = _body(SAMPLES[0])
    assert body["schema_version"] == SCHEMA_VERSION
    assert body["type"] == "START_COMMIT"
    assert {"topic": "orders", "partition": 1, "offset": None} in body["offsets"]
    assert [_body(m)["type"] for m in SAMPLES[1:]] == [
        "END_COMMIT", "WRITE_STATUS", "WRITE_STATUS", "ACK_COMMIT", "ACK_COMMIT", "PROGRESS", "ASSIGNMENT", "ASSIGNMENT",
        "END_COMMIT", "COMMIT_FAILED", "BUFFERED",
    ]


def test_unknown_fields_are_ignored() -> None:
    body = _body(SAMPLES[2])
    body["compression"] = "zstd"
    body["files"][0]["checksum"] = "abc"
    body["extra"] = {"nested": [1, 2]}
    assert decode(_bytes(body)) == SAMPLES[2]


def test_fields_with_plain_defaults_may_be_absent() -> None:
    body = _body(SAMPLES[3])
    del body["records_failed"], body["records_dead_lettered"]
    assert decode(_bytes(body)).records_failed == 0


@pytest.mark.parametrize("name", ["NUKE_TABLE", None, 7])
def test_unknown_type(name: object) -> None:
    body = _body(SAMPLES[1]) | {"type": name}
    with pytest.raises(UnknownMessageType):
        decode(_bytes(body))


def test_newer_schema_version_is_unknown() -> None:
    with pytest.raises(UnknownMessageType, match="upgrade"):
        decode(_bytes(_body(SAMPLES[1]) | {"schema_version": SCHEMA_VERSION + 1}))


@pytest.mark.parametrize("version", [0, -1, "1", None, True, 1.0])
def test_invalid_schema_version(version: object) -> None:
    with pytest.raises(DecodeError) as err:
        decode(_bytes(_body(SAMPLES[1]) | {"schema_version": version}))
    assert not isinstance(err.value, UnknownMessageType)


def test_missing_schema_version() -> None:
    body = _body(SAMPLES[1])
    del body["schema_version"]
    with pytest.raises(DecodeError):
        decode(_bytes(body))


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xfe\x00garbage", b"not json", b"[1, 2]", b"null", b"42", b'"START_COMMIT"', b"[" * 100_000],
)
def test_garbage_bytes(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


def test_non_bytes_value_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode(None)  # type: ignore[arg-type]


def test_decode_error_is_a_protocol_error() -> None:
    assert issubclass(UnknownMessageType, DecodeError) and issubclass(DecodeError, ProtocolError)


@pytest.mark.parametrize(
    "sample, field, value",
    [
        (1, "epoch", "3"),
        (1, "epoch", True),
        (1, "epoch", -1),
        (1, "txn", 1.5),
        (1, "connector", 5),
        (1, "message_id", None),
        (1, "sent_at", "now"),
        (0, "offsets", {"orders/0": 4}),
        (0, "offsets", [{"topic": "orders", "partition": 0}]),
        (0, "offsets", [{"topic": "orders", "partition": "0", "offset": 1}]),
        (0, "offsets", [{"topic": "orders", "partition": 0, "offset": -5}]),
        (0, "offsets", [{"topic": "o", "partition": 0, "offset": 1}, {"topic": "o", "partition": 0, "offset": 2}]),
        (0, "offsets", ["orders"]),
        (2, "files", [{"path": "a", "rows": 1}]),
        (2, "files", "a.parquet"),
        (2, "next_offset", "50"),
        (2, "rows", None),
        (2, "records_failed", None),
        (4, "table_version", "12"),
        (6, "payload", [1, 2]),
    ],
)
def test_ill_typed_fields(sample: int, field: str, value: object) -> None:
    body = _body(SAMPLES[sample]) | {field: value}
    with pytest.raises(DecodeError, match=field):
        decode(_bytes(body))


@pytest.mark.parametrize("field", ["connector", "epoch", "txn", "message_id", "sent_at", "offsets"])
def test_missing_required_field(field: str) -> None:
    body = _body(SAMPLES[0])
    del body[field]
    with pytest.raises(DecodeError, match=field):
        decode(_bytes(body))


def test_sent_at_may_be_an_integer_on_the_wire() -> None:
    msg = decode(_bytes(_body(SAMPLES[1]) | {"sent_at": 1_700_000_000}))
    assert msg.sent_at == 1_700_000_000.0 and isinstance(msg.sent_at, float)


def test_encode_rejects_non_messages_and_unserializable_payloads() -> None:
    with pytest.raises(ProtocolError):
        encode(StagedFile("a", 1, 1))  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="JSON"):
        encode(Progress("sink", 1, 1, {"when": object()}))


def test_txn_version_orders_epochs_above_txns() -> None:
    assert txn_version(0, 5) == 5
    assert txn_version(1, 0) == 1 << 32
    assert txn_version(1, 0) > txn_version(0, 2**32 - 1)
    assert split_version(txn_version(7, 123)) == (7, 123)


@pytest.mark.parametrize("epoch, txn", [(-1, 0), (0, -1), (0, 2**32)])
def test_txn_version_range(epoch: int, txn: int) -> None:
    with pytest.raises(ValueError):
        txn_version(epoch, txn)


counts = st.integers(0, 2**40)
optional_counts = st.none() | counts
names = st.text(min_size=1, max_size=12)
offsets = st.dictionaries(st.tuples(names, st.integers(0, 500)), optional_counts, max_size=5)
envelope = {"connector": names, "epoch": counts, "txn": st.integers(0, 2**32 - 1)}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
messages = st.one_of(
    st.builds(StartCommit, **envelope, offsets=offsets),
    st.builds(EndCommit, **envelope, offsets=st.none() | offsets),
    st.builds(
        WriteStatus,
        **envelope,
        topic=names,
        partition=st.integers(0, 500),
        worker=names,
        start_offset=optional_counts,
        first_offset=optional_counts,
        next_offset=optional_counts,
        files=st.lists(st.builds(StagedFile, names, counts, counts), max_size=3).map(tuple),
        rows=counts,
        bytes=counts,
        records_failed=counts,
        records_dead_lettered=counts,
        key_fields=st.lists(names, max_size=3).map(tuple),
    ),
    st.builds(AckCommit, **envelope, table_version=optional_counts, offsets=offsets),
    st.builds(Progress, **envelope, payload=st.dictionaries(st.text(max_size=5), json_values, max_size=4)),
    st.builds(Assignment, **envelope, worker=names,
              partitions=st.sets(st.tuples(names, st.integers(0, 500)), max_size=4).map(lambda s: tuple(sorted(s))),
              registry_waiting=st.sets(st.tuples(names, st.integers(0, 500)), max_size=2).map(sorted).map(tuple),
              registry_error=st.none() | st.text(max_size=20)),
    st.builds(Buffered, **envelope, worker=names, records=counts, bytes=counts, backlog=counts,
              caught_up=st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(messages)
def test_any_message_round_trips(msg: Message) -> None:
    assert decode(encode(msg)) == msg


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | messages.map(encode).map(lambda b: b[: len(b) // 2]))
def test_decode_raises_only_decode_errors(data: bytes) -> None:
    try:
        decode(data)
    except DecodeError:
        pass


@settings(max_examples=200, deadline=None)
@given(messages, st.sampled_from(["connector", "epoch", "txn", "offsets", "files", "rows", "payload"]), json_values)
def test_decode_of_a_mangled_field_never_raises_anything_else(msg: Message, field: str, value: object) -> None:
    body = _body(msg)
    if field in body:
        body[field] = value
    try:
        decode(_bytes(body))
    except DecodeError:
        pass


def test_a_start_without_schema_decodes_as_one_with_none_and_a_bad_schema_is_refused() -> None:
    with_schema = StartCommit("sink", 3, 8, OFFSETS, schema="QUJD")
    assert decode(encode(with_schema)) == with_schema
    body = _body(StartCommit("sink", 1, 2, OFFSETS))
    del body["schema"]
    assert decode(_bytes(body)).schema is None
    body["schema"] = 5
    with pytest.raises(DecodeError, match="schema"):
        decode(_bytes(body))


def test_an_arrow_schema_travels_as_text() -> None:
    import pyarrow as pa

    from connector.errors import LakesinkError
    from connector.schema.algebra import schema_from_text, schema_to_text

    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", "UTC")),
                        ("tags", pa.list_(pa.string())), ("where", pa.struct([("city", pa.string())]))])
    text = schema_to_text(schema)
    assert schema_from_text(text).equals(schema)
    assert decode(encode(StartCommit("sink", 1, 2, OFFSETS, schema=text))).schema == text
    with pytest.raises(LakesinkError, match="not an Arrow schema"):
        schema_from_text("not base64!")


def test_an_end_without_offsets_decodes_as_one_with_none() -> None:
    """END-COMMITs of earlier versions carry no offsets; they still decode."""
    body = _body(EndCommit("sink", 3, 7))
    del body["offsets"]
    assert decode(_bytes(body)).offsets is None
    assert decode(encode(EndCommit("sink", 3, 7, offsets={("t", 0): 4}))).offsets == {("t", 0): 4}


def test_a_buffered_of_an_earlier_version_has_no_backlog_and_a_caught_up_must_be_a_flag() -> None:
    report = Buffered("sink", 3, 7, worker="w", records=5, bytes=9, backlog=2, caught_up=True)
    assert decode(encode(report)) == report
    body = _body(report)
    del body["backlog"], body["caught_up"]
    older = decode(_bytes(body))
    assert (older.records, older.backlog, older.caught_up) == (5, 0, False)
    body["caught_up"] = 1
    with pytest.raises(DecodeError, match="caught_up: expected true or false"):
        decode(_bytes(body))


def test_an_assignment_lists_each_partition_once() -> None:
    body = _body(Assignment("sink", 1, 1, worker="w", partitions=(("t", 0),)))
    body["partitions"] = body["partitions"] * 2
    with pytest.raises(DecodeError, match="listed twice"):
        decode(_bytes(body))


def test_an_assignment_names_what_waits_for_the_registry_and_one_of_an_older_version_decodes_without() -> None:
    waiting = Assignment("sink", 3, 7, worker="w-1", partitions=(("orders", 0), ("orders", 1)),
                         registry_waiting=(("orders", 1),),
                         registry_error="the schema registry answered HTTP 503 for schema id 2: ünavailable")
    body = _body(waiting)
    assert body["registry_waiting"] == [{"topic": "orders", "partition": 1}]
    assert decode(encode(waiting)) == waiting
    older = _body(SAMPLES[7])
    del older["registry_waiting"], older["registry_error"]
    decoded = decode(_bytes(older))
    assert decoded == SAMPLES[7] and (decoded.registry_waiting, decoded.registry_error) == ((), None)
    for field, bad in (("registry_waiting", [{"topic": "orders"}]), ("registry_waiting", "orders-1"),
                       ("registry_waiting", body["registry_waiting"] * 2), ("registry_error", 503)):
        with pytest.raises(DecodeError, match=field):
            decode(_bytes(body | {field: bad}))


def test_commit_failed_needs_its_error_and_a_count_of_attempts() -> None:
    failed = SAMPLES[-2]
    body = _body(failed)
    assert (body["type"], body["error"], body["attempts"]) == ("COMMIT_FAILED", failed.error, 2)
    for field, bad in (("error", None), ("error", 3), ("attempts", -1), ("attempts", "2")):
        with pytest.raises(DecodeError, match=field):
            decode(_bytes(body | {field: bad}))
    with pytest.raises(DecodeError, match="lacks field 'attempts'"):
        decode(_bytes({k: v for k, v in body.items() if k != "attempts"}))


def test_a_write_status_names_its_key_fields_and_one_without_them_decodes_with_none() -> None:
    """The key columns of an upsert's staged rows travel in order; a WRITE-STATUS of an older version (or of append
    mode) has none."""
    keyed = SAMPLES[2]
    assert _body(keyed)["key_fields"] == ["id", "région"]
    assert decode(encode(keyed)).key_fields == ("id", "région")
    body = _body(keyed)
    del body["key_fields"]
    assert decode(_bytes(body)).key_fields == ()
    assert decode(encode(SAMPLES[3])).key_fields == ()
    for bad in ("id", [1], None):
        with pytest.raises(DecodeError, match="key_fields"):
            decode(_bytes(body | {"key_fields": bad}))
