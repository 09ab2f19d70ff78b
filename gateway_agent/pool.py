"""Outbound connection pools: N authenticated TCP connections per next-hop gateway.

All connections towards one next-hop region pull from one shared queue, so a chunk goes to
whichever connection is free (no round-robin): a slow connection or a slow gateway simply takes
fewer chunks. A failed send reports the chunk as lost (the control plane re-sends it) and the
connection reconnects with backoff. A next-hop gateway that stays unreachable is left out for
the rest of the job, its connections closed, while the region has other gateways; when none is
left the hop is a job error (the control plane routes around it or fails naming it).
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
from tenacity import retry, retry_if_not_exception_type, stop_after_attempt, wait_exponential

from gateway_agent import wire
from gateway_agent.flow import Lease
from gateway_agent.guard import set_io_timeout
from gateway_agent.ratelimit import TokenBucket

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


class Conn:
    """One authenticated connection to a next-hop gateway, used by one thread at a time."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.sock: socket.socket | None = None
        self.session: wire.Session | None = None
        self.compressor: Any = None
        self.last_used = time.monotonic()
        self.connecting: socket.socket | None = None  # mid-handshake (abort cuts it too)

    def stale(self, idle_s: float) -> bool:
        """Unused for so long that the receiver may have timed it out."""
        return self.sock is not None and time.monotonic() - self.last_used > idle_s

    def cut(self) -> None:
        """Shut the socket down (also mid-handshake), so a thread sending on it fails at once;
        the thread closes it."""
        for sock in (self.sock, self.connecting):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.session = None


