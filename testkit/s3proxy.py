"""A faulty S3 in front of a real one, for tests: a threaded HTTP/1.1 reverse proxy on 127.0.0.1.

`S3Proxy(upstream)` forwards every request and every answer byte for byte (request line, headers with Host and
their order and case, bodies framed by Content-Length or chunked Transfer-Encoding, S3A's `aws-chunked` bodies
with their streaming signatures untouched, `Expect: 100-continue`, HEAD answers without a body), so the server
checks the client's own signatures. Two faults can be switched on:

- `put_delay_s`: a PUT whose path matches `delay_path_pattern` (by default a Delta log file) waits that long before
  it is forwarded, so two writers can be made to race one log version;
- `strip_conditional`: `If-None-Match` is removed from PUTs and the request is signed again with the given
  credentials (SigV4, us-east-1, s3; the client's x-amz-content-sha256 kept), so the server sees a valid
  unconditional PUT: a store that ignores conditional writes. A PUT with a streaming-signed body
  (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`) gets its chunk signatures signed again as well, since each chains from
  the header's.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

REGION = "us-east-1"
SERVICE = "s3"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


FRAMING_HEADERS = ("content-length", "transfer-encoding", "content-encoding", "x-amz-content-sha256", "expect")


@dataclass(frozen=True)
class Seen:
    """One request as it came: its method, path and the headers that frame or sign its body; its query, client
    (User-Agent) and arrival (time.time()) for attributing requests."""

    method: str
    path: str
    framing: dict[str, str]
    query: str = ""
    agent: str = ""
    at: float = 0.0


@dataclass
class Counters:
    requests: int = 0
    puts_delayed: int = 0
    conditionals_stripped: int = 0
    delayed_paths: list[str] = field(default_factory=list)
    stripped_paths: list[str] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    answers: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, final status) of each request


class _Head:
    """A request or status line and its headers, as raw as they came (names keep their case and order)."""

    def __init__(self, start_line: bytes, headers: list[tuple[bytes, bytes]]):
        self.start_line = start_line
        self.headers = headers

    def get(self, name: str) -> str | None:
        wanted = name.lower().encode()
        for key, value in self.headers:
            if key.strip().lower() == wanted:
                return value.strip().decode("latin-1")
        return None

    def remove(self, name: str) -> bool:
        wanted = name.lower().encode()
        before = len(self.headers)
        self.headers = [(k, v) for k, v in self.headers if k.strip().lower() != wanted]
        return len(self.headers) != before

    def set(self, name: str, value: str) -> None:
        """Replace the header's value where it stands, or append it."""
        wanted = name.lower().encode()
        for i, (key, _) in enumerate(self.headers):
            if key.strip().lower() == wanted:
                self.headers[i] = (key, b" " + value.encode("latin-1"))
                return
        self.headers.append((name.encode(), b" " + value.encode("latin-1")))

    def encode(self) -> bytes:
        return self.start_line + b"".join(k + b":" + v + b"\r\n" for k, v in self.headers) + b"\r\n"


def _read_head(stream) -> _Head | None:
    """One head from a buffered socket stream; None at a clean end of the connection."""
    start = stream.readline(65537)
    while start in (b"\r\n", b"\n"):  # tolerated between messages (RFC 9112 2.2)
        start = stream.readline(65537)
    if not start:
        return None
    headers: list[tuple[bytes, bytes]] = []
    while True:
        line = stream.readline(65537)
        if not line:
            raise ConnectionError("connection closed inside a message head")
        if line in (b"\r\n", b"\n"):
            return _Head(start, headers)
        name, sep, value = line.rstrip(b"\r\n").partition(b":")
        if not sep:
            raise ConnectionError(f"malformed header line {line!r}")
        headers.append((name, value))


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise ConnectionError(f"connection closed {n - len(data)} bytes before the end of a body")
    return data


def _copy_exact(stream, n: int, out: socket.socket) -> None:
    while n > 0:
        block = stream.read(min(n, 1 << 16))
        if not block:
            raise ConnectionError(f"connection closed {n} bytes before the end of a body")
        out.sendall(block)
        n -= len(block)


def _copy_chunked(stream, out: socket.socket) -> None:
    """A chunked body, chunk-size lines, extensions and trailers included, as it came."""
    while True:
        size_line = stream.readline(65537)
        if not size_line:
            raise ConnectionError("connection closed inside a chunked body")
        out.sendall(size_line)
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while True:  # trailers, then the empty line
                line = stream.readline(65537)
                if not line:
                    raise ConnectionError("connection closed inside a chunked body's trailers")
                out.sendall(line)
                if line in (b"\r\n", b"\n"):
                    return
        _copy_exact(stream, size + 2, out)  # the data and its CRLF


