"""Outbound connection pools: N authenticated TCP connections per next-hop gateway.

All connections towards one next-hop region pull from one shared queue, so a chunk goes to
whichever connection is free (no round-robin): a slow connection or a slow gateway simply takes
fewer chunks. A failed send reports the chunk as lost (the control plane re-sends it) and the
connection reconnects with backoff; a next hop that stays unreachable is a job error.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zstandard
from tenacity import retry, stop_after_attempt, wait_exponential

from gateway_agent import wire
from gateway_agent.flow import Lease

log = logging.getLogger(__name__)


@dataclass
class OutChunk:
    """A chunk waiting for a connection; its lease is released once it is sent (or dropped)."""

    meta: dict[str, Any]
    payload: memoryview | bytes
    crc32c: int
    lease: Lease


@dataclass(frozen=True)
class Peer:
    gateway_id: str
    host: str
    port: int


@dataclass
class PoolCallbacks:
    """How a pool reports back to its job (kept as plain callables to avoid import cycles)."""

    sent: Callable[[OutChunk, int], None]
    lost: Callable[[OutChunk, str], None]
    fatal: Callable[[str], None]
    stopped: Callable[[], bool]
    extra: dict[str, Any] = field(default_factory=dict)


class OutboundPool:
    """Connections from this gateway to every gateway of one next-hop region."""

    def __init__(
        self,
        region: str,
        peers: list[Peer],
        connections_per_peer: int,
        secret: bytes,
        callbacks: PoolCallbacks,
        *,
        encrypt: bool = False,
        compress_level: int = 0,
    ) -> None:
        self.region = region
        self.queue: queue.Queue[OutChunk | None] = queue.Queue()
        self._secret = secret
        self._cb = callbacks
        self._encrypt = encrypt
        self._compress_level = compress_level
        self._threads: list[threading.Thread] = []
        self._alive = 0
        self._lock = threading.Lock()
        for peer in peers:
            for i in range(max(1, connections_per_peer)):
                t = threading.Thread(
                    target=self._run, args=(peer,), name=f"out-{peer.gateway_id}-{i}", daemon=True
                )
                self._threads.append(t)
        self._alive = len(self._threads)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def put(self, chunk: OutChunk) -> None:
        self.queue.put(chunk)

    def close(self) -> None:
        """Wake every connection thread so it can exit; queued chunks are dropped."""
        for _ in self._threads:
            self.queue.put(None)

    def drain(self) -> None:
        """Release the budget of chunks still queued (after a stop)."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item.lease.release()

    def _connect(self, peer: Peer) -> tuple[socket.socket, wire.Session]:
        @retry(
            stop=stop_after_attempt(6),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            reraise=True,
        )
        def attempt() -> tuple[socket.socket, wire.Session]:
            if self._cb.stopped():
                raise InterruptedError("job stopped")
            sock = socket.create_connection((peer.host, peer.port), timeout=5.0)
            try:
                wire.tune_socket(sock)
                session = wire.client_handshake(sock, self._secret, self._encrypt)
            except BaseException:
                sock.close()
                raise
            return sock, session

        return attempt()

    def _run(self, peer: Peer) -> None:
        compressor = (
            zstandard.ZstdCompressor(level=self._compress_level) if self._compress_level else None
        )
        conn: tuple[socket.socket, wire.Session] | None = None
        try:
            while not self._cb.stopped():
                if conn is None:
                    try:
                        conn = self._connect(peer)
                    except InterruptedError:
                        return
                    except (OSError, wire.HandshakeError) as exc:
                        self._cb.fatal(
                            f"next hop {peer.gateway_id} ({self.region}) at "
                            f"{peer.host}:{peer.port} is unreachable: {exc}"
                        )
                        return
                try:
                    item = self.queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                if item is None:
                    return
                sock, session = conn
                try:
                    n = wire.send_frame(
                        sock, session, item.meta, item.payload, item.crc32c, compressor
                    )
                except OSError as exc:
                    log.warning("send to %s failed: %s", peer.gateway_id, exc)
                    self._cb.lost(item, f"send to {peer.gateway_id} failed: {exc}")
                    item.lease.release()
                    sock.close()
                    conn = None
                    time.sleep(0.05)
                    continue
                item.lease.release()
                self._cb.sent(item, n)
        finally:
            if conn is not None:
                conn[0].close()
            with self._lock:
                self._alive -= 1
