"""A small HTTP proxy for tests: forwards to one upstream, records every request and can
mangle request bodies on the way (to show that a store refuses bytes corrupted in transit)."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# (method, path?query, body) -> the body to forward
Mangle = Callable[[str, str, bytes], bytes]
# (method, path?query, headers) -> (status, body) to answer instead of the upstream, or None
Answer = Callable[[str, str, dict[str, str]], tuple[int, bytes] | None]


class CountingProxy:
    """Forwards HTTP requests to one upstream and records ``(method, path?query)`` of each;
    ``mangle`` may change a request body before it is forwarded; ``answer`` may answer a
    request itself (an error the upstream would not give) instead of forwarding it."""

    def __init__(self, upstream: str, mangle: Mangle | None = None, answer: Answer | None = None):
        target = urlsplit(upstream)
        self.requests: list[tuple[str, str]] = []
        # Per request, in the order of ``requests``: when it came and its headers.
        self.heads: list[tuple[float, dict[str, str]]] = []
        lock = threading.Lock()
        log = self.requests
        heads = self.heads

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                with lock:
                    log.append((self.command, self.path))
                    heads.append((time.time(), dict(self.headers.items())))
                assert "chunked" not in self.headers.get("Transfer-Encoding", "")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if body is not None and mangle is not None:
                    body = mangle(self.command, self.path, body)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                own = answer(self.command, self.path, headers) if answer is not None else None
                answered: str | None = None
                if own is not None:
                    status, data = own
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                else:
                    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                    finally:
                        conn.close()
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                            self.send_header(k, v)
                    # A HEAD's answer has no body but the object's length (a store reads the
                    # size from it): passed on as the server sent it.
                    if self.command == "HEAD":
                        answered = resp.getheader("Content-Length")
                self.send_header("Content-Length", answered or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the test reads ``requests``

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def object_gets(self, bucket: str) -> list[str]:
        """GETs of object bytes in ``bucket`` (not listings, not ListParts)."""
        prefix = f"/{bucket}/"
        return [
            path
            for method, path in self.requests
            if method == "GET" and path.startswith(prefix) and "uploadId=" not in path
        ]
