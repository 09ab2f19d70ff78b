"""``run_transfer``: the engine's steps in order (see the package docstring), up to the move;
``finish`` checks, commits, verifies and reports."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from gateway_agent.auth import load_secret
from gateway_agent.stores.base import ObjectStore
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.transfer import mirror, syncstate
from skyplane_ops.transfer.bwlimit import live_path
from skyplane_ops.transfer.catalog import TODO, WAY_SQL, Catalog, enc
from skyplane_ops.transfer.commit import prepare_uploads
from skyplane_ops.transfer.dispatch import ChunkTotals, Dispatcher, DispatchOptions, check_fleet
from skyplane_ops.transfer.dispatch.join import Arrivals
from skyplane_ops.transfer.finish import Moved, finish_run
from skyplane_ops.transfer.journal import Journal
from skyplane_ops.transfer.listing import Listing, check_destination, fill_listing, transfer_lock
from skyplane_ops.transfer.manifest import Chunk
from skyplane_ops.transfer.metadata import sync_meta_check, upload_meta
from skyplane_ops.transfer.preload import preload_finish
from skyplane_ops.transfer.progress import ProgressCallback
from skyplane_ops.transfer.report import write_report
from skyplane_ops.transfer.request import TransferRequest, request_from
from skyplane_ops.transfer.result import TransferResult, partial_error
from skyplane_ops.transfer.run_state import RunState
from skyplane_ops.transfer.todo import chunk_totals, iter_chunks, plan_todo, resume


def run_transfer(
    plan: TransferPlan,
    fleet: GatewayFleet,
    request: TransferRequest | str,
    dst: str | None = None,
    *,
    listing: Listing | None = None,
    progress: ProgressCallback | None = None,
    dispatch: DispatchOptions | None = None,
    arrivals: Arrivals | None = None,
    **fields: Any,
) -> TransferResult:
    """Copy what ``request`` names through ``fleet`` along ``plan``; see the module docstring.

    ``request`` is a ``TransferRequest``, or, as a convenience, the source URI with ``dst``
    and the request's fields as keywords (``TransferRequest.build``). ``listing``: the run's
    listings taken earlier (``list_request``, e.g. to size the plan), copied from instead of
    listing again (the engine closes it). ``dispatch``: engine tuning (attempts, timeouts,
    threads, test hooks) under the request's connections, encryption and compression.
    ``arrivals``: gateways that come up while the job runs (``dispatch.join``): the plan's
    paths without gateways in ``fleet`` wait for them.
    Raises ``TransferError`` with a message naming what failed (the journal then lets the same
    call resume), or ``PartialTransferError`` (``SourceChangedError`` when only changes) when
    some objects could not be copied and everything else was.
    """
    if isinstance(request, TransferRequest) or dispatch is None:
        request = request_from(request, dst, **fields)
    else:  # the loose form: ``dispatch`` also gives the request its data-path fields
        request = request_from(request, dst, dispatch=dispatch, **fields)
    if request.multi:
        raise TransferError(
            f"run_transfer copies to one destination; the request has "
            f"{len(request.destinations)}: run one per destination (FanoutRun does)"
        )
    if len(plan.dsts) != 1:
        raise TransferError(
            f"run_transfer copies to one destination; the plan has {len(plan.dsts)} "
            f"({', '.join(plan.dsts)}): run one transfer per destination"
        )
    if arrivals is None:
        check_fleet(plan, fleet)
    with transfer_lock(request):
        return _Run(plan, fleet, request, arrivals).run(
            Journal(request.journal_path, request.key),
            progress=progress,
            dispatch=request.dispatch_options(dispatch),
            listing=listing,
        )


class _Run(RunState):
    """One run: the steps up to the move; ``finish.finish_run`` does the rest."""

    def run(
        self,
        journal: Journal,
        *,
        progress: ProgressCallback | None,
        dispatch: DispatchOptions,
        listing: Listing | None = None,
    ) -> TransferResult:
        try:
            secret = load_secret(self.fleet.secret_ref)
        except OSError as exc:
            gone = " (deprovisioned already?)" if isinstance(exc, FileNotFoundError) else ""
            raise TransferError(
                f"cannot read the secret of fleet {self.fleet.transfer_id}{gone}: {exc}"
            ) from exc
        request = self.request
        # A new cap written for this transfer while it runs (``skyplane-ops bwlimit``).
        live = live_path(request.transfer_id or self.fleet.transfer_id)
        dispatch = dataclasses.replace(dispatch, bwlimit_file=str(live))
        opened = listing.stores(request) if listing is not None else None
        if opened is not None:
            src, dst = opened  # opened for the listing, in this process
        else:
            src = request.src.open("source")
            dst = request.dst.open("destination")
        fresh = listing is None  # else the caller's listing; a sync may still lack the dst
        if listing is None:
            listing = Listing(Catalog(journal.path.parent))
        if fresh or (request.lists_destination and not listing.has_destination):
            fill_listing(listing.catalog, request, src, source=fresh)
        elif request.files_from is None:  # a key list was checked by key when looked up
            check_destination(dst, self.dst_uri)
        try:
            return self._run(listing.catalog, src, dst, journal, secret, progress, dispatch)
        finally:
            listing.close()

    def _run(
        self,
        catalog: Catalog,
        src: ObjectStore,
        dst: ObjectStore,
        journal: Journal,
        secret: bytes,
        progress: ProgressCallback | None,
        dispatch: DispatchOptions,
    ) -> TransferResult:
        request, part_size = self.request, self.request.part_size
        todo = plan_todo(
            catalog,
            dst,
            self.dst_uri,
            request.include,
            request.exclude,
            sync=request.sync,
            delete=request.delete,
            max_delete=request.max_delete,
            names_fit=src.capabilities.file_names and dst.capabilities.file_names,
            ignore_existing=request.ignore_existing,
            update=request.update,
            move=request.move,
            src_uri=request.src_uri,
            meta_check=sync_meta_check(src, dst, request.metadata, request.metadata_set),
        )
        skipped = todo.skipped
        self.step("list")
        if not todo.objects:
            unread = catalog.outcomes("failed")
            deleted, errors = (
                (0, dict(unread))
                if unread
                else mirror.delete_absent(src, dst, catalog, self.src_uri, False)
            )
            result = self.result(
                objects=0,
                bytes=0,
                seconds=round(self.elapsed(), 3),
                gbps=0.0,
                objects_skipped=skipped,
                objects_deleted=deleted,
                verification={"status": "passed", "objects": 0, "method": "sync: up to date"},
                status="partial" if errors else "ok",
                objects_failed=len(errors),
                first_errors=[f"{k!r}: {why}" for k, why in sorted(errors.items())][:5],
            )
            deleting = not unread
            report = self.report_run(deleted=deleting, delete_failed=errors if deleting else {})
            write_report(request, result, report, catalog)
            if errors:
                raise partial_error(result, errors, [])
            syncstate.record_equal(catalog)
            journal.remove()
            return result
        caps = dst.capabilities
        # Segments already finished against the same source version are skipped, and so are
        # objects whose multipart upload an earlier run completed (their upload id is spent).
        catalog.load_journal(journal.path)
        resumed = resume(catalog, part_size, caps)
        uploads = prepare_uploads(
            dst,
            self.dst_uri,
            catalog,
            journal,
            part_size,
            upload_meta(src, dst, dispatch.metadata, dispatch.metadata_set),
        )
        chunks, segments, nbytes, objects = chunk_totals(catalog, part_size, caps)
        # The largest chunk this run sends: a gateway whose byte budget is smaller refuses the
        # job before any byte moves, instead of holding more than its budget.
        largest = int(catalog.one(f"SELECT coalesce(max(size), 0) FROM src WHERE state = {TODO}"))
        dispatch = dataclasses.replace(dispatch, max_chunk_bytes=min(part_size, largest) or None)
        self.step("prepare")
        done_now = 0
        warming: list[object] = []

        def on_done(finished: list[tuple[Chunk, list[int]]]) -> None:
            nonlocal done_now
            if not warming:  # the first chunk is done: the finish's modules load meanwhile
                warming.append(preload_finish())
            rows, records, ways = [], [], []
            at = time.time_ns() // 1000
            for chunk, seg_crcs in finished:
                ok = set(chunk.vouched)  # ``seg.v``: a whole object's vouch, or a part's
                versions = chunk.versions
                for i, (seg, crc) in enumerate(zip(chunk.segments, seg_crcs, strict=False)):
                    rows.append((enc(seg.key), seg.part, crc, int(i in ok)))
                    records.append((seg.seg_id, crc, seg.fp or "null"))
                    ver = versions[i] if i < len(versions) else None
                    ways.append((enc(seg.key), 1 << min(chunk.path, 62), at, ver))
            journal.record_done(records)  # the durable record first, then the scratch one
            catalog.write("INSERT OR REPLACE INTO seg VALUES(?,?,?,?)", rows)
            catalog.write(WAY_SQL, ways)
            done_now += len(rows)

        dispatcher = Dispatcher(
            self.plan,
            self.fleet,
            secret,
            src_uri=self.src_uri,
            dst_uri=self.dst_uri,
            src_options=request.src.options,
            dst_options=request.dst.options,
            options=dispatch,
            job_id=self.job_id,
            arrivals=self.arrivals,
        )
        try:
            stats = dispatcher.run(
                iter_chunks(catalog, part_size, caps),
                uploads,
                on_done,
                progress,
                ChunkTotals(chunks, nbytes, objects),
            )
        except TransferError as exc:
            journal.sync()  # what finished is durable for the re-run the message suggests
            text = str(exc)
            if f"source {self.src_uri}" not in text and (
                "AccessDenied" in text or "permission denied" in text.lower()
            ):
                raise TransferError(f"destination {self.dst_uri} is not writable: {exc}") from exc
            raise TransferError(
                f"{exc}; {resumed + done_now} of {resumed + segments} segments "
                f"are finished and journaled in {journal.path}: re-run the same command to resume"
            ) from exc
        journal.sync()
        moved = Moved(
            stats, dispatcher.routes, uploads, skipped, resumed, self.elapsed(),
            capped=dispatcher.bwlimit is not None,
        )  # fmt: skip
        self.step("move")
        return finish_run(
            self, catalog, src, dst, journal, moved,
            part_size=part_size, verify=request.verify, delete=todo.to_delete > 0,
            move=request.move,
        )  # fmt: skip
