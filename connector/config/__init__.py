"""Configuration: a Java .properties file validated into one typed, frozen LakesinkConfig.

Every key is declared once, as an annotated field of the key table (keys.py): its Python type, its `Key` (how the
text is parsed, one line of documentation) and its default. The package, from the bottom up: how values are parsed
(kinds.py), which keys hold secrets (secret_keys.py), the key table (keys.py), the rules across keys (rules.py),
LakesinkConfig and what it derives (model.py), loading a file with its environment (load.py). The parser, the example
check and docs/configuration.md (rendered by connector/app/config_docs.py) all read the one declaration.

This module names the public API: `from connector.config import LakesinkConfig, load_config, ...`.
"""

from connector.config.keys import SETTINGS, SETTINGS_BY_NAME, TABLE_KEYS, Key, Setting
from connector.config.kinds import REGISTRY_CONVERTERS, TABLE_TEMPLATE, Kind, jaas_login
from connector.config.load import config_from_dict, load_config, validate_file
from connector.config.model import LakesinkConfig
from connector.config.rules import staged_window_ms
from connector.config.secret_keys import is_secret
from connector.errors import ConfigError

__all__ = [
    "REGISTRY_CONVERTERS",
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "TABLE_KEYS",
    "TABLE_TEMPLATE",
    "ConfigError",
    "Key",
    "Kind",
    "LakesinkConfig",
    "Setting",
    "config_from_dict",
    "is_secret",
    "jaas_login",
    "load_config",
    "staged_window_ms",
    "validate_file",
]
