"""Hop-by-hop flow control: one byte budget per gateway.

Every chunk held in memory (read from the store, received from upstream, waiting for a
downstream connection or a store write) holds its size in the budget. Receivers acquire before
reading a payload off the socket, so a full budget stops a relay from reading upstream; TCP
back-pressure then throttles the sender. Memory stays bounded by the budget.
"""

from __future__ import annotations

import threading


class ByteBudget:
    """A counting semaphore in bytes; a single request larger than the budget is clamped."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int, timeout: float | None = None) -> bool:
        """Block until ``n`` bytes fit; returns False on timeout."""
        n = min(n, self.capacity)
        with self._cond:
            ok = self._cond.wait_for(lambda: self.in_use + n <= self.capacity, timeout)
            if not ok:
                return False
            self.in_use += n
            self.peak = max(self.peak, self.in_use)
            return True

    def release(self, n: int) -> None:
        n = min(n, self.capacity)
        with self._cond:
            self.in_use = max(0, self.in_use - n)
            self._cond.notify_all()
