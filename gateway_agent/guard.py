"""Listener hygiene shared by the control API and the data listener.

Two things a stranger on a gateway's ports must not be able to do: stop the accept loop (one
``EMFILE`` used to end the data listener for good) and pin unbounded threads and descriptors
with connections that never authenticate. ``accept_forever`` backs off and goes on after
descriptor exhaustion; ``ConnectionGate`` caps connections that have not authenticated yet,
evicting the oldest when a new one arrives (a real client authenticates within milliseconds,
so it wins against idle strangers instead of being refused while they hold every slot).
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# accept() errors that mean "out of something for now": wait and try again.
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# accept() errors about the one connection being accepted: just take the next.
_PER_CONNECTION = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR, errno.EAGAIN}
BACKOFF_S = (0.05, 1.0)


def accept_forever(
    listener: socket.socket,
    handle: Callable[[socket.socket, Any], None],
    stopping: threading.Event,
    name: str,
) -> None:
    """Accept until ``stopping`` is set (or the listener is closed), calling ``handle``.

    Descriptor or memory exhaustion is logged once per episode and retried with exponential
    backoff; the loop never ends on it.
    """
    delay = BACKOFF_S[0]
    exhausted = False
    while not stopping.is_set():
        try:
            sock, addr = listener.accept()
        except OSError as exc:
            if stopping.is_set() or exc.errno in (errno.EBADF, errno.EINVAL, None):
                return  # the listener was shut down or closed
            if exc.errno in _PER_CONNECTION:
                continue
            if not exhausted:
                log.warning("%s: accept failed (%s); backing off and retrying", name, exc)
                exhausted = True
            stopping.wait(delay)
            delay = min(BACKOFF_S[1], delay * 2)
            continue
        if exhausted:
            log.warning("%s: accepting again", name)
            exhausted, delay = False, BACKOFF_S[0]
        handle(sock, addr)


class ConnectionGate:
    """At most ``limit`` connections still unauthenticated; the oldest gives way to a new one."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.evicted = 0
        self._lock = threading.Lock()
        self._pending: OrderedDict[int, socket.socket] = OrderedDict()

    def admit(self, sock: socket.socket) -> None:
        """Register a fresh connection, shutting the oldest pending one down if at the cap."""
        victims = []
        with self._lock:
            while len(self._pending) >= self.limit:
                victims.append(self._pending.popitem(last=False)[1])
                self.evicted += 1
            self._pending[id(sock)] = sock
        for v in victims:
            shut(v)

    def release(self, sock: socket.socket) -> None:
        """The connection authenticated or ended: it no longer counts."""
        with self._lock:
            self._pending.pop(id(sock), None)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)


def shut(sock: socket.socket) -> None:
    """``shutdown(SHUT_RDWR)``: wakes threads blocked on the socket (``close`` alone does not)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def set_io_timeout(sock: socket.socket, seconds: float) -> None:
    """Kernel send/receive timeouts (SO_SNDTIMEO/SO_RCVTIMEO) on a blocking socket.

    Unlike ``settimeout`` this keeps the descriptor blocking, so ``splice`` still works, and it
    bounds ``splice`` too: a peer that stops reading or writing fails the call after
    ``seconds`` instead of pinning the thread forever.
    """
    if seconds <= 0:
        return
    sec = int(seconds)
    tv = struct.pack("ll", sec, int((seconds - sec) * 1e6))
    for opt in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, tv)
        except OSError:
            pass


class Deadline:
    """A wall-clock budget for reading one thing (e.g. a request head) in several recv calls."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left
