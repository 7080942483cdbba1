"""Which table each source topic (or record) goes to, when one connector writes several tables.

Each table is written by a pipeline of its own (a coordinator and a worker, docs/ARCHITECTURE.md "Many tables"):
`plan` gives every table its configuration (`LakesinkConfig.for_table`): the topics that feed it and, for the
tables of `route.field`, the `Route` its worker keeps records by.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from connector.config import TABLE_TEMPLATE, LakesinkConfig

UNROUTABLE = "UnroutableRecord"
"""The record error of a record whose `route.field` names no table of `route.tables` (and no default is set)."""


@dataclass(frozen=True)
class Route:
    """How one table's worker picks the records of a routed topic: those whose `field` names `table`."""

    field: str
    topics: frozenset[str] | None
    """The routed topics; None: every source topic."""
    tables: tuple[str, ...]
    default: str | None
    table: str

    def routes(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    @property
    def takes_unknown(self) -> bool:
        """This table's worker takes the records that name no table: into the table (the default's), or as
        record errors (the first of `route.tables`, when there is no default): exactly one worker does."""
        return self.table == (self.default if self.default is not None else self.tables[0])

    def target(self, value: object) -> str | None:
        """The table a record whose field holds `value` goes to; None: it names none."""
        text = value if isinstance(value, str) else None if value is None or isinstance(value, (dict, list)) \
            else str(value).lower() if isinstance(value, bool) else str(value)
        return text if text in self.tables else self.default


@dataclass(frozen=True)
class TablePlan:
    table: str
    cfg: LakesinkConfig
    route: Route | None


def table_of_topic(template: str, topic: str) -> str:
    """The table `target.table.name`'s `${topic}` template gives `topic`: every character other than a letter,
    digit or `_` replaced by `_`, and `_` before a leading digit."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", topic)
    if template.startswith(TABLE_TEMPLATE) and name[:1].isdigit():
        name = "_" + name
    return template.replace(TABLE_TEMPLATE, name)


def plan(cfg: LakesinkConfig, available: Iterable[str] = ()) -> list[TablePlan]:
    """Every table the connector writes now, by name: one for a connector of one table (`cfg` itself). With
    `kafka.topic.regex`, `available` are the topics that exist; a table's pipeline finds the topics that join it
    later itself (its configuration's regex matches exactly the topics that go to it)."""
    if not cfg.many_tables:
        return [TablePlan(cfg.target_table_name, cfg, None)]
    topics = cfg.source_topics(available)
    renamed = dict(cfg.table_name_map)
    routed = (set(cfg.route_topics) if cfg.route_topics else set(topics)) if cfg.route_field else set()
    feeds: dict[str, list[str]] = {table: [] for table in cfg.route_tables}
    for topic in topics:
        if topic in routed:
            for table in cfg.route_tables:
                feeds[table].append(topic)
        else:
            feeds.setdefault(renamed.get(topic) or table_of_topic(cfg.target_table_name, topic), []).append(topic)
    plans = []
    for table, fed in sorted(feeds.items()):
        route = None
        if cfg.route_field is not None and table in cfg.route_tables:
            route = Route(cfg.route_field, frozenset(cfg.route_topics) if cfg.route_topics else None,
                          cfg.route_tables, cfg.route_field_default, table)
        if cfg.kafka_topic_regex is None:
            plans.append(TablePlan(table, cfg.for_table(table, tuple(fed)), route))
        else:
            plans.append(TablePlan(table, cfg.for_table(table, regex=_regex_of(cfg, table, renamed)), route))
    return plans


_REPLACED = "[^A-Za-z0-9]"
"""What a `_` of a table name the template made may stand for in its topic's name: `_` or a replaced character."""


def _regex_of(cfg: LakesinkConfig, table: str, renamed: dict[str, str]) -> str:
    """A regular expression that matches exactly the topics matching `kafka.topic.regex` that go to `table`: the
    topics `table.name.map` sends there, the routed topics for a table of `route.tables`, and the others whose name
    the template turns into `table`."""
    ways = [re.escape(topic) for topic, to in sorted(renamed.items()) if to == table]
    elsewhere = [re.escape(topic) for topic, to in sorted(renamed.items()) if to != table]
    if cfg.route_field is not None:
        routed = [re.escape(topic) for topic in cfg.route_topics]
        if table in cfg.route_tables:
            ways.append("|".join(routed) if routed else ".*")
        if not routed:
            return f"(?=(?:{cfg.kafka_topic_regex})\\Z)(?:{'|'.join(ways) or '(?!)'})"
        if table not in cfg.route_tables:
            elsewhere += routed
    prefix, _, suffix = cfg.target_table_name.partition(TABLE_TEMPLATE)
    if _ and table.startswith(prefix) and table.endswith(suffix) and len(table) > len(prefix) + len(suffix):
        name = table[len(prefix):len(table) - len(suffix)]
        pattern = "".join(_REPLACED if c == "_" else re.escape(c) for c in name)
        if not prefix and name[:1] == "_" and name[1:2].isdigit():  # the `_` may be the one put before a digit
            pattern = f"{_REPLACED}?{pattern[len(_REPLACED):]}"
        ways.append(pattern)
    elif table == cfg.target_table_name:
        ways.append(".*")
    excluded = f"(?!(?:{'|'.join(elsewhere)})\\Z)" if elsewhere else ""
    return f"(?=(?:{cfg.kafka_topic_regex})\\Z){excluded}(?:{'|'.join(ways) or '(?!)'})"
