"""Debezium's unavailable-value placeholder (an unchanged TOASTed PostgreSQL column) in every form the connector
gives it, through the Converter: a field the change does not carry, staged as null with its name in `ABSENT`, never
as data and never a record error (docs/ARCHITECTURE.md, "The keyed-write rules"). Events are built from one
description of the row (testkit/toasted_rows.py); Avro ones by confluent-kafka's AvroSerializer. The MERGE that keeps
the table's values is tests/integration/test_debezium_toasted.py."""
from __future__ import annotations

import hashlib
import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats.debezium import unavailable
from connector.formats.avro_batch import AVRO
from connector.formats.registry import RegistryReader
from connector.upsert import ABSENT, UpsertSpec
from participant.convert import Converter
from testkit import toasted_rows as rows
from testkit.toasted_rows import COLUMNS, PLACEHOLDER, TOASTED

TOPIC = "dbserver1.public.toasty"
UPSERT = UpsertSpec("upsert", ("id",), True, envelope="debezium")


def _convert(converter: Converter, keys: list[bytes], values: list[bytes]):
    n = len(values)
    result = converter.convert_raw(TOPIC, 0, list(range(n)), [1_700_000_000_000 + i for i in range(n)], keys, values)
    assert (0 if result.table is None else result.table.num_rows) + len(result.failures) == n
    return result


def _json_events(spec: UpsertSpec, schemas: bool):
    converter = Converter("json", spec.meta, upsert=spec, value_schemas=schemas, key_schemas=schemas)
    keys = [rows.connect_key(1, schemas)] * 2
    values = [rows.connect_json(rows.event("c", rows.inserted(), 10), schemas),
              rows.connect_json(rows.event("u", rows.toasted_after(), 11), schemas)]
    return _convert(converter, keys, values)


def _avro_events(spec: UpsertSpec):
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    envelope, key = rows.avro_schemas()
    values = AvroSerializer(client, json.dumps(envelope), conf={"auto.register.schemas": True})
    keys = AvroSerializer(client, json.dumps(key), conf={"auto.register.schemas": True})
    value_ctx, key_ctx = SerializationContext(TOPIC, MessageField.VALUE), SerializationContext(TOPIC, MessageField.KEY)
    converter = Converter("avro", spec.meta, upsert=spec, value_registry=RegistryReader(AVRO, client=client),
                          key_registry=RegistryReader(AVRO, is_key=True, client=client))
    return _convert(converter, [keys({"id": 1}, key_ctx)] * 2,
                    [values(rows.event("c", rows.inserted(), 10), value_ctx),
                     values(rows.event("u", rows.toasted_after(), 11), value_ctx)])


FORMS = {"connect-json": lambda spec: _json_events(spec, True), "schemaless-json": lambda spec: _json_events(spec, False),
         "avro": _avro_events}


def _staged(result) -> list[dict]:
    assert result.failures == [], [(f.error_class, f.error_message) for f in result.failures]
    return result.table.to_pylist()


@pytest.mark.parametrize("form", FORMS)
def test_every_toasted_column_of_an_update_is_absent_and_staged_as_null(form):
    """text[], int[], bigint[], hstore, bytea and a NOT NULL text column, each as the placeholder of its type."""
    insert, update = _staged(FORMS[form](UPSERT))
    assert insert[ABSENT] is None
    assert sorted(update[ABSENT]) == sorted(TOASTED)
    assert {name: update[name] for name in TOASTED} == dict.fromkeys(TOASTED)
    assert update["name"] == rows.updated()["name"] and update["id"] == 1


@pytest.mark.parametrize("form", ["connect-json", "avro"])
@pytest.mark.parametrize("mode", ["append", "changelog"])
def test_append_and_changelog_modes_keep_the_event_with_null_where_its_value_is_unavailable(form, mode):
    """The row records what the event carries: no value (null) for an unavailable column, never the placeholder,
    and a NOT NULL column's placeholder is no record error."""
    insert, update = _staged(FORMS[form](UpsertSpec(mode, envelope="debezium")))
    assert ABSENT not in insert
    assert {name: update[name] for name in TOASTED} == dict.fromkeys(TOASTED)
    got = {c.name: insert[c.name] for c in COLUMNS}
    got["attrs"] = dict(got["attrs"])  # (an Arrow map reads as its entries)
    assert got == rows.inserted(), "the insert's values are the row's own"


PLACEHOLDERS = {
    "text, varchar, json, jsonb": PLACEHOLDER,
    "bytea (Avro bytes)": PLACEHOLDER.encode(),
    "bytea (JSON: base64)": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",
    "text[]": [PLACEHOLDER],
    "bytea[] (Avro)": [PLACEHOLDER.encode()],
    "bytea[] (JSON)": ["X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="],
    "int[], bigint[], date[]": [ord(ch) for ch in PLACEHOLDER],
    "uuid[]": [str(uuid.UUID(bytes=hashlib.md5(PLACEHOLDER.encode()).digest(), version=3))],
    "hstore (map)": {PLACEHOLDER: PLACEHOLDER},
    "hstore (hstore.handling.mode=json)": '{"__debezium_unavailable_value":"__debezium_unavailable_value"}',
}


@pytest.mark.parametrize("column", PLACEHOLDERS)
def test_each_form_of_the_placeholder_is_recognised(column):
    assert unavailable(PLACEHOLDERS[column])


@pytest.mark.parametrize("value", [
    "__debezium_unavailable", PLACEHOLDER + " ", b"__debezium", [PLACEHOLDER, PLACEHOLDER], [[PLACEHOLDER]],
    [ord(ch) for ch in PLACEHOLDER][:-1], [ord(ch) for ch in PLACEHOLDER][:-1] + [True], {PLACEHOLDER: "x"},
    {PLACEHOLDER: PLACEHOLDER, "k": "v"}, None, 0, [], {}, *[c.value for c in COLUMNS]])
def test_values_that_only_look_like_it_are_data(value):
    assert not unavailable(value)
