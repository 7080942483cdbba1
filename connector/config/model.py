"""LakesinkConfig: the validated, frozen configuration, the key table (connector/config/keys.py) with what is
derived from it: the configuration of one table or one task, the keys that have no effect, secrets and output."""

import re
from collections.abc import Iterable
from typing import Any

from pydantic import PrivateAttr, ValidationError, model_validator

from connector.config.keys import PASS_THROUGH, SETTINGS, Keys, full_key, render
from connector.config.kinds import REGISTRY_CONVERTERS, TABLE_TEMPLATE
from connector.config.rules import NOT_APPLYING, cross_check, merged_registry_settings
from connector.config.secret_keys import embedded_secrets, is_secret, url_credentials
from connector.errors import ConfigError
from connector.secrets import REDACTED


class LakesinkConfig(Keys):
    """The validated configuration. Attribute names are the dotted keys with '.' replaced by '_'."""

    def registry_settings(self, part: str) -> dict[str, str] | None:
        """The schema-registry client settings of the `value` or `key` converter (None when it reads no registry
        format): `schema.registry.*`, overridden by `<part>.converter.schema.registry.*` and Kafka Connect's
        `<part>.converter.basic.auth.*`."""
        if getattr(self, f"{part}_converter") not in REGISTRY_CONVERTERS:
            return None
        return merged_registry_settings(self.schema_registry_settings, getattr(self, f"{part}_converter_settings"))

    _env_secrets: tuple[str, ...] = PrivateAttr(default=())
    """What `${env:VAR}` substitution put into a secret key, or read from a variable with a secret name
    (`${env:KAFKA_PASSWORD}` inside any key): set by config_from_dict, part of secrets()."""
    _set_keys: frozenset[str] = PrivateAttr(default=frozenset())
    """The keys the file sets (config_from_dict), for warnings() about keys set where they have no effect."""
    _removed: tuple[str, ...] = PrivateAttr(default=())
    """Warnings about removed keys the file still sets (REMOVED_KEYS)."""
    _catalog_location: str | None = PrivateAttr(default=None)
    """The location of the table's existing catalog table (catalog.type=hive), which wins over the configured
    path: set by `at_location`."""

    @model_validator(mode="before")
    @classmethod
    def _derive_group_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "kafka_group_id" not in data and isinstance(data.get("name"), str):
            return {**data, "kafka_group_id": f"lakesink-{data['name']}"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "LakesinkConfig":
        problems = cross_check(vars(self))
        if not self.kafka_topic_names and self.kafka_topic_regex is None:
            problems.append("kafka.topic.names or kafka.topic.regex: one of them is required")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def source_topics(self, available: Iterable[str]) -> list[str]:
        """The source topics: `kafka.topic.names` as configured, or the names among `available` (topics that
        exist) that `kafka.topic.regex` matches whole, sorted; never an internal, the control or the dead-letter
        topic."""
        if self.kafka_topic_regex is None:
            return list(self.kafka_topic_names)
        return sorted(t for t in set(available) if self.is_source_topic(t))

    def is_source_topic(self, topic: str) -> bool:
        if self.kafka_topic_regex is None:
            return topic in self.kafka_topic_names
        return (not topic.startswith("__") and topic not in (self.control_topic_name,
                                                              self.errors_deadletterqueue_topic_name)
                and re.fullmatch(self.kafka_topic_regex, topic) is not None)

    @property
    def topics_description(self) -> tuple[str, ...]:
        """The source topics as configured: the names, or `regex:<expression>`."""
        return (f"regex:{self.kafka_topic_regex}",) if self.kafka_topic_regex is not None else self.kafka_topic_names

    @property
    def many_tables(self) -> bool:
        """Whether the topics go to several tables (a `${topic}` template, `table.name.map` or `route.field`):
        each table is then written by a pipeline of its own, with the configuration `for_table` gives it."""
        return TABLE_TEMPLATE in self.target_table_name or bool(self.table_name_map) or self.route_field is not None

    def for_table(self, table: str, topics: tuple[str, ...] = (), regex: str | None = None) -> "LakesinkConfig":
        """The configuration of one table's pipeline: named `<name>.<table>` (its Delta txnAppId, control messages
        and consumer group are its own), reading `topics` (or the topics `regex` matches), with the table's
        `table.<table>.*` keys over the connector's."""
        own = self.table_settings.get(table, {})
        name = f"{self.name}.{table}"
        group = f"{self.kafka_group_id}.{table}" if "kafka.group.id" in self._set_keys else f"lakesink-{name}"
        data = {**self.__dict__, "name": name, "kafka_group_id": group, "target_table_name": table,
                "kafka_topic_names": topics, "kafka_topic_regex": regex, "table_name_map": (), "route_field": None,
                "route_topics": (), "route_tables": (), "route_field_default": None, "table_settings": {}, **own}
        try:
            return self._derived(data, {f"{attr.replace('_', '.')}" for attr in own})
        except ValidationError as error:
            raise ConfigError([f"table {table}: {e['msg'].removeprefix('Value error, ')}"
                               for e in error.errors()]) from None

    def for_task(self, task: int) -> "LakesinkConfig":
        """The configuration of worker `task` (2, 3, ...) of a `lakesink run` with tasks.max > 1: its own worker.id
        (when one is set) and metrics port (when one is served)."""
        data = {**self.__dict__}
        if self.worker_id:
            data["worker_id"] = f"{self.worker_id}-{task}"
        if self.metrics_port:
            data["metrics_port"] = self.metrics_port + task - 1
        return self._derived(data)

    def _derived(self, data: dict[str, Any], set_keys: Iterable[str] = ()) -> "LakesinkConfig":
        """A configuration of the fields `data`, derived from this one: its secrets and set keys carry over."""
        config = LakesinkConfig.model_validate(data)
        config._env_secrets = self._env_secrets
        config._set_keys = self._set_keys | frozenset(set_keys)
        config._removed = self._removed
        return config

    @property
    def table_path(self) -> str:
        """Where the Delta table lives: the base path joined with the table name, or the location of its existing
        catalog table (`at_location`)."""
        if self._catalog_location is not None:
            return self._catalog_location
        return f"{self.target_base_path.rstrip('/')}/{self.target_table_name}"

    def at_location(self, location: str) -> "LakesinkConfig":
        """This configuration with the table at `location`: where its catalog table says it is
        (connector/table/catalog.py `located`)."""
        config = self._derived(dict(self.__dict__))
        config._catalog_location = location
        return config

    @property
    def dead_letter_table_path(self) -> str | None:
        """Where the dead-letter table lives (errors.deadletterqueue.table.name), as the table does; None without."""
        name = self.errors_deadletterqueue_table_name
        return None if name is None else f"{self.target_base_path.rstrip('/')}/{name}"

    def __eq__(self, other: object) -> bool:
        """The same settings (and secrets): which keys a file spelled out, at their defaults or not, is no part of
        a configuration's value."""
        if not isinstance(other, LakesinkConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__ and self._env_secrets == other._env_secrets

    def warnings(self) -> list[str]:
        """One line per key the file sets that has no effect: a removed key, or a key whose setting does not apply
        with the others (NOT_APPLYING). Logged at start-up and printed by `lakesink validate`; never an error."""
        values = vars(self)
        found = list(self._removed)
        if not self.many_tables:
            found += [f"table.{table}.{attr.replace('_', '.')} has no effect: this connector writes one table "
                      f"({self.target_table_name}); set {attr.replace('_', '.')} itself"
                      for table, own in sorted(self.table_settings.items()) for attr in own]
        for key, why in NOT_APPLYING:
            reason = why(values) if key in self._set_keys else None
            if reason:
                found.append(f"{key} has no effect: {reason}")
        return found

    def describe(self) -> dict[str, str]:
        """Every key and its value as .properties text, secrets that are set shown as ******: for logs and status
        output."""
        return {key: REDACTED if is_secret(key) and value else value for key, value in self._properties().items()}

    def secret_properties(self) -> dict[str, str]:
        """The secret keys that are set (typed and pass-through alike), with their values in clear."""
        return {key: value for key, value in self._properties().items() if value and is_secret(key)}

    def secrets(self) -> tuple[str, ...]:
        """Every secret value of this configuration, for the output paths to replace (connector/secrets.py): the
        values of the secret keys, the values of secret-named `name=value` pairs inside them (a JAAS config's
        `password="..."`, which a client library may echo alone), and what `${env:VAR}` substitution supplied to a
        secret key or read from a secret-named variable."""
        values = list(self.secret_properties().values())
        in_urls = [part for key, value in self._properties().items() if key.endswith("url")
                   for part in url_credentials(value)]
        found = [*values, *(part for value in values for part in embedded_secrets(value)), *in_urls,
                 *self._env_secrets]
        return tuple(dict.fromkeys(found))

    def _properties(self) -> dict[str, str]:
        """Every key and its value as .properties text, in clear."""
        shown = {setting.name: render(getattr(self, setting.attr)) for setting in SETTINGS}
        for table, own in sorted(self.table_settings.items()):
            for attr, value in own.items():
                shown[f"table.{table}.{attr.replace('_', '.')}"] = render(value)
        for prefix, attr in PASS_THROUGH.items():
            for key, value in sorted(getattr(self, attr).items()):
                shown[full_key(prefix, key)] = value
        return shown

    def __repr_args__(self) -> Any:
        for attr, value in super().__repr_args__():
            prefix = next((p for p, a in PASS_THROUGH.items() if a == attr), None)
            if prefix is not None:
                yield attr, {k: REDACTED if is_secret(full_key(prefix, k)) else v for k, v in value.items()}
            elif attr is not None and is_secret(attr.replace("_", ".")):
                yield attr, REDACTED
            else:
                yield attr, value
