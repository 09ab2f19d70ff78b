"""Which destinations an unfinished several-destination run reached, so that its re-run
sends each only what it lacks.

A single copy resumes from its journal, which is removed once it is committed and verified.
A several-destination run that failed for some destinations left the others committed with no
journal: its re-run would copy them again in full (and the failed ones their committed small
objects). The record (one small JSON file beside the journals, written atomically when a run
ends with failures, removed when one ends without) names the destinations that run reached;
the re-run syncs them (copying only what is missing or different, so a source changed since
is still copied; a journal still resumes its parts) instead of copying everything again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from skyplane_ops.transfer.request import TransferRequest


def record_path(request: TransferRequest) -> Path:
    """The record of ``request``: one per source, destinations and selection."""
    keys = json.dumps([r.key for r in request.per_destination()])
    name = hashlib.sha256(keys.encode()).hexdigest()[:24]
    return request.journal_path / f"{name}.fanout.json"


def reached_before(request: TransferRequest) -> set[str]:
    """Destinations an earlier unfinished run of ``request`` reached (none if unreadable)."""
    try:
        data = json.loads(record_path(request).read_text())
        return {str(d) for d in data.get("reached", [])}
    except (OSError, ValueError, AttributeError):
        return set()


def record(request: TransferRequest, reached: set[str] | None) -> None:
    """Keep ``reached`` for the re-run, or (None: every destination done) drop the record."""
    path = record_path(request)
    if reached is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"reached": sorted(reached)}))
    os.replace(tmp, path)
