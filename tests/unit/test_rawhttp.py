"""``s3/rawhttp.py``: the S3 fast path's connections, against a real socket server on loopback.

The server answers each request on a connection from a script of raw answers (bytes as they
go on the wire), so kept-alive reuse, a connection the server closed while idle, ``Connection:
close``, chunked bodies and an answer cut short are each what a real peer sends.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from gateway_agent.stores.s3 import rawhttp

pytestmark = pytest.mark.skipif(not rawhttp.available, reason="httptools is not installed")

OK = b'HTTP/1.1 200 OK\r\nETag: "e"\r\nContent-Length: 2\r\n\r\nok'
CLOSE = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
CHUNKED = (
    b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n<E>\r\n2\r\nrr\r\n0\r\n\r\n"
)
CUT = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"


class Scripted:
    """Loopback server: connection i answers its requests with ``scripts[i]`` in order, then
    closes (``None`` in a script: close at once, before answering that request)."""

    def __init__(self, scripts: list[list[bytes | None]]) -> None:
        self.scripts = scripts
        self.requests: list[tuple[int, bytes]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for n, script in enumerate(self.scripts):
            conn, _ = self.listener.accept()
            with conn:
                for answer in script:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    while len(body) < length:
                        body += conn.recv(65536)
                    self.requests.append((n, head.split(b"\r\n")[0]))
                    if answer is None:
                        break
                    conn.sendall(answer)

    def connections(self) -> rawhttp.Connections:
        return rawhttp.Connections(
            "127.0.0.1", self.port, tls=None, connect_timeout=5, read_timeout=5, max_idle=4
        )


@pytest.fixture
def scripted() -> Iterator[type[Scripted]]:
    made: list[Scripted] = []

    class Made(Scripted):
        def __init__(self, scripts: list[list[bytes | None]]) -> None:
            super().__init__(scripts)
            made.append(self)

    yield Made
    for server in made:
        server.listener.close()


def _put(conns: rawhttp.Connections, path: str) -> rawhttp.Answer:
    return conns.request("PUT", path, {"Host": "h"}, b"body")


def test_one_connection_carries_request_after_request(scripted: type[Scripted]) -> None:
    server = scripted([[OK, OK, OK]])
    conns = server.connections()
    answers = [_put(conns, f"/k{i}") for i in range(3)]
    assert [(a.status, a.headers["etag"], a.data) for a in answers] == [(200, '"e"', b"ok")] * 3
    assert [n for n, _ in server.requests] == [0, 0, 0]  # all on the first connection


def test_a_connection_closed_while_idle_is_replaced_once(scripted: type[Scripted]) -> None:
    server = scripted([[OK, None], [OK]])
    conns = server.connections()
    assert _put(conns, "/a").status == 200
    assert _put(conns, "/b").data == b"ok"  # the kept one was closed: sent again on a new one
    assert [(n, line) for n, line in server.requests] == [
        (0, b"PUT /a HTTP/1.1"),
        (0, b"PUT /b HTTP/1.1"),
        (1, b"PUT /b HTTP/1.1"),
    ]


def test_connection_close_is_honoured_and_chunked_bodies_are_read(
    scripted: type[Scripted],
) -> None:
    server = scripted([[CLOSE], [CHUNKED]])
    conns = server.connections()
    assert _put(conns, "/a").data == b"ok"
    answer = _put(conns, "/b")
    assert (answer.status, answer.data) == (404, b"<E>rr")
    assert [n for n, _ in server.requests] == [0, 1]


def test_an_answer_cut_short_fails_and_is_not_sent_again(scripted: type[Scripted]) -> None:
    server = scripted([[CUT]])
    with pytest.raises(ConnectionError):
        _put(server.connections(), "/a")
    assert len(server.requests) == 1


def test_a_fresh_connection_closed_at_once_is_an_error(scripted: type[Scripted]) -> None:
    server = scripted([[None]])
    with pytest.raises(ConnectionError):
        _put(server.connections(), "/a")
    assert len(server.requests) == 1
