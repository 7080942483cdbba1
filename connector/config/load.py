"""Loading a configuration: a Java .properties file (or its key/value text) read, `${env:VAR}` substituted, every
key parsed by its declaration, the cross-key rules checked, and every problem reported at once with the secrets
read kept out of them."""

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import javaproperties

from connector.config.keys import PASS_THROUGH, SETTINGS, SETTINGS_BY_NAME, TABLE_KEYS, stored_key
from connector.config.kinds import IDENTIFIER_RE, JAVA_KEYSTORE_KEYS
from connector.config.model import LakesinkConfig
from connector.config.rules import cross_check, routing_problems
from connector.config.secret_keys import is_secret
from connector.errors import ConfigError
from connector.secrets import Scrubber

_ENV_REF = re.compile(r"\$\{env:([^}]*)\}")
_OWNED_BY_LAKESINK = {
    "consumer.bootstrap.servers": "kafka.bootstrap.servers",
    "producer.bootstrap.servers": "kafka.bootstrap.servers",
    "consumer.group.id": "kafka.group.id",
    "consumer.auto.offset.reset": "kafka.auto.offset.reset",
    "consumer.group.instance.id": "worker.id",
}


REMOVED_KEYS = {
    "target.database.name": "lakesink writes the table by its location (target.base.path/"
                            "target.table.name) and registers it in no catalog (its Spark session's catalog is in "
                            "memory and forgets a table when the process stops); delete the key, and register the "
                            "table in your own catalog (CREATE TABLE <db>.<name> USING DELTA LOCATION '<location>') "
                            "if you need a name for it",
}
"""Keys lakesink once declared: a file that still sets one gets a warning saying why, not an unknown-key error."""


def _table_setting(key: str, raw: str, env: Mapping[str, str], into: dict[str, dict[str, Any]]) -> list[str]:
    """Parse `table.<table>.<key>` into `into[table][attribute]`; its problems."""
    rest = key[len("table."):]
    own = next((k for k in TABLE_KEYS if rest.endswith("." + k)), None)
    if own is None:
        close = difflib.get_close_matches(rest.rpartition(".")[2], [k.rpartition(".")[2] for k in TABLE_KEYS], n=1)
        return [f"unknown key {key!r}: table.<table>.<key> takes one of {', '.join(TABLE_KEYS)}"
                + (f" (did you mean ...{close[0]}?)" if close else "")]
    table = rest[: -len(own) - 1]
    if not IDENTIFIER_RE.fullmatch(table):
        return [f"{key}: {table!r} is not a table name (an identifier)"]
    text, missing, _ = _substitute(key, raw, env)
    if missing:
        return missing
    setting = SETTINGS_BY_NAME[own]
    try:
        into.setdefault(table, {})[setting.attr] = setting.kind.parse(text)
    except ValueError as error:
        return [f"{key}: {error}"]
    return []


def _unknown_key(key: str) -> str:
    head, _, rest = key.partition(".")
    prefixes = [prefix.rstrip(".") for prefix in PASS_THROUGH]
    close = difflib.get_close_matches(head, prefixes, n=1) if rest else []
    # a misspelt prefix first: `consumr.security.protocol` means the consumer's, not the top-level key
    guess = [f"{close[0]}.{rest}"] if close and close[0] != head else \
        difflib.get_close_matches(key, SETTINGS_BY_NAME, n=1)
    if guess:
        return f"unknown key {key!r} (did you mean {guess[0]!r}?)"
    return (
        f"unknown key {key!r} (see docs/configuration.md; Kafka client and Spark settings "
        "take the prefix consumer., producer. or spark.)"
    )


