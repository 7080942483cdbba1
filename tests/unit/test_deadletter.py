"""connector/kafka/deadletter.py, its pure part: how a dead-letter record is built, and cut to fit its topic."""
from __future__ import annotations

import pytest

from connector.kafka.deadletter import (
    BATCH_OVERHEAD,
    TRUNCATED_HEADER,
    DeadLetterError,
    dead_letter,
    fit,
    payload_size,
    record_size,
)

CONTEXT = [("__connect.errors.topic", b"orders"), ("__connect.errors.partition", b"3"),
           ("__connect.errors.offset", b"1234567"), ("__connect.errors.connector.name", b"sink"),
           ("__connect.errors.exception.class.name", b"RecordTooLarge")]


def test_a_record_that_fits_is_produced_as_it_is():
    headers = [("trace", b"abc"), *CONTEXT]
    size = BATCH_OVERHEAD + record_size(b"k", b"v" * 100, headers)
    fitted = fit(b"k", b"v" * 100, headers, size)
    assert (fitted.key, fitted.value, fitted.headers, fitted.original_size) == (b"k", b"v" * 100, headers, None)
    assert fitted.size == size


def test_a_large_value_is_cut_to_fill_the_limit_exactly_and_says_its_original_size():
    headers = [("trace", b"abc"), *CONTEXT, ("__connect.errors.exception.message", b"too large")]
    value = bytes(range(256)) * 40
    fitted = fit(b"key", value, headers, 2000)
    assert fitted.size == 2000
    assert value.startswith(fitted.value) and 0 < len(fitted.value) < len(value)
    assert fitted.key == b"key" and fitted.headers[:-1] == headers
    assert fitted.headers[-1] == (TRUNCATED_HEADER, str(payload_size(b"key", value, headers)).encode())
    assert fitted.original_size == payload_size(b"key", value, headers)


def test_after_the_value_the_key_then_the_header_values_are_cut_last_first_but_never_the_context():
    message = ("__connect.errors.exception.message", b"m" * 300)
    headers = [("user", b"u" * 300), *CONTEXT, message]
    bare = [("user", b""), *CONTEXT, ("__connect.errors.exception.message", b""), (TRUNCATED_HEADER, b"9999")]
    floor = BATCH_OVERHEAD + record_size(b"", b"", bare)

    def cut(room):
        fitted = fit(b"k" * 200, b"v" * 500, headers, floor + room)
        assert fitted.size == floor + room
        h = dict(fitted.headers)
        return fitted.value, fitted.key, h["__connect.errors.exception.message"], h["user"]

    assert cut(800) == (b"", b"k" * 200, b"m" * 300, b"u" * 300)
    assert cut(700) == (b"", b"k" * 100, b"m" * 300, b"u" * 300)
    assert cut(400) == (b"", b"", b"m" * 100, b"u" * 300)
    fitted = fit(b"k" * 200, b"v" * 500, headers, floor + 100)
    assert (fitted.value, fitted.key, dict(fitted.headers)["__connect.errors.exception.message"]) == (b"", b"", b"")
    assert len(dict(fitted.headers)["user"]) == 100
    assert [h for h in fitted.headers if h[0] in dict(CONTEXT)] == CONTEXT


def test_a_tombstone_with_large_headers_is_cut_in_its_headers():
    fitted = fit(None, None, [("user", b"u" * 5000), *CONTEXT], 1000)
    assert fitted.value is None and fitted.key is None and fitted.size == 1000
    assert dict(fitted.headers)[TRUNCATED_HEADER] == str(payload_size(None, None, [("user", b"u" * 5000),
                                                                                  *CONTEXT])).encode()


def test_a_limit_below_what_the_context_headers_need_is_none():
    assert fit(b"k", b"v" * 10, CONTEXT, BATCH_OVERHEAD + record_size(None, None, CONTEXT)) is None


@pytest.mark.parametrize("limit", [512, 1000, 4096, 1_000_000])
def test_whatever_fits_is_never_above_the_limit(limit):
    for n in (0, 1, limit // 2, limit, 3 * limit):
        fitted = fit(b"key", b"x" * n, CONTEXT, limit)
        assert fitted is not None and fitted.size <= limit, (limit, n)
        assert (fitted.original_size is None) == (BATCH_OVERHEAD + record_size(b"key", b"x" * n, CONTEXT) <= limit)


def test_the_error_names_the_topic_the_count_and_the_first_error():
    error = DeadLetterError("orders-dlq", [1, 4], 7, "Broker: Not enough in-sync replicas")
    assert error.failed == (1, 4)
    assert "2 of 7 record(s) produced to dead-letter topic orders-dlq" in str(error)
    assert "first error: Broker: Not enough in-sync replicas" in str(error)


def test_a_dead_letter_keeps_the_record_and_adds_connects_headers_in_connects_order():
    letter = dead_letter(b"k", b"v", [("trace", b"abc")], 1_700_000_000_000, context=True, connector="sink",
                         error_class="TypeMismatch", message="field 'id' is string", source=("orders", 3, 17),
                         reasons=[("__lakesink.errors.constraint.name", b"id_ok")])
    assert (letter.key, letter.value, letter.timestamp_ms) == (b"k", b"v", 1_700_000_000_000)
    assert letter.headers == [("trace", b"abc"), ("__lakesink.errors.constraint.name", b"id_ok"),
                              ("__connect.errors.topic", b"orders"), ("__connect.errors.partition", b"3"),
                              ("__connect.errors.offset", b"17"), ("__connect.errors.connector.name", b"sink"),
                              ("__connect.errors.exception.class.name", b"TypeMismatch"),
                              ("__connect.errors.exception.message", b"field 'id' is string")]


def test_a_dead_letter_without_context_headers_or_source_and_a_message_cut_to_4096_bytes():
    bare = dead_letter(None, b"v", None, None, context=False, connector="sink", error_class="E", message="m",
                       source=("orders", 0, 1), reasons=[("why", b"x")])
    assert (bare.key, bare.headers, bare.timestamp_ms) == (None, [("why", b"x")], 0)
    unplaced = dead_letter(None, b"row", [], 0, context=True, connector="sink", error_class="E", message="é" * 3000,
                           source=None)
    assert [name for name, _ in unplaced.headers] == ["__connect.errors.connector.name",
                                                      "__connect.errors.exception.class.name",
                                                      "__connect.errors.exception.message"]
    assert unplaced.headers[-1][1] == ("é" * 3000).encode()[:4096]
