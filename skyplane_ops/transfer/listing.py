"""The steps of a run that need no fleet: the journal lock (``transfer_lock``) and the one
listing of a run (``list_request``), kept on disk as a ``Listing`` that sizes the plan, lets
an up-to-date sync skip planning and gateways, and is what the engine copies from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway_agent.stores.base import ObjectStore, SkippedEntry
from gateway_agent.stores.errors import BucketNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import sidelist, syncstate
from skyplane_ops.transfer.catalog import Catalog, dec
from skyplane_ops.transfer.journal import JournalLock
from skyplane_ops.transfer.request import TransferRequest, request_from
from skyplane_ops.transfer.selection import Window, check_bucket, row_filter


def check_destination(dst: ObjectStore, dst_uri: str) -> None:
    """Fail early when the destination does not exist (one listing request)."""
    try:
        next(iter(dst.list()), None)
    except BucketNotFoundError as exc:
        raise TransferError(f"destination {dst_uri} does not exist: {exc}") from exc
    except StoreError as exc:
        raise TransferError(f"cannot access destination {dst_uri}: {exc}") from exc


def transfer_lock(
    request: TransferRequest | str,
    dst: str | None = None,
    *,
    wait: bool | None = None,
    **fields: Any,
) -> JournalLock:
    """The journal lock of this transfer, acquired; use it as a context manager.

    The run sequence takes it before listing, so a second identical run stops (or, with
    ``wait`` / ``request.wait_lock``, waits) before it lists or starts any gateway; the engine
    takes it again in the same process without blocking."""
    request = request_from(request, dst, **fields)
    lock = JournalLock(request.journal_path, request.key)
    lock.acquire(wait=request.wait_lock if wait is None else wait)
    return lock


class Listing:
    """One run's listings, taken once and handed over (``list_request``): a handle on the
    run's on-disk catalog, never a list of objects. The CLI sizes the plan from it
    (``volume_gb``), skips the fleet when a sync has nothing to do (``sync_up_to_date``), and
    ``run_transfer`` copies from it instead of listing again. The versions it pins are what
    the gateways check. A listing serves one run: ``run_transfer`` closes it (removing its
    file); ``close`` does it when no run follows. ``opened``: the request's source and
    destination stores the listing opened, which a run of the same request in this process
    uses instead of opening its own (each S3 client is ~50 ms of CPU before the first byte)."""

    def __init__(
        self,
        catalog: Catalog,
        opened: tuple[TransferRequest, ObjectStore, ObjectStore] | None = None,
    ) -> None:
        self.catalog = catalog
        self._opened = opened

    def stores(self, request: TransferRequest) -> tuple[ObjectStore, ObjectStore] | None:
        """The source and destination stores opened for ``request``'s ends (None: none, or
        opened for other ends or options)."""
        if self._opened is None:
            return None
        for_, src, dst = self._opened
        same = (for_.src, for_.dst) == (request.src, request.dst)
        return (src, dst) if same else None

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


def attach_record(catalog: Catalog, request: TransferRequest) -> None:
    """A verified run records what it copied (``syncstate``), a cp too: the next sync then
    trusts the record, not clocks, and between local folders walks instead of listing. Not
    a run that selects part of the source (time, a key list: its pruning would drop the
    records of the rest) or keeps destination objects by policy (those are not known equal:
    a record would hide them from the next sync); such a run compares as a first sync does."""
    if request.selects_part or request.ignore_existing or request.update:
        return
    syncstate.attach(catalog, syncstate.state_path(request.journal_path, request.key))


def fill_listing(
    catalog: Catalog,
    request: TransferRequest,
    src: ObjectStore,
    *,
    source: bool = True,
    progress: ListProgress | None = None,
    dst: ObjectStore | None = None,
) -> None:
    """List the source (with ``source``) and, when the request looks at the destination
    (``lists_destination``: sync, ``ignore_existing``, ``update``), the destination into
    ``catalog``, both at once: the destination in a child process (``sidelist``), so a
    re-sync takes the longer of the two listings, not their sum. Otherwise the destination is
    only checked to exist (on ``dst`` when given: the run's destination store), and a local
    source is walked in two halves at once (``splitlist``). With ``files_from`` nothing is
    listed: each key is looked up (``fill_by_key``)."""
    if request.files_from is not None:
        fill_by_key(catalog, request, src, source=source, progress=progress)
        return
    on_count = None if progress is None else (lambda n: progress(n, 0))
    args = (src, request.src_uri, request.include, request.exclude, on_count)
    win = request.window()
    attach_record(catalog, request)
    if not request.lists_destination:
        check_destination(dst or request.dst.open("destination"), request.dst_uri)
        if source:
            catalog.add_source(*args, window=win)
        return
    finish = sidelist.start(catalog, request.dst_uri, request.dst.options)
    try:
        if source:  # not in two halves: the destination's child has the other core
            catalog.add_source(*args, split=False, window=win)
    except BaseException:
        finish(True)
        raise
    finish(False)


def fill_by_key(
    catalog: Catalog,
    request: TransferRequest,
    src: ObjectStore,
    *,
    source: bool = True,
    progress: ListProgress | None = None,
) -> None:
    """The keys of ``files_from`` looked up at the source (filtered by globs and time) and,
    when the request looks at the destination, the same keys there: no listing request on
    either side. A named key the source does not hold is a failed object."""
    assert request.files_from is not None
    dst = request.dst.open("destination")
    attach_record(catalog, request)
    if source:
        on_count = None if progress is None else (lambda n: progress(n, 0))
        kept = row_filter(request.include, request.exclude, request.window())
        try:
            catalog.add_keys(src, request.files_from, "src", kept, on_count)
        except StoreError as exc:
            raise TransferError(f"cannot read source {request.src_uri}: {exc}") from exc
    keys = [dec(k) for (k,) in catalog.pages("key", "src")]
    if not request.lists_destination:
        if keys:
            check_bucket(dst, request.dst_uri, keys[0])
        return
    try:
        catalog.add_keys(dst, keys, "dst", row_filter((), (), Window()))
    except BucketNotFoundError as exc:
        raise TransferError(f"destination {request.dst_uri} does not exist: {exc}") from exc
    except StoreError as exc:
        raise TransferError(f"cannot access destination {request.dst_uri}: {exc}") from exc


def list_request(
    request: TransferRequest | str,
    dst: str | None = None,
    *,
    progress: ListProgress | None = None,
    **fields: Any,
) -> Listing:
    """List the source (and, with ``sync``, the destination) once for a whole run, into a
    catalog file in the request's journal folder."""
    request = request_from(request, dst, **fields)
    src = request.src.open("source")
    target = request.dst.open("destination")  # a bad URI or option fails here
    catalog = Catalog(request.journal_path)
    try:
        fill_listing(catalog, request, src, progress=progress, dst=target)
    except BaseException:
        catalog.close()
        raise
    return Listing(catalog, (request, src, target))