def _substitute(key: str, raw: str, env: Mapping[str, str]) -> tuple[str, list[str], list[str]]:
    """The value with `${env:VAR}` replaced, the problems of variables that are not set, and the substituted values
    that are secrets: all of them in a secret key, else those of secret-named variables."""
    missing: list[str] = []
    secrets: list[str] = []

    def replace(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable in env:
            if is_secret(key) or is_secret(variable):
                secrets.append(env[variable].strip())
            return env[variable]
        missing.append(f"{key}: environment variable {variable!r} is not set (referenced as {match.group(0)})")
        return match.group(0)

    return _ENV_REF.sub(replace, raw).strip(), missing, secrets


def config_from_dict(d: Mapping[str, str], env: Mapping[str, str] | None = None) -> LakesinkConfig:
    """Validate raw key/value text (as read from a .properties file); `env` defaults to os.environ."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {attr: {} for attr in (*PASS_THROUGH.values(), "table_settings")}
    problems: list[str] = []
    env_secrets: list[str] = []
    secrets: list[str] = []  # every secret text read, kept out of the problems reported
    removed: list[str] = []
    for key, raw in d.items():
        if key in REMOVED_KEYS:
            removed.append(f"{key} was removed and is ignored: {REMOVED_KEYS[key]}")
            continue
        setting = SETTINGS_BY_NAME.get(key)
        prefix = next((p for p in PASS_THROUGH if key.startswith(p)), None)
        if key in JAVA_KEYSTORE_KEYS:
            problems.append(f"{key}: librdkafka reads no Java keystore; use {JAVA_KEYSTORE_KEYS[key]}")
            continue
        if setting is None and prefix is None and key.startswith("table."):
            problems.extend(_table_setting(key, raw, env, values["table_settings"]))
            continue
        if setting is None and prefix is None:
            problems.append(_unknown_key(key))
            continue
        if key == prefix:
            problems.append(f"{key}: expected a setting name after the prefix {prefix!r}")
            continue
        if key in _OWNED_BY_LAKESINK:
            problems.append(f"{key}: set {_OWNED_BY_LAKESINK[key]} instead")
            continue
        text, missing, substituted = _substitute(key, raw, env)
        env_secrets.extend(substituted)
        secrets.extend([*substituted, text] if is_secret(key) and not missing else substituted)
        if missing:
            problems.extend(missing)
        elif setting is not None:
            try:
                values[setting.attr] = setting.kind.parse(text)
            except ValueError as error:
                problems.append(f"{key}: {error}")
        elif prefix is not None:
            values[PASS_THROUGH[prefix]][stored_key(prefix, key)] = text
    problems.extend(
        f"{s.name}: required key is not set ({s.doc.rstrip('.')})" for s in SETTINGS if s.required and s.name not in d
    )
    if "kafka.topic.names" not in d and "kafka.topic.regex" not in d:
        problems.append("kafka.topic.names: required key is not set (the source topics; or set kafka.topic.regex to "
                        "sink every topic whose name matches it)")
    defaults = {s.attr: s.default for s in SETTINGS if not s.required}
    unparsed = {problem.split(":", 1)[0] for problem in problems}  # a key whose value is refused has its default
    connector_problems = [p for p in cross_check({**defaults, **values}) if p.split(":", 1)[0] not in unparsed]
    problems.extend(connector_problems)
    problems.extend(routing_problems({**defaults, **values}))
    for table, own in sorted(values["table_settings"].items()):
        problems.extend(f"table.{table}: {problem}" for problem in cross_check({**defaults, **values, **own})
                        if problem not in connector_problems)
    if problems:
        scrubber = Scrubber(secrets)
        raise ConfigError([scrubber.text(problem) for problem in problems])
    config = LakesinkConfig.model_validate(values)
    config._env_secrets = tuple(dict.fromkeys(env_secrets))
    config._set_keys = frozenset(key for key in d if key in SETTINGS_BY_NAME)
    config._removed = tuple(removed)
    return config


def _read_properties(text: str) -> tuple[dict[str, str], list[str]]:
    raw: dict[str, str] = {}
    problems: list[str] = []
    for element in javaproperties.parse(text):
        if isinstance(element, javaproperties.KeyValue):
            if element.key in raw:
                problems.append(f"{element.key}: set more than once (the file must set each key once)")
            raw[element.key] = element.value
    return raw, problems


def load_config(path_or_text: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> LakesinkConfig:
    """Load a .properties file, or .properties text (a str containing a newline), into a LakesinkConfig."""
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        text = path_or_text
    else:
        path = Path(path_or_text)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"config file {str(path)!r} cannot be read: {error}") from None
    raw, problems = _read_properties(text)
    try:
        config = config_from_dict(raw, env)
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def validate_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of a config file; empty when it is valid."""
    try:
        load_config(Path(path), env)
    except ConfigError as error:
        return error.problems
    return []
