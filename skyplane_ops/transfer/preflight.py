"""What a run checks where it runs, before it locks, lists or writes anything.

A request is checked when it is built (``TransferRequest.check``: ranges, URIs, overlap by
identity), but it may be built on one host and run on another, later. So the run (and the dry
run) checks again, on the ground: the ends are not the same place (with S3 access-point
aliases resolved, a network call), a local destination is a folder (not a plain file, not a
dangling link), and the folders the run writes its journal, lock and state to can be made.
Each failure is one line; a run refused here leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gateway_agent.stores.errors import InvalidURIError
from gateway_agent.stores.uri import parse_uri
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.overlap import check_access_points, check_disjoint
from skyplane_ops.transfer.request import TransferRequest

log = logging.getLogger(__name__)


def check_folder(path: Path, what: str) -> None:
    """``path`` is a folder this process can write, or can be created as one (its nearest
    existing ancestor is a writable folder); nothing is created."""
    here = Path(os.path.abspath(path))
    while not os.path.lexists(here) and here != here.parent:
        here = here.parent
    if not here.is_dir():
        kind = "a dangling symbolic link" if here.is_symlink() else "a file, not a folder"
        it = "it" if here == Path(os.path.abspath(path)) else str(here)
        raise TransferError(f"cannot use {what} {path}: {it} is {kind}")
    if not os.access(here, os.W_OK | os.X_OK):
        where = "" if here == Path(os.path.abspath(path)) else f" ({here})"
        raise TransferError(f"cannot write to {what} {path}{where}: permission denied")


def check_local_destination(uri: str) -> None:
    """A ``file://`` destination is a folder, or does not exist yet under a folder."""
    try:
        parsed = parse_uri(uri)
    except InvalidURIError:
        return
    if parsed.scheme != "file":
        return
    root = Path(parsed.bucket)
    if os.path.lexists(root) and not root.is_dir():
        if root.is_symlink() and not root.exists():
            target = os.readlink(root)
            raise TransferError(
                f"destination {uri} is a dangling symbolic link (to {target}, which does not "
                "exist): point it at a folder or remove it"
            )
        raise TransferError(f"destination {uri} is a file, not a folder: choose a folder")
    here = root.parent
    while not os.path.lexists(here) and here != here.parent:
        here = here.parent
    if not here.is_dir():
        raise TransferError(f"destination {uri} cannot be a folder: {here} is a file")


def journal_what(request: TransferRequest) -> str:
    if request.journal_dir:
        return "the journal folder (--journal-dir)"
    return "the journal folder in SKYPLANE_OPS_HOME"


def check_before_run(request: TransferRequest, *, home: Path | None = None) -> None:
    """Every check of a run (or dry run) that looks at the places themselves; ``home`` is
    ``$SKYPLANE_OPS_HOME`` when the run keeps state there (secrets, fleet records)."""
    check_disjoint(request.src.uri, request.dst.uri, request.src.options, request.dst.options)
    check_local_destination(request.dst.uri)
    check_folder(request.journal_path, journal_what(request))
    if home is not None:
        check_folder(home, "SKYPLANE_OPS_HOME")
    note = check_access_points(
        request.src.uri, request.dst.uri, request.src.options, request.dst.options
    )
    if note:
        log.warning("%s", note)
