"""Which keys hold secrets (`is_secret`: the one definition every output path relies on), and the secrets written
inside values (a JAAS login's password, `user:password@` in a URL)."""

import re
import urllib.parse

from connector.config.kinds import jaas_login

_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "token", "credential", "jaas")
"""A word of a key that contains one of these names a secret: `sasl.password`, `spark.ssl.keyStorePassword`,
`sasl.oauthbearer.client.secret`, `fs.s3a.session.token`, `spark.kubernetes.authenticate.oauthToken`."""
_RECORD_KEY_NEIGHBOURS = frozenset({"record", "message", "partition", "primary", "sort", "row", "converter",
                                    "deserializer", "serializer", "field", "fields", "schema", "schemas", "columns"})
"""Words beside `key` that make it a record's key, not a cryptographic one: `record.key.fields`, `key.converter`."""
_NOT_A_SECRET_ENDINGS = ("file", "source", "location", "path", "dir", "url", "uri", "endpoint", "host", "port", "type", "class",
                         "provider", "providers", "binding", "algorithm", "mechanism", "method", "enabled", "enable",
                         "size", "length", "bits", "timeout", "seconds")
"""A key whose last word ends so names where or what kind a secret is, or a setting about it, never the secret
itself: `ssl.keystore.location`, `sasl.oauthbearer.token.endpoint.url`, `fs.s3a.aws.credentials.provider`,
`fs.s3a.encryption.algorithm`, `spark.io.encryption.keySizeBits`. Masking those would hide paths and class
names from the very errors that need them (and scrub every `true` or `256` from the logs)."""
_NOT_A_SECRET_LAST_WORDS = frozenset({"id", "ms"})
"""`aws.access.key.id` and `sasl.oauthbearer.client.id` identify credentials without being them."""


def is_secret(key: str) -> bool:
    """True when a key's value must never be logged or shown: the one definition every output path relies on.

    Secret: a word containing password, passwd, passphrase, secret, token, credential or jaas; a cryptographic `key`
    (an access, secret, account, encryption, private or API key: `fs.s3a.access.key`, `fs.s3a.encryption.key`,
    `fs.azure.account.key.<account>.dfs.core.windows.net`, `ssl.key.pem`, `apiKey`); an Azure SAS
    (`fs.azure.sas.<container>.<account>...`); librdkafka's `sasl.oauthbearer.config`. Not secret: a key whose last
    word names a location, kind or setting (_NOT_A_SECRET_ENDINGS) or is `id` or `ms`, and a record's key
    (`record.key.fields`, `key.converter`). Also applied to `${env:VAR}` names, whose words are separated by `_`."""
    words = _words(key)
    if words[-2:] == ["user", "info"] or words[-1:] == ["userinfo"]:  # basic.auth.user.info: user:password
        return True
    if not words or words[-1] in _NOT_A_SECRET_LAST_WORDS or words[-1].endswith(_NOT_A_SECRET_ENDINGS):
        return False
    if any(part in word for word in words for part in _SECRET_PARTS):
        return True
    if "sas" in words or words[-2:] == ["oauthbearer", "config"]:
        return True
    return any(word == "key" and not _RECORD_KEY_NEIGHBOURS.intersection(words[max(0, i - 1):i + 2])
               for i, word in enumerate(words))


def _words(key: str) -> list[str]:
    """The lower-case words of a key, separated by any of `.`, `_`, `-`; a trailing `key` is a word of its own
    (`apiKey` -> api key, `partitionKey` -> partition key), a leading one is not (`keyStore`, `keySizeBits`)."""
    return [word for word in re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])key\b", ".key", key.lower())) if word]


_PAIR = re.compile(r"""([A-Za-z_][\w.-]*)\s*=\s*("[^"]*"|'[^']*'|[^\s"';,&]+)""")
"""A `name=value` pair inside a value: JAAS options (`password="..."`), librdkafka's sasl.oauthbearer.config."""


def embedded_secrets(value: str) -> list[str]:
    """The values of the secret-named pairs inside a secret value, unquoted (a JAAS login's as jaas_login reads
    them, escapes and all)."""
    try:
        login = [v for k, v in jaas_login(value)[1].items() if is_secret(k)]
    except ValueError:
        login = []
    return [*(match.group(2).strip("\"'") for match in _PAIR.finditer(value) if is_secret(match.group(1))), *login]


def url_credentials(url: str) -> list[str]:
    """The password (and `user:password`) written into URLs (`https://user:password@registry:8081`)."""
    found = []
    for one in url.split(","):
        try:
            parts = urllib.parse.urlsplit(one.strip())
            password = parts.password
        except ValueError:
            continue
        if password:
            found += [urllib.parse.unquote(password),
                      f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(password)}"]
    return found
