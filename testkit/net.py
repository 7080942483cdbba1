"""Loopback plumbing: a GET that answers None while nothing listens yet, and one that needs an answer (a free port is
connector/local/ports.py's)."""
from __future__ import annotations

import urllib.error
import urllib.request


def http_get(url: str) -> tuple[int, str] | None:
    """(status, body) of a GET on loopback; None while nothing listens there yet."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def http_reply(url: str) -> tuple[int, str]:
    """(status, body) of a GET, an HTTP error's too; raises when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
