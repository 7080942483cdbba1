"""A faulty schema registry in front of a real one, for tests: a threaded HTTP/1.1 reverse proxy on 127.0.0.1.

`RegistryFaults(upstream_url)` forwards every request to the registry and its answer back, except that while
`fail(path_prefix, status)` is set, a request whose path (percent-decoded, query left off) starts with the prefix
is answered with that status and the body a registry or a gateway in front of it sends:

- 401: `{"error_code": 401, "message": "Unauthorized"}` (the registry's basic-auth refusal);
- 403: `{"error_code": 40301, "message": "User is denied operation Read on Subject: ..."}` (its ACL refusal);
- 429: the text `Too Many Requests` (a rate-limiting gateway: no registry JSON);
- any other status: `{"error_code": <status>00, "message": "injected"}`.

`answered` counts the faulted answers by status; `heal()` lets everything through again.
"""
from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_BODIES = {
    401: ("application/json", {"error_code": 401, "message": "Unauthorized"}),
    403: ("application/json", {"error_code": 40301, "message": "User is denied operation Read on Subject: {subject}"}),
    429: ("text/plain", "Too Many Requests"),
}


class RegistryFaults:
    def __init__(self, upstream_url: str):
        parsed = urllib.parse.urlsplit(upstream_url)
        self._upstream = (parsed.hostname, parsed.port)
        self._lock = threading.Lock()
        self._fault: tuple[str, int] | None = None
        self.answered: Counter[int] = Counter()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> RegistryFaults:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, path_prefix: str, status: int) -> None:
        with self._lock:
            self._fault = (path_prefix, status)

    def heal(self) -> None:
        with self._lock:
            self._fault = None

    def _faulted(self, path: str) -> int | None:
        decoded = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        with self._lock:
            if self._fault is not None and decoded.startswith(self._fault[0]):
                self.answered[self._fault[1]] += 1
                return self._fault[1]
        return None

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _answer(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                status = proxy._faulted(self.path)
                if status is not None:
                    content_type, content = _BODIES.get(status, ("application/json",
                                                                 {"error_code": status * 100, "message": "injected"}))
                    if isinstance(content, dict):
                        content = json.dumps({**content, "message": content["message"].format(subject=self.path)})
                    self._answer(status, content_type, content.encode())
                    return
                connection = http.client.HTTPConnection(*proxy._upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    data = response.read()
                    self._answer(response.status, response.getheader("Content-Type") or "application/json", data)
                finally:
                    connection.close()

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        return Handler
