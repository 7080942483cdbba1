"""The loopback ports of the local servers: the one host they listen on, a free port, a port in use, the one sentence
that refuses a port already taken, and an HTTP opener that bypasses any proxy."""
from __future__ import annotations

import socket
import urllib.request

from connector.errors import SetupError

HOST = "127.0.0.1"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""An opener that asks the loopback servers directly, whatever HTTP proxy the environment names."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def require_free(port: int, *companions: int, server: str, command: str) -> None:
    """Raise the SetupError of a server whose `port` (or one of its `companions`) is taken: `server` names what may
    hold it ("a broker"), `command` the CLI group that starts and stops such a server (`lakesink <command> stop`)."""
    if port_in_use(port) or any(port_in_use(p) for p in companions):
        also = "".join(f" (or {p})" for p in companions)
        raise SetupError(f"port {port}{also} on {HOST} is already in use: stop whatever listens there ({server} from "
                         f"`lakesink {command} start`? run `lakesink {command} stop`) or choose another port with "
                         f"--port.")
