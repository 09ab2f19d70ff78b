"""A token bucket per outbound hop: the transfer's bandwidth cap, enforced where bytes leave.

The control plane gives each gateway a rate per next hop (bytes per second: the cap times the
share of the plan's paths through that hop, split over the hop's sending gateways) and may
change it while the job runs (``POST /v1/jobs/ID/rates``). A sender takes a frame's bytes
before it sends the frame; the bucket may go into debt by one frame (frames are up to a part
in size), and the sender waits until the debt is paid back at the current rate, so the rate
holds over any span of a few frames and a new rate applies from the next wait on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

BURST_S = 0.25  # an idle hop may send this many seconds of its rate at once
WAIT_SLICE_S = 0.1  # waits are sliced, so a new rate or a stop is seen soon


class TokenBucket:
    """Bytes per second (``rate`` None or 0: unlimited), paced in the order bytes are taken.

    ``spent``: bytes taken so far; ``paid``: bytes the rate has allowed so far (it runs at
    most a burst ahead of ``spent``). A frame may go once every byte taken before it is paid
    for, so frames leave one after another at the rate, not in bursts of a whole window,
    and a new rate applies to the very next refill.
    """

    def __init__(self, rate: float | None = None) -> None:
        self._lock = threading.Lock()
        self._rate = float(rate or 0.0)
        self._spent = 0.0
        self._paid = 0.0
        self._t = time.monotonic()

    @property
    def rate(self) -> float:
        return self._rate

    def set_rate(self, rate: float | None) -> None:
        with self._lock:
            self._refill()
            if not self._rate:  # unlimited so far: pacing starts now
                self._paid = self._spent
            self._rate = float(rate or 0.0)

    def _refill(self) -> None:
        now = time.monotonic()
        if self._rate:
            allowed = self._paid + (now - self._t) * self._rate
            self._paid = min(allowed, max(self._paid, self._spent + self._rate * BURST_S))
        self._t = now

    def take(self, nbytes: int, stopped: Callable[[], bool] = lambda: False) -> None:
        """Take ``nbytes``; return once the bytes taken before them are paid for (or at
        ``stopped``)."""
        with self._lock:
            self._refill()
            start = self._spent
            self._spent += nbytes
            if not self._rate:
                return
        while not stopped():
            with self._lock:
                self._refill()
                short = start - self._paid
                rate = self._rate
            if short <= 0 or not rate:
                return
            time.sleep(min(WAIT_SLICE_S, short / rate))
