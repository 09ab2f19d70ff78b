"""The resume journal of a replica unit kept in the resource's ``state_store`` as it grows.

A Dagster deployment runs each step in its own process, possibly on another machine than the
run before it (a re-execution picked up by another run worker or container). The journal that
makes a transfer resume lives on the step's disk; with a ``state_store`` configured it is
snapshotted there every few seconds while chunks land (``TransferState.save_journal``: only
what it gained) and restored before the unit starts, so a re-execution of a run killed
mid-transfer, anywhere, re-sends only what was not journaled. The key is the unit's place in
the *root* run (run, dataset, destination, partition), which every re-execution shares; the
snapshot is deleted once the unit has succeeded.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from skyplane_ops.api import TransferState

SAVE_EVERY_S = 2.0


def unit_key(root_run_id: str, *parts: str) -> str:
    """A state-store key for one unit of a root run: stable across re-executions."""
    digest = hashlib.sha256("/".join(parts).encode("utf-8")).hexdigest()[:12]
    return f"dg-{root_run_id.replace('-', '')[:32]}-{digest}"


class StoredJournal:
    """Restore, snapshot as it grows, and forget one unit's journal in the state store."""

    def __init__(self, state: TransferState, journal_dir: str, log: Any) -> None:
        self.state = state
        self.journal_dir = journal_dir
        self.log = log
        self.last = time.monotonic()

    def restore(self) -> int:
        restored = self.state.restore_journal(self.journal_dir)
        if restored:
            self.log.info(f"restored {restored} journal file(s) from {self.state.uri}")
        return restored

    def tick(self) -> None:
        """Snapshot what the journal gained, at most every ``SAVE_EVERY_S`` (from progress)."""
        now = time.monotonic()
        if now - self.last >= SAVE_EVERY_S:
            self.last = now
            self.save()

    def save(self) -> None:
        try:
            self.state.save_journal(self.journal_dir)
        except Exception as exc:  # a flaky store must not fail the transfer
            self.log.warning(f"saving the journal to {self.state.uri} failed: {exc}")

    def forget(self) -> None:
        """The unit succeeded: its snapshot is no longer needed."""
        try:
            self.state.delete()
        except Exception as exc:
            self.log.warning(f"deleting the journal snapshot at {self.state.uri} failed: {exc}")
