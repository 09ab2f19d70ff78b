"""Hop-by-hop flow control: one byte budget per gateway, and the buffers it lends out.

Every chunk held in memory (read from the store, received from upstream, waiting for a
downstream connection or a store write) holds a ``Lease`` on the budget. Receivers acquire
before reading a payload off the socket, so a full budget stops a relay from reading upstream;
TCP back-pressure then throttles the sender. Receive buffers are recycled through a free list
whose total (in use + free) never exceeds the budget, which keeps the resident memory bounded
and avoids faulting in fresh pages for every chunk.
"""

from __future__ import annotations

import mmap
import threading

_ALIGN = 1024 * 1024

# A pooled buffer: anonymous memory mapped fresh from the kernel. A ``bytearray(n)`` would be
# zero-filled by the interpreter with the GIL held (60 ms for 64 MiB, every page faulted in at
# once): at a job's start, eight readers allocating their first buffers stalled every other
# thread, the senders included, and the first bytes left ~0.4 s after the first descriptor
# came. The kernel's pages are zero already and fault in during the read that fills them,
# outside the GIL.
Buffer = bytearray | mmap.mmap


def new_buffer(size: int) -> mmap.mmap:
    """``size`` bytes of private anonymous memory (zero, faulted in on first touch)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class ByteBudget:
    """A counting semaphore in bytes plus a bounded pool of reusable buffers."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0
        self.peak = 0
        self._cond = threading.Condition()
        self._free: list[Buffer] = []
        self._pooled = 0  # bytes of all pool buffers, lent out or free

    def acquire(
        self, n: int, timeout: float | None = None, cancel: threading.Event | None = None
    ) -> bool:
        """Block until ``n`` bytes fit (a request above capacity is clamped).

        False on timeout, or as soon as ``cancel`` is set and ``wake()`` is called (a stopping
        job or agent must not wait for a lease it will never use).
        """
        n = min(n, self.capacity)
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (
                    self.in_use + n <= self.capacity or (cancel is not None and cancel.is_set())
                ),
                timeout,
            )
            if not ok or self.in_use + n > self.capacity:
                return False
            self.in_use += n
            self.peak = max(self.peak, self.in_use)
            return True

    def release(self, n: int) -> None:
        n = min(n, self.capacity)
        with self._cond:
            self.in_use = max(0, self.in_use - n)
            self._cond.notify_all()

    def lease(
        self, n: int, timeout: float | None = None, cancel: threading.Event | None = None
    ) -> Lease | None:
        """Acquire ``n`` bytes as a ``Lease`` (None on timeout or cancellation)."""
        return Lease(self, n) if self.acquire(n, timeout, cancel) else None

    def wake(self) -> None:
        """Make every waiter re-check its ``cancel`` event now."""
        with self._cond:
            self._cond.notify_all()

    # ---- buffer pool ---------------------------------------------------------------------------

    def take_buffer(self, n: int) -> Buffer:
        """A buffer of at least ``n`` bytes, reused when one of a fitting size is free."""
        size = max(_ALIGN, -(-n // _ALIGN) * _ALIGN)
        with self._cond:
            for i, buf in enumerate(self._free):
                if size <= len(buf) <= 2 * size:
                    return self._free.pop(i)
            # Make room: drop free buffers until the pool fits the budget again.
            while self._free and self._pooled + size > self.capacity:
                self._pooled -= len(self._free.pop())
            self._pooled += size
        return new_buffer(size)

    def give_buffer(self, buf: Buffer) -> None:
        with self._cond:
            if self._pooled <= self.capacity:
                self._free.append(buf)
            else:
                self._pooled -= len(buf)


class Lease:
    """``n`` bytes of budget (and maybe a pooled buffer), released exactly once."""

    __slots__ = ("_done", "budget", "buffer", "n")

    def __init__(self, budget: ByteBudget, n: int, buffer: Buffer | None = None) -> None:
        self.budget = budget
        self.n = n
        self.buffer = buffer
        self._done = False

    def release(self) -> None:
        if self._done:
            return
        self._done = True
        if self.buffer is not None:
            self.budget.give_buffer(self.buffer)
            self.buffer = None
        self.budget.release(self.n)