class OutboundPool:
    """Connections from this gateway to every gateway of one next-hop region.

    Connections wait in a free queue. Buffered chunks (``put``) are sent by worker threads that
    take the next chunk and then the next free connection; a relay's receiver can ``borrow`` a
    free connection to splice a frame straight through. Either way a chunk goes to whichever
    connection is free, and when none is free the producer waits (back-pressure).
    """

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
        io_timeout: float = wire.DATA_IO_TIMEOUT_S,
        sender: str = "",
        rate: float | None = None,
    ) -> None:
        self.region = region
        # The hop's share of the transfer's bandwidth cap (bytes/s; None: none), taken by every
        # frame this gateway sends on the hop, buffered or spliced.
        self.bucket = TokenBucket(rate)
        self.sender = sender  # this gateway's id, named in each handshake
        self.io_timeout = io_timeout
        self.queue: queue.Queue[OutChunk | None] = queue.Queue()
        self.encrypt = encrypt
        self.compress_level = compress_level
        self._secret = secret
        self._cb = callbacks
        self._free: queue.Queue[Conn] = queue.Queue()
        self._conns = [Conn(p) for p in peers for _ in range(max(1, connections_per_peer))]
        self._peers = {p.gateway_id for p in peers}
        self.gone: set[str] = set()  # next-hop gateways left out after they became unreachable
        for c in self._conns:
            self._free.put(c)
        self.aborted = False
        self._threads = [
            threading.Thread(target=self._run, name=f"out-{region}-{i}", daemon=True)
            for i in range(len(self._conns))
        ]

    @property
    def plain(self) -> bool:
        """Frames leave this pool exactly as they arrive (no sealing, no compression)."""
        return not self.encrypt and not self.compress_level

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def put(self, chunk: OutChunk) -> None:
        self.queue.put(chunk)

    def close(self) -> None:
        """Wake every worker so it can exit; queued chunks are dropped by ``drain``."""
        for _ in self._threads:
            self.queue.put(None)

    def drop(self, unwanted: Callable[[dict[str, Any]], bool]) -> int:
        """Release queued chunks whose metadata is ``unwanted`` (their path was declared dead);
        returns how many were dropped."""
        with self.queue.mutex:
            keep = [c for c in self.queue.queue if c is None or not unwanted(c.meta)]
            gone = [c for c in self.queue.queue if c is not None and unwanted(c.meta)]
            self.queue.queue.clear()
            self.queue.queue.extend(keep)
        for c in gone:
            c.lease.release()
        return len(gone)

    def abort(self) -> None:
        """The next hop is dead: fail sends in progress at once (their chunks are reported lost
        and their budget released), drop what is queued, and send nothing more."""
        self.aborted = True
        self.drop(lambda meta: True)
        for c in self._conns:
            c.cut()

    def drain(self) -> None:
        """Release the budget of chunks still queued, and close connections (after a stop)."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.lease.release()
        for c in self._conns:
            c.close()

    # ---- connections ---------------------------------------------------------------------------

    def _connect(self, conn: Conn) -> None:
        peer = conn.peer

        @retry(
            stop=stop_after_attempt(6),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            retry=retry_if_not_exception_type(InterruptedError),
            reraise=True,
        )
        def attempt() -> tuple[socket.socket, wire.Session]:
            if self._cb.stopped() or self.aborted:
                raise InterruptedError("job stopped or next hop aborted")
            sock = socket.create_connection((peer.host, peer.port), timeout=5.0)
            conn.connecting = sock
            try:
                wire.tune_socket(sock)
                session = wire.client_handshake(sock, self._secret, self.encrypt, self.sender)
                set_io_timeout(sock, self.io_timeout)
            except BaseException:
                sock.close()
                raise
            finally:
                conn.connecting = None
            return sock, session

        conn.sock, conn.session = attempt()
        if self.compress_level and conn.compressor is None:
            conn.compressor = zstandard.ZstdCompressor(level=self.compress_level)

    def borrow(self) -> Conn | None:
        """The next free, connected connection; None if the job stopped or the peer is gone."""
        while not self._cb.stopped() and not self.aborted:
            try:
                conn = self._free.get(timeout=0.5)
            except queue.Empty:
                continue
            if conn.peer.gateway_id in self.gone:
                conn.close()  # out of service for good: not put back
                continue
            if conn.stale(self.io_timeout / 2):
                conn.close()
            if conn.sock is not None:
                return conn
            try:
                self._connect(conn)
                return conn
            except InterruptedError:
                self._free.put(conn)
                return None
            except (OSError, wire.HandshakeError) as exc:
                conn.close()
                why = (
                    f"next hop {conn.peer.gateway_id} ({self.region}) at "
                    f"{conn.peer.host}:{conn.peer.port} is unreachable: {exc}"
                )
                if not self.leave_out(conn.peer.gateway_id, why):
                    self._free.put(conn)
                    self._cb.fatal(why)
                    return None
        return None

    def leave_out(self, gateway_id: str, why: str) -> bool:
        """Stop using ``gateway_id`` (unreachable, or dead by the control plane's word) if the
        region has another gateway not left out: its connections are cut, so sends in progress
        fail at once (their chunks are reported lost, their budget released) instead of
        waiting out the I/O timeout on a stopped peer. False when it is the last one (the hop
        is then dead: that is the control plane's call)."""
        if gateway_id not in self._peers or not self._peers - self.gone - {gateway_id}:
            return False
        if gateway_id not in self.gone:
            self.gone.add(gateway_id)
            log.warning("%s; its chunks go to the region's other gateways", why)
            for c in self._conns:
                if c.peer.gateway_id == gateway_id:
                    c.cut()
        return True

    def give_back(self, conn: Conn, broken: bool = False) -> None:
        """Return a borrowed connection; a broken one reconnects on its next use, one to a
        gateway left out is closed for good."""
        if broken or conn.peer.gateway_id in self.gone:
            conn.close()
        conn.last_used = time.monotonic()
        if conn.peer.gateway_id not in self.gone:
            self._free.put(conn)

    def _run(self) -> None:
        while not self._cb.stopped():
            try:
                item = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None:
                return
            self.bucket.take(len(item.payload), self._cb.stopped)
            conn = self.borrow()
            if conn is None:
                item.lease.release()
                del item
                continue
            assert conn.sock is not None and conn.session is not None
            try:
                n = wire.send_frame(
                    conn.sock, conn.session, item.meta, item.payload, item.crc32c, conn.compressor
                )
            except OSError as exc:
                log.warning("send to %s failed: %s", conn.peer.gateway_id, exc)
                self._cb.lost(item, f"send to {conn.peer.gateway_id} failed: {exc}")
                item.lease.release()
                del item
                self.give_back(conn, broken=True)
                time.sleep(0.05)
                continue
            self.give_back(conn)
            item.lease.release()
            self._cb.sent(item, n)
            # Drop the payload now: a sender waiting for its next item must not pin a chunk
            # whose budget is already released (N connections x 64 MiB outside the budget).
            del item
