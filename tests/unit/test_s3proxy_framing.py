"""testkit/s3proxy.py forwards messages byte for byte, whatever frames them: a scripted upstream on loopback records
what arrives and answers with canned bytes, on one keep-alive connection."""
from __future__ import annotations

import socket
import threading

from testkit.s3proxy import S3Proxy

CHUNKED_PUT = (b"PUT /b/k?x-id=PutObject HTTP/1.1\r\nHost: 127.0.0.1:1\r\nX-Odd-Case: v\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
CHUNKED_ANSWER = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"e\"\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
HEAD = b"HEAD /b/k HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"
HEAD_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nLast-Modified: x\r\n\r\n"
EXPECTING_PUT_HEAD = b"PUT /b/e HTTP/1.1\r\nHost: 127.0.0.1:1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CREATED = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def _read_until(sock: socket.socket, wanted: int) -> bytes:
    data = b""
    sock.settimeout(10)
    while len(data) < wanted:
        block = sock.recv(65536)
        assert block, f"connection closed after {data!r}"
        data += block
    return data


def test_chunked_bodies_head_answers_and_100_continue_pass_unchanged():
    upstream = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = upstream.accept()
        with conn:
            received.append(_read_until(conn, len(CHUNKED_PUT)))
            conn.sendall(CHUNKED_ANSWER)
            received.append(_read_until(conn, len(HEAD)))
            conn.sendall(HEAD_ANSWER)
            received.append(_read_until(conn, len(EXPECTING_PUT_HEAD)))
            conn.sendall(CONTINUE)
            received.append(_read_until(conn, 4))
            conn.sendall(CREATED)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    with upstream, S3Proxy(f"http://127.0.0.1:{upstream.getsockname()[1]}") as proxy, \
            socket.create_connection(("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1]))) as client:
        client.sendall(CHUNKED_PUT)
        assert _read_until(client, len(CHUNKED_ANSWER)) == CHUNKED_ANSWER
        client.sendall(HEAD)
        assert _read_until(client, len(HEAD_ANSWER)) == HEAD_ANSWER  # and no body: the next answer follows
        client.sendall(EXPECTING_PUT_HEAD)
        assert _read_until(client, len(CONTINUE)) == CONTINUE  # the body waits for the upstream's 100
        client.sendall(b"data")
        assert _read_until(client, len(CREATED)) == CREATED
        server.join(10)
    assert received == [CHUNKED_PUT, HEAD, EXPECTING_PUT_HEAD, b"data"]
    assert proxy.counters.requests == 3
