"""`route.field`: which records of a routed topic this worker's table takes (connector/routing.py).

Every table of `route.tables` reads the routed topics whole, and keeps the records whose field names it: each
record lands in exactly one table, whose own commit holds the offsets. A record that names no table goes to
`route.field.default`; without one, the first table of `route.tables` alone makes it a record error.
"""
from __future__ import annotations

import json
from typing import Any

from connector.formats.registry import RegistryReader
from connector.formats.problems import Problem
from connector.routing import UNROUTABLE, Route
from participant.convert import RecordFailure


class RecordRouter:
    def __init__(self, route: Route, value_converter: str, schemas_enable: bool, debezium: bool,
                 registry: RegistryReader | None):
        self.route = route
        self._converter, self._schemas_enable, self._debezium = value_converter, schemas_enable, debezium
        self._registry = registry

    def pick(self, msgs: list) -> tuple[list, list[RecordFailure]]:
        """The records of `msgs` (one partition's, in offset order) this table takes, and the record errors of
        those that name no table when this table answers for them. Raises RegistryUnavailable."""
        route = self.route
        if not route.routes(msgs[0].topic()):
            return msgs, []
        kept, failures = [], []
        for m in msgs:
            value, why = self._field(m)
            target = route.target(value)
            if target == route.table:
                kept.append(m)
            elif target is None and route.takes_unknown:
                failures.append(RecordFailure(
                    m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers(),
                    UNROUTABLE, f"route.field {route.field!r} {why or f'is {value!r}'}, which names none of "
                                f"route.tables ({', '.join(route.tables)}), and route.field.default is not set"))
        return kept, failures

    def _field(self, m) -> tuple[Any, str | None]:
        """The value of the record's route field, and why there is none."""
        data = m.value()
        if data is None:
            return None, "is missing: the record is a tombstone"
        try:
            if self._registry is not None:
                writer, payload = self._registry.split(data, m.topic(), m.headers())
                row = writer.decoder.to_value(writer.read(payload), "")
            else:
                row = json.loads(data)
                if self._schemas_enable and isinstance(row, dict):
                    row = row.get("payload")
        except Problem as problem:
            return None, f"cannot be read ({problem.error_class}: {problem.message})"
        except ValueError as error:
            return None, f"cannot be read (the value is not JSON: {error})"
        if self._debezium and isinstance(row, dict):
            row = row.get("after") or row.get("before")
        if not isinstance(row, dict):
            return None, "cannot be read: the value is not an object"
        if self.route.field not in row:
            return None, "is missing"
        return row[self.route.field], None