def _copy_body(head: _Head, stream, out: socket.socket, *, is_response: bool, to_close: bool) -> None:
    if head.get("transfer-encoding") and "chunked" in head.get("transfer-encoding").lower():
        _copy_chunked(stream, out)
    elif head.get("content-length") is not None:
        _copy_exact(stream, int(head.get("content-length")), out)
    elif is_response and to_close:  # delimited by the end of the connection
        while block := stream.read1(1 << 16):
            out.sendall(block)


def _wants_close(head: _Head, http10: bool) -> bool:
    connection = (head.get("connection") or "").lower()
    return "close" in connection or (http10 and "keep-alive" not in connection)


class _Signer:
    """SigV4 of a forwarded request, by botocore's signer, keeping the client's x-amz-content-sha256."""

    def __init__(self, access_key: str, secret_key: str):
        from botocore.credentials import Credentials

        self.credentials = Credentials(access_key, secret_key)
        self.secret_key = secret_key

    def sign(self, head: _Head) -> tuple[str, str, str]:
        """Sign `head` in place (Authorization, X-Amz-Date); returns (signature, amz date, credential scope)."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        method, target, _ = head.start_line.decode("latin-1").split(" ", 2)
        content_sha = head.get("x-amz-content-sha256") or "UNSIGNED-PAYLOAD"

        class KeepPayloadHash(S3SigV4Auth):
            def payload(self, request):
                return content_sha

        for name in ("authorization", "x-amz-date"):
            head.remove(name)
        headers = {k.strip().decode("latin-1"): v.strip().decode("latin-1") for k, v in head.headers}
        request = AWSRequest(method=method, url=f"http://{head.get('host')}{target}", headers=headers)
        signer = KeepPayloadHash(self.credentials, SERVICE, REGION)
        signer.add_auth(request)
        head.set("Authorization", request.headers["Authorization"])
        head.set("X-Amz-Date", request.headers["X-Amz-Date"])
        signature = request.headers["Authorization"].rsplit("Signature=", 1)[1]
        scope = request.headers["Authorization"].split("Credential=", 1)[1].split(",", 1)[0].split("/", 1)[1]
        return signature, request.headers["X-Amz-Date"], scope

    def chunk_signature(self, previous: str, amz_date: str, scope: str, data: bytes) -> str:
        """The signature of one chunk of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body (it chains from `previous`)."""
        date, region, service, _ = scope.split("/")
        to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous, EMPTY_SHA256,
                             hashlib.sha256(data).hexdigest()])
        key = f"AWS4{self.secret_key}".encode()
        for part in (date, region, service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


class S3Proxy:
    """See the module's docstring. Use as a context manager; `.endpoint` is its URL, `.counters` what it did."""

    def __init__(self, upstream_endpoint: str, *, put_delay_s: float = 0.0, delay_path_pattern: str = r"/_delta_log/",
                 strip_conditional: bool = False, access_key: str | None = None, secret_key: str | None = None):
        parsed = urllib.parse.urlparse(upstream_endpoint)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"S3Proxy forwards to a plain http:// endpoint, not {upstream_endpoint!r}")
        if strip_conditional and not (access_key and secret_key):
            raise ValueError("strip_conditional signs the requests again: give access_key and secret_key")
        self.upstream = (parsed.hostname, parsed.port or 80)
        self.put_delay_s = put_delay_s
        self.delay_path = re.compile(delay_path_pattern)
        self.strip_conditional = strip_conditional
        self.signer = _Signer(access_key, secret_key) if strip_conditional else None
        self.counters = Counters()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._endpoint: str | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        self._closing = threading.Event()
        # the armed rendezvous: the next PUT matching `delay_path_pattern` waits for a second PUT of the same path
        self._armed = False
        self.held: str | None = None
        self._released = threading.Event()
        self.rendezvous: list[str] = []  # paths whose two PUTs were sent on together

    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("the proxy is not started: use it as a context manager, or call start()")
        return self._endpoint

    def start(self) -> "S3Proxy":
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._endpoint = "http://127.0.0.1:%d" % self._listener.getsockname()[1]
        accept = threading.Thread(target=self._accept_loop, name="s3proxy-accept", daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._listener is not None:
            _shut(self._listener)  # wakes the thread blocked in accept()
        with self._lock:
            for sock in list(self._sockets):
                _shut(sock)
        for thread in list(self._threads):
            thread.join(timeout=5)

    def __enter__(self) -> "S3Proxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _count(self, name: str, what) -> None:
        with self._lock:
            setattr(self.counters, name, getattr(self.counters, name) + 1)
            {"requests": self.counters.seen, "puts_delayed": self.counters.delayed_paths,
             "conditionals_stripped": self.counters.stripped_paths}[name].append(what)

    def arm_rendezvous(self) -> None:
        """Hold the next PUT matching `delay_path_pattern` until a second PUT of the same path arrives (or
        `release()`), then send both on: two writers of one Delta log version PUT it at the same moment."""
        with self._lock:
            self._armed, self.held = True, None
            self._released.clear()

    def release(self) -> None:
        with self._lock:
            self._armed = False
        self._released.set()

    def _meet(self, path: str) -> None:
        with self._lock:
            if self.held is None and self._armed:
                self.held = path
                first = True
            elif self.held == path and not self._released.is_set():
                self._armed = False
                self.rendezvous.append(path)
                self._released.set()
                return
            else:
                return
        if first:
            self._released.wait(120)
            with self._lock:
                self.held = None

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._closing.is_set():
                    return
                time.sleep(0.05)  # a transient failure (a connection reset before it was accepted): go on
                continue
            thread = threading.Thread(target=self._serve, args=(client,), name="s3proxy-conn", daemon=True)
            with self._lock:
                self._sockets.add(client)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        # a head and its body go on in separate writes: without this each waits for the peer's delayed ACK (~40 ms)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            client_in = client.makefile("rb")
            upstream_in = None
            while not self._closing.is_set():
                head = _read_head(client_in)
                if head is None:
                    return
                method, target, version = head.start_line.decode("latin-1").split(" ", 2)
                parts = urllib.parse.urlsplit(target)
                path = parts.path
                self._count("requests", Seen(method, path, {name: head.get(name) for name in FRAMING_HEADERS
                                                            if head.get(name) is not None},
                                             parts.query, head.get("user-agent") or "", time.time()))
                if method == "PUT" and self.delay_path.search(path):
                    self._meet(path)
                if method == "PUT" and self.put_delay_s > 0 and self.delay_path.search(path):
                    self._count("puts_delayed", path)
                    time.sleep(self.put_delay_s)
                resign_chunks = None
                if method == "PUT" and self.strip_conditional and head.remove("if-none-match"):
                    self._count("conditionals_stripped", path)
                    signature, amz_date, scope = self.signer.sign(head)
                    if head.get("x-amz-content-sha256") == STREAMING_SIGNED:
                        resign_chunks = (signature, amz_date, scope)
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=120)
                    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    with self._lock:
                        self._sockets.add(upstream)
                    upstream_in = upstream.makefile("rb")
                upstream.sendall(head.encode())
                answer = None
                if "100-continue" in (head.get("expect") or "").lower():
                    answer = _read_head(upstream_in)
                    if answer is None:
                        return
                    if answer.start_line.split(b" ", 2)[1] == b"100":
                        client.sendall(answer.encode())
                        answer = None
                if answer is None:
                    if resign_chunks:
                        self._forward_resigned_chunks(head, client_in, upstream, *resign_chunks)
                    else:
                        _copy_body(head, client_in, upstream, is_response=False, to_close=False)
                    answer = _read_head(upstream_in)
                    while answer is not None and answer.start_line.split(b" ", 2)[1].startswith(b"1"):
                        client.sendall(answer.encode())  # another interim answer: pass it on, read the final one
                        answer = _read_head(upstream_in)
                    if answer is None:
                        return
                    body_skipped = False
                else:  # a final answer instead of 100 Continue: the client's body is not read, so the link ends
                    body_skipped = True
                status = int(answer.start_line.split(b" ", 2)[1])
                with self._lock:
                    self.counters.answers.append((method, path, status))
                closing = body_skipped or _wants_close(answer, answer.start_line.startswith(b"HTTP/1.0")) or \
                    _wants_close(head, version.strip() == "HTTP/1.0")
                client.sendall(answer.encode())
                if method != "HEAD" and status not in (204, 304):
                    _copy_body(answer, upstream_in, client, is_response=True, to_close=closing)
                if closing:
                    return
        except (OSError, ConnectionError, ValueError):
            return
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    _shut(sock)
                    with self._lock:
                        self._sockets.discard(sock)

    def _forward_resigned_chunks(self, head: _Head, stream, out: socket.socket, signature: str, amz_date: str,
                                 scope: str) -> None:
        """An aws-chunked body whose chunk signatures chain from the new seed signature. Each chunk keeps its size,
        and so its length, so Content-Length still holds."""
        if head.get("content-length") is None:
            raise ConnectionError("an aws-chunked body without Content-Length is not supported")
        previous = signature
        while True:
            size_line = stream.readline(65537)
            if not size_line:
                raise ConnectionError("connection closed inside an aws-chunked body")
            size_text, _, extension = size_line.rstrip(b"\r\n").partition(b";")
            size = int(size_text, 16)
            data = _read_exact(stream, size + 2)[:size]
            if extension.startswith(b"chunk-signature="):
                previous = self.signer.chunk_signature(previous, amz_date, scope, data)
                extension = b"chunk-signature=" + previous.encode()
            out.sendall(size_text + (b";" + extension if extension else b"") + b"\r\n" + data + b"\r\n")
            if size == 0:
                return


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
