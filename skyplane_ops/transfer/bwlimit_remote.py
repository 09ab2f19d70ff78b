"""A new bandwidth cap asked for through the state store, followed by a run on another host.

The dispatcher's ``RateWatcher`` watches the run's local live file (``bwlimit.live_path``).
A user on another machine cannot write that file, but can reach the transfer's state store
(the one the Airflow driver heartbeats into and polls for a cancellation): ``CapFollower``
polls ``bwlimit.json`` there, as the driver polls ``cancel.json``, and copies each new value
into the local live file, so one watcher serves both ways in.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import TracebackType

from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.bwlimit import format_rate, parse_rate, write_live
from skyplane_ops.transfer.state import TransferState

log = logging.getLogger(__name__)
POLL_S = 1.0


class CapFollower:
    """``with CapFollower(state, live_file):`` copies caps written to ``state`` into the file."""

    def __init__(self, state: TransferState, path: Path, every: float = POLL_S) -> None:
        self._state = state
        self._path = path
        self._every = every
        self._last: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> bool:
        """Copy a new cap from the store to the live file; True when one was copied. A flaky
        store or a value that does not parse is logged, never raised: the run goes on."""
        try:
            rate = self._state.read_bwlimit()
        except TransferError as exc:
            log.warning("could not read the bandwidth cap from the state store: %s", exc)
            return False
        if rate is None or rate == self._last:
            return False
        self._last = rate
        try:
            value = parse_rate(rate, "rate")
            write_live(self._path, rate)
        except (TransferError, OSError) as exc:
            log.warning("ignoring the cap %r from the state store: %s", rate, exc)
            return False
        log.info("bandwidth cap %s asked for through the state store", format_rate(value))
        return True

    def __enter__(self) -> CapFollower:
        self.poll()  # a cap asked for before the run started applies from its first byte
        self._thread = threading.Thread(target=self._loop, name="bwlimit-state", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.poll()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
