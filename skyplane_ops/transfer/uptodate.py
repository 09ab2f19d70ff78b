"""``sync_up_to_date``: a sync with nothing to copy or delete is answered from its listing
alone, before any plan or gateway (the engine, ``run.py``, is never started for it).
``quick_listing`` answers it between two local folders before any listing (``quickcheck``),
or lists only the files that differ."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from gateway_agent.stores.base import ListRow
from gateway_agent.stores.local import LocalStore
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import syncstate
from skyplane_ops.transfer.catalog import TODO, Catalog
from skyplane_ops.transfer.journal import Journal
from skyplane_ops.transfer.listing import Listing, list_request
from skyplane_ops.transfer.metadata import sync_meta_check
from skyplane_ops.transfer.quickcheck import TreeCheck, Walked, walk_trees
from skyplane_ops.transfer.request import TransferRequest, request_from
from skyplane_ops.transfer.result import TransferResult
from skyplane_ops.transfer.todo import nothing_to_do, plan_todo


def _up_to_date(base: dict[str, Any], skipped: int, seconds: float) -> TransferResult:
    return TransferResult(
        **base,
        objects=0,
        bytes=0,
        seconds=round(seconds, 3),
        gbps=0.0,
        objects_skipped=skipped,
        verification={"status": "passed", "objects": 0, "method": "sync: up to date"},
    )


def sync_up_to_date(
    listing: Listing, request: TransferRequest, *, transfer_id: str
) -> TransferResult | None:
    """The result of a sync with nothing to copy or delete and nothing unreadable, found from
    ``listing`` alone (no plan, no fleet), or None when the run has work to do.

    The caller holds the journal lock; the journal is removed as a clean run would remove it.
    ``max_delete`` is enforced here too, so a refused mirror delete still fails before planning.
    """
    t0 = time.monotonic()
    if not listing.has_destination:
        raise TransferError("internal error: sync_up_to_date needs the destination listing")
    dst = request.dst.open("destination")
    # Equal content may still differ in metadata (a cloud source: a HEAD of each side).
    meta_check = sync_meta_check(
        request.src.open("source"), dst, request.metadata, request.metadata_set
    )
    if meta_check is None and nothing_to_do(listing.catalog, delete=request.delete):
        skipped = listing.objects
        syncstate.record_equal(listing.catalog, (TODO,))  # every row is equal, none marked
    else:
        todo = plan_todo(
            listing.catalog,
            dst,
            request.dst_uri,
            request.include,
            request.exclude,
            sync=True,
            delete=request.delete,
            max_delete=request.max_delete,
            ignore_existing=request.ignore_existing,
            update=request.update,
            move=request.move,
            src_uri=request.src_uri,
            meta_check=meta_check,
        )
        if todo.objects or todo.unread or todo.to_delete:
            return None
        skipped = todo.skipped
        syncstate.record_equal(listing.catalog)
    listing.close()
    return _done(request, transfer_id, skipped, t0)


def quick_listing(
    request: TransferRequest,
    *,
    transfer_id: str,
    progress: Callable[[int, int], None] | None = None,
) -> TransferResult | Listing | None:
    """A sync between two local folders, walked before any listing (``quickcheck``): the
    result of one that is certainly up to date; else a ``Listing`` of only the files the walk
    found different, with both sides' rows (the files it found the same are counted as
    skipped: ``Catalog.outside``), for ``sync_up_to_date`` and the transfer as any listing; or
    None when the walk is not sure: list with ``list_request``. The caller holds the journal
    lock."""
    t0 = time.monotonic()
    src = request.src.open("source")
    dst = request.dst.open("destination")
    if not (isinstance(src, LocalStore) and isinstance(dst, LocalStore)):
        return None
    if request.selects_part or request.ignore_existing or request.update:
        return None  # the walk knows globs only: the listing applies the other rules
    state = syncstate.state_path(request.journal_path, request.key)
    if not syncstate.has_records(state):
        return None  # nothing recorded to judge by: the listing decides, and records
    check = TreeCheck(
        os.fspath(src.root),
        os.fspath(dst.root),
        request.include,
        request.exclude,
        request.delete,
        LocalStore.reserved,
        os.fspath(state),
    )
    counted = None if progress is None else (lambda n: progress(n, n))
    walked = walk_trees(check, counted)
    if walked is None or walked.files == 0:  # an empty source is refused by the listing
        return None
    if walked.different:
        return _listing_of(walked, src, dst, request.journal_path, state)
    return _done(request, transfer_id, walked.equal, t0)


def _listing_of(
    walked: Walked, src: LocalStore, dst: LocalStore, journal_dir: Path, state: Path
) -> Listing | None:
    """A catalog of the differing files' rows on both sides, looked up as the listings would
    show them; None when a source file is no longer one (the listing words what it is)."""
    keys = sorted(walked.different)
    catalog = Catalog(journal_dir)
    try:
        syncstate.attach(catalog, state)
        src_rows = src.rows_of(keys)
        if any(row is None for row in src_rows):
            catalog.close()
            return None
        catalog.write(
            "INSERT OR REPLACE INTO src(key,size,mtime,ck,version,etag) VALUES(?,?,?,?,?,?)",
            cast(list[ListRow], src_rows),
        )
        catalog.write(
            "INSERT OR REPLACE INTO dst(key,size,mtime,ck,etag) VALUES(?,?,?,?,?)",
            ((*row[:4], row[5]) for row in dst.rows_of(keys, versions=False) if row is not None),
        )
    except BaseException:
        catalog.close()
        raise
    catalog.has_destination = True
    catalog.outside = (walked.equal, walked.equal_bytes)
    return Listing(catalog)


def _done(request: TransferRequest, transfer_id: str, skipped: int, t0: float) -> TransferResult:
    """Remove the journal as a clean run would, and say the sync was up to date."""
    Journal(request.journal_path, request.key).remove()
    base = {
        "transfer_id": transfer_id,
        "job_id": f"job-{uuid.uuid4().hex[:12]}",
        "src_uri": request.src_uri,
        "dst_uri": request.dst_uri,
        "steps": {"list": round(time.monotonic() - t0, 3)},
    }
    return _up_to_date(base, skipped, time.monotonic() - t0)


def sync_check(
    request: TransferRequest | str,
    dst: str | None = None,
    *,
    transfer_id: str,
    progress: Callable[[int, int], None] | None = None,
    **fields: Any,
) -> TransferResult | Listing:
    """A sync's first step, before any plan or gateway: its result when it has nothing to copy
    or delete (``quick_listing``, else ``sync_up_to_date`` on a listing of both sides), or the
    listing to plan and transfer from (``run_transfer(listing=...)``, or close it). The caller
    holds the journal lock."""
    request = request_from(request, dst, **fields)
    if not request.sync:
        request = request.replace(sync=True)
    quick = quick_listing(request, transfer_id=transfer_id, progress=progress)
    if isinstance(quick, TransferResult):
        return quick
    listing = quick or list_request(request, progress=progress)
    done = sync_up_to_date(listing, request, transfer_id=transfer_id)
    return listing if done is None else done
