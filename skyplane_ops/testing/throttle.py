"""A rate-limited TCP forwarder: a slow link in front of a fast local server.

A test that must stop a transfer half-way needs the transfer to take a while whatever the
machine's speed, without hooks in the code under test: point a store's endpoint at this
forwarder (in front of an S3 emulator, say) and every byte the server sends back comes at
most at ``rate_bps`` in total, over however many connections, like a shared WAN link.
Requests towards the server pass unthrottled.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator


class _Bucket:
    """A token bucket shared by every connection (bytes per second, one second of burst)."""

    def __init__(self, rate_bps: float) -> None:
        self.rate = float(rate_bps)
        self.tokens = self.rate
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= nbytes:
                    self.tokens -= nbytes
                    return
                wait = (nbytes - self.tokens) / self.rate
            time.sleep(min(wait, 0.25))


class ThrottledProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream``; server-to-client bytes at ``rate_bps``."""

    CHUNK = 16 << 10

    def __init__(self, upstream: tuple[str, int], rate_bps: float) -> None:
        self.upstream = upstream
        self.bucket = _Bucket(rate_bps)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.stopped = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=30)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        with self._lock:
            self._open.update((client, server))
        up = threading.Thread(target=self._pump, args=(client, server, False), daemon=True)
        up.start()
        self._pump(server, client, True)
        up.join()
        with self._lock:
            self._open.difference_update((client, server))
        for sock in (client, server):
            sock.close()

    def _pump(self, src: socket.socket, dst: socket.socket, throttled: bool) -> None:
        try:
            while True:
                data = src.recv(self.CHUNK)
                if not data:
                    break
                if throttled:
                    self.bucket.take(len(data))
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def throttled_proxy(upstream: tuple[str, int], rate_bps: float) -> Iterator[ThrottledProxy]:
    """A running :class:`ThrottledProxy` (a thread of this process) for the block."""
    proxy = ThrottledProxy(upstream, rate_bps)
    thread = threading.Thread(target=proxy.serve, name="throttled-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.close()
        thread.join(timeout=5)
