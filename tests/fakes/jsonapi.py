"""The HTTP plumbing the fake cloud APIs share (``gce``, ``azure_compute``): a JSON server on
loopback that hands each request to the fake's ``handle``, start/close, and the fault switch
that makes the n-th mutating request from now fail, and the one that makes it hang *after* it
did its work (a control plane killed there never learns what it created)."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONAPIFake:
    """Base of a fake REST API: a subclass sets ``lock``, ``mutations``, ``fail_at`` and ``vms``
    and answers ``handle(method, path, body) -> (status, json)``."""

    PROTOCOL = "HTTP/1.0"
    lock: threading.RLock
    mutations: list[str]
    fail_at: int | None
    vms: Mapping[Any, Any]

    def handle(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        raise NotImplementedError

    def refuse(self, headers: Any, method: str = "", path: str = "") -> tuple[int, Any] | None:
        """An error answer for a request the API would refuse before routing it (None: none)."""
        return None

    hang_at: int | None = None
    hanging: threading.Event | None = None  # set once a request hangs
    _release: threading.Event | None = None

    def hang_after(self, n: int | None) -> threading.Event:
        """Make the n-th mutating request from now do its work, then never answer (until
        ``close`` or ``hang_after`` again); the event returned is set when it hangs."""
        with self.lock:
            if self._release is not None:
                self._release.set()
            self.hang_at = None if n is None else len(self.mutations) + n
            self.hanging, self._release = threading.Event(), threading.Event()
            return self.hanging

    def _maybe_hang(self, method: str, done: int) -> None:
        """Hang the first mutating request that completes once ``hang_at`` were made."""
        with self.lock:
            hang = (
                method != "GET"
                and self.hang_at is not None
                and done >= self.hang_at
                and self.hanging is not None
                and not self.hanging.is_set()
            )
            if hang:
                assert self.hanging is not None
                self.hanging.set()
        if hang and self._release is not None:
            self._release.wait(120)

    def listen(self, tls: ssl.SSLContext | None = None) -> None:
        """Bind the server on a free loopback port (``url`` says where); ``start`` serves."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Any:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._release is not None:
            self._release.set()
        self.server.shutdown()
        self.server.server_close()
        for vm in self.vms.values():
            vm.stop()

    def fail_request(self, n: int | None) -> None:
        """Make the n-th mutating request from now fail (None: no fault)."""
        with self.lock:
            self.fail_at = None if n is None else len(self.mutations) + n


def _handler(fake: JSONAPIFake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = fake.PROTOCOL

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            refused = fake.refuse(self.headers, self.command, self.path)
            status, result = refused or fake.handle(self.command, self.path, body)
            with fake.lock:
                index = len(fake.mutations)
            fake._maybe_hang(self.command, index)
            data = json.dumps(result).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
