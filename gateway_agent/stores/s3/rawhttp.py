"""Small HTTP/1.1 requests over kept-alive sockets, their answers parsed by httptools (llhttp).

Why: through urllib3 and http.client a 1 KiB PutObject costs about 0.45 ms of CPU besides its
signature (http.client parses every answer's headers with the ``email`` package); here it is
about 0.13 ms, so one gateway process keeps several times more small requests in flight. Only
what the S3 fast path sends: a request whose head and body are in memory, its answer read
whole (``Content-Length`` or chunked, as S3 always frames them).

A connection is kept for the next request when the answer allows it. A kept connection the
server closed meanwhile (S3 drops idle ones after a few seconds) fails before any byte of an
answer arrives: that request is sent once more on a fresh connection. Every other failure is
an ``OSError`` for the caller's retry policy. Meant for idempotent requests (a whole-object
PUT, a GET): one sent twice does no harm. ``available`` is False when httptools is not
installed (the caller then uses urllib3).
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any

try:
    import httptools

    available = True
except ImportError:  # pragma: no cover - the S3 fast path falls back to urllib3
    available = False
RECV = 65536


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    data: bytes


class _Stale(ConnectionError):
    """A kept connection was closed before any byte of the answer came back."""


class _Reader:
    """httptools' callbacks: the answer's headers and body as they are parsed."""

    __slots__ = ("body", "done", "headers", "keep", "parser")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.done = False
        self.keep = False
        self.parser: Any = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        # Asked now: once the message is complete the parser starts over and forgets it.
        self.keep = bool(self.parser.should_keep_alive())
        self.done = True


class Connections:
    """Kept-alive connections to one origin (``host``:``port``, TLS with ``tls``); thread-safe:
    each request takes a connection of its own."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
        max_idle: int,
    ) -> None:
        self._address = (host, port)
        self._tls = tls
        self._server_name = host
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_idle = max_idle
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        """Send ``method target`` with ``headers`` (``Host`` included) and ``body``; the answer."""
        lines = [f"{method} {target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        message = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        while True:
            sock, kept = self._take()
            try:
                try:
                    sock.sendall(message)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    raise _Stale(f"connection closed before the request: {exc}") from None
                answer, keep = self._read(sock)
            except _Stale:
                sock.close()
                if kept:
                    continue  # closed by the server while idle: once more on a new one
                raise
            except BaseException:
                sock.close()
                raise
            if keep:
                self._give(sock)
            else:
                sock.close()
            return answer

    def _take(self) -> tuple[Any, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        sock = socket.create_connection(self._address, timeout=self._connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._server_name)
            sock.settimeout(self._read_timeout)
        except BaseException:
            sock.close()
            raise
        return sock, False

    def _give(self, sock: Any) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(sock)
                return
        sock.close()

    def _read(self, sock: Any) -> tuple[Answer, bool]:
        reader = _Reader()
        parser = reader.parser = httptools.HttpResponseParser(reader)
        got = 0
        while not reader.done:
            try:
                data = sock.recv(RECV)
            except ConnectionResetError:
                if got:
                    raise
                raise _Stale("connection reset before the answer") from None
            if not data:
                if got:
                    raise ConnectionError("connection closed in the middle of an answer")
                raise _Stale("connection closed before the answer")
            got += len(data)
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as exc:
                raise ConnectionError(f"malformed HTTP answer: {exc}") from None
        answer = Answer(parser.get_status_code(), reader.headers, b"".join(reader.body))
        return answer, reader.keep

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()
