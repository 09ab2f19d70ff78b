"""The checks and views of a transfer request that need no fleet: option ranges and overlap
(``check_request``), the journal lock (``transfer_lock``) and the one listing of a run
(``list_request``). Faces call them before planning or provisioning anything."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway_agent.stores import open_store
from gateway_agent.stores.base import ObjectStore, SkippedEntry
from gateway_agent.stores.errors import BucketNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import sidelist
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.checks import check_transfer_options
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.journal import JournalLock, default_journal_dir, transfer_key
from skyplane_ops.transfer.manifest import DEFAULT_PART_SIZE
from skyplane_ops.transfer.overlap import check_disjoint


def open_side(uri: str, options: Mapping[str, Any] | None, side: str) -> ObjectStore:
    try:
        return open_store(uri, dict(options or {}))
    except (StoreError, ValueError) as exc:
        raise TransferError(f"cannot open {side} {uri}: {exc}") from exc


def check_destination(dst: ObjectStore, dst_uri: str) -> None:
    """Fail early when the destination does not exist (one listing request)."""
    try:
        next(iter(dst.list()), None)
    except BucketNotFoundError as exc:
        raise TransferError(f"destination {dst_uri} does not exist: {exc}") from exc
    except StoreError as exc:
        raise TransferError(f"cannot access destination {dst_uri}: {exc}") from exc


def check_request(
    src_uri: str,
    dst_uri: str,
    *,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    verify: str = "full",
    dispatch: DispatchOptions | None = None,
    max_delete: int | None = None,
) -> None:
    """Every check that needs no listing: option ranges and source/destination overlap.

    Faces call it before planning or provisioning anything; ``run_transfer`` calls it again.
    """
    check_transfer_options(
        part_size=part_size, verify=verify, dispatch=dispatch, max_delete=max_delete
    )
    check_disjoint(src_uri, dst_uri, src_options, dst_options)


def transfer_lock(
    src_uri: str,
    dst_uri: str,
    *,
    journal_dir: str | Path | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    wait: bool = False,
) -> JournalLock:
    """The journal lock of this transfer, acquired; use it as a context manager.

    Faces take it before provisioning, so a second identical run stops (or waits) before it
    starts any gateway; ``run_transfer`` in the same process takes it again without blocking.
    """
    directory = Path(journal_dir) if journal_dir else default_journal_dir()
    lock = JournalLock(directory, transfer_key(src_uri, dst_uri, part_size, include, exclude))
    lock.acquire(wait=wait)
    return lock


class Listing:
    """One run's listings, taken once and handed over (``list_request``): a handle on the
    run's on-disk catalog, never a list of objects. The CLI sizes the plan from it
    (``volume_gb``), skips the fleet when a sync has nothing to do (``sync_up_to_date``), and
    ``run_transfer`` copies from it instead of listing again. The versions it pins are what
    the gateways check. A listing serves one run: ``run_transfer`` closes it (removing its
    file); ``close`` does it when no run follows."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    @property
    def problems(self) -> list[SkippedEntry]:
        """Entries the source listing left out (links, unreadable folders)."""
        return self.catalog.problems

    @property
    def has_destination(self) -> bool:
        """Whether the destination was listed too (a sync)."""
        return self.catalog.has_destination

    @property
    def objects(self) -> int:
        """Source objects the filters select (those of ``Catalog.outside`` too)."""
        return self.catalog.source_totals()[0] + self.catalog.outside[0]

    @property
    def total_bytes(self) -> int:
        return self.catalog.source_totals()[1] + self.catalog.outside[1]

    @property
    def volume_gb(self) -> float:
        return self.total_bytes / 1e9

    def close(self) -> None:
        self.catalog.close()


ListProgress = Callable[[int, int], None]  # (source objects listed, destination objects listed)


def fill_listing(
    catalog: Catalog,
    src: ObjectStore,
    dst_uri: str,
    dst_options: Mapping[str, Any] | None,
    src_uri: str,
    include: Sequence[str],
    exclude: Sequence[str],
    *,
    sync: bool,
    source: bool = True,
    progress: ListProgress | None = None,
) -> None:
    """List the source (with ``source``) and, with ``sync``, the destination into ``catalog``,
    both at once: the destination in a child process (``sidelist``), so a re-sync takes the
    longer of the two listings, not their sum. Without ``sync`` the destination is only
    checked to exist, and a local source is walked in two halves at once (``splitlist``)."""
    on_count = None if progress is None else (lambda n: progress(n, 0))
    if not sync:
        check_destination(open_side(dst_uri, dst_options, "destination"), dst_uri)
        if source:
            catalog.add_source(src, src_uri, include, exclude, on_count)
        return
    finish = sidelist.start(catalog, dst_uri, dst_options)
    try:
        if source:  # not in two halves: the destination's child has the other core
            catalog.add_source(src, src_uri, include, exclude, on_count, split=False)
    except BaseException:
        finish(True)
        raise
    finish(False)


def list_request(
    src_uri: str,
    dst_uri: str,
    *,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    sync: bool = False,
    journal_dir: str | Path | None = None,
    progress: ListProgress | None = None,
) -> Listing:
    """List the source (and, with ``sync``, the destination) once for a whole run, into a
    catalog file under ``journal_dir`` (the default journal folder when None)."""
    src = open_side(src_uri, src_options, "source")
    open_side(dst_uri, dst_options, "destination")  # a bad URI or option fails here
    catalog = Catalog(Path(journal_dir) if journal_dir else default_journal_dir())
    try:
        fill_listing(
            catalog,
            src,
            dst_uri,
            dst_options,
            src_uri,
            include,
            exclude,
            sync=sync,
            progress=progress,
        )
    except BaseException:
        catalog.close()
        raise
    return Listing(catalog)
