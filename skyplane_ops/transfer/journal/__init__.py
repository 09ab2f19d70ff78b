"""The resume journal: ``file`` (the on-disk journal that makes a re-run resume instead of
starting over, and its lock) and ``snapshot`` (its copy in the state store, appended in
pieces). The names the run sequence and users import are importable from here.
"""

from __future__ import annotations

from skyplane_ops.transfer.journal.file import (
    DONE_FSYNC_S,
    Journal,
    JournalLock,
    JournalLockedError,
    default_journal_dir,
    transfer_key,
)

__all__ = [
    "DONE_FSYNC_S",
    "Journal",
    "JournalLock",
    "JournalLockedError",
    "default_journal_dir",
    "transfer_key",
]
