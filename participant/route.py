"""`route.field`: which records of a routed topic this worker's table takes (connector/routing.py).

Every table of `route.tables` reads the routed topics whole, and keeps the records whose field names it: each
record lands in exactly one table, whose own commit holds the offsets. A record that names no table goes to
`route.field.default`; without one, the first table of `route.tables` alone makes it a record error.

A delete (a tombstone, a Debezium op=d or op=t) takes its table from its before-image (op=d) or, failing that, from
its Kafka key (a JSON object, the JSON converter's wrapper or a registry's struct); one that carries the field in
neither is a record error, never sent to `route.field.default`: it would delete its key in a table that never
held its row. The table that answers for records naming no table (`Route.takes_unknown`) makes it the error.
"""
from __future__ import annotations

import json
from typing import Any

from connector.formats.registry import RegistryReader
from connector.formats.problems import Problem
from connector.routing import UNROUTABLE, Route
from connector.upsert import connect_payload
from participant.convert import RecordFailure


class RecordRouter:
    def __init__(self, route: Route, value_converter: str, schemas_enable: bool, debezium: bool,
                 registry: RegistryReader | None, key_registry: RegistryReader | None = None):
        """`registry` / `key_registry`: the readers of the value's / key's registry format (None: JSON)."""
        self.route = route
        self._converter, self._schemas_enable, self._debezium = value_converter, schemas_enable, debezium
        self._registry, self._key_registry = registry, key_registry

    def pick(self, msgs: list) -> tuple[list, list[RecordFailure]]:
        """The records of `msgs` (one partition's, in offset order) this table takes, and the record errors of
        those that name no table when this table answers for them. Raises RegistryUnavailable."""
        route = self.route
        if not route.routes(msgs[0].topic()):
            return msgs, []
        kept, failures = [], []
        for m in msgs:
            value, why, delete = self._field(m)
            # a delete without the field names no table: never the default's, where its key is another row
            target = None if delete and value is None else route.target(value)
            if target == route.table:
                kept.append(m)
            elif target is None and route.takes_unknown:
                if delete and value is None:
                    message = (f"route.field {route.field!r} {why}, so the delete names none of route.tables "
                               f"({', '.join(route.tables)}): a delete takes its table from its before-image or "
                               f"its Kafka key, never from route.field.default, which would delete the key in a "
                               f"table that may not hold its row")
                else:
                    message = (f"route.field {route.field!r} {why or f'is {value!r}'}, which names none of "
                               f"route.tables ({', '.join(route.tables)}), and route.field.default is not set")
                failures.append(RecordFailure(
                    m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers(),
                    UNROUTABLE, message))
        return kept, failures

    def _field(self, m) -> tuple[Any, str | None, bool]:
        """The value of the record's route field, why there is none, and whether the record is a delete (which
        takes the field from its before-image or its Kafka key, as its value has no row)."""
        data = m.value()
        if data is None:
            return self._key_field(m, "the record is a tombstone")
        try:
            if self._registry is not None:
                writer, payload = self._registry.split(data, m.topic(), m.headers())
                row = writer.decoder.to_value(writer.read(payload), "")
            else:
                row = json.loads(data)
                if self._schemas_enable and isinstance(row, dict):
                    row = row.get("payload")
        except Problem as problem:
            return None, f"cannot be read ({problem.error_class}: {problem.message})", False
        except ValueError as error:
            return None, f"cannot be read (the value is not JSON: {error})", False
        if row is None:  # the JSON converter's {"schema": ..., "payload": null}: a tombstone
            return self._key_field(m, "the record is a tombstone")
        if self._debezium and isinstance(row, dict):
            op = row.get("op")
            if op == "t":
                return None, "is missing: the record is a Debezium truncate (op=t), which carries no row and no key", \
                    True
            if op == "d":
                before = row.get("before")
                if isinstance(before, dict) and before.get(self.route.field) is not None:
                    return before[self.route.field], None, True
                return self._key_field(m, "the record is a Debezium delete (op=d) whose before-image lacks it")
            row = row.get("after") or row.get("before")
        if not isinstance(row, dict):
            return None, "cannot be read: the value is not an object", False
        if self.route.field not in row:
            return None, "is missing", False
        return row[self.route.field], None, False

    def _key_field(self, m, what: str) -> tuple[Any, str | None, bool]:
        """A delete's route field, from its Kafka key: a JSON object (the JSON converter's wrapper or not) or a
        registry's struct. Raises RegistryUnavailable."""
        key = m.key()
        if key is None:
            return None, f"is missing: {what}, and it has no Kafka key", True
        try:
            if self._key_registry is not None:
                writer, payload = self._key_registry.split(key, m.topic(), m.headers())
                obj = writer.decoder.to_value(writer.read(payload), "")
            else:
                obj = connect_payload(json.loads(key))
        except Problem as problem:
            return None, f"is missing: {what}, and its Kafka key cannot be read ({problem.error_class}: " \
                         f"{problem.message})", True
        except ValueError:  # no JSON: a string or bytes key has no fields
            obj = None
        if isinstance(obj, dict) and obj.get(self.route.field) is not None:
            return obj[self.route.field], None, True
        return None, f"is missing: {what}, and its Kafka key has no such field", True
