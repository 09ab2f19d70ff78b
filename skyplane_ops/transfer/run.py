"""``run_transfer``: the engine's steps in order (see the package docstring)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway_agent.auth import load_secret
from gateway_agent.stores.base import ObjectStore
from gateway_agent.stores.errors import StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.transfer import mirror
from skyplane_ops.transfer.catalog import CHANGED, FAILED, TODO, Catalog, dec, enc
from skyplane_ops.transfer.commit import (
    Completion,
    abort_changed,
    complete_uploads,
    prepare_uploads,
    vouch_multipart,
)
from skyplane_ops.transfer.dispatch import (
    ChunkTotals,
    Dispatcher,
    DispatchOptions,
    DispatchStats,
    check_fleet,
    plan_routes,
)
from skyplane_ops.transfer.journal import Journal, default_journal_dir, transfer_key
from skyplane_ops.transfer.manifest import DEFAULT_PART_SIZE, Chunk
from skyplane_ops.transfer.progress import ProgressCallback
from skyplane_ops.transfer.request import (
    Listing,
    check_destination,
    check_request,
    fill_listing,
    open_side,
    transfer_lock,
)
from skyplane_ops.transfer.result import TransferResult, partial_error, plan_costs
from skyplane_ops.transfer.todo import (
    chunk_totals,
    fold_expected,
    iter_chunks,
    plan_todo,
    resume,
    segments_of,
    whole_limit,
)
from skyplane_ops.transfer.verify import changed_objects, relist_needed, verify_catalog

log = logging.getLogger(__name__)


def run_transfer(
    plan: TransferPlan,
    fleet: GatewayFleet,
    src_uri: str,
    dst_uri: str,
    *,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    journal_dir: str | Path | None = None,
    sync: bool = False,
    delete: bool = False,
    max_delete: int | None = None,
    wait_lock: bool = False,
    progress: ProgressCallback | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    verify: str = "full",
    dispatch: DispatchOptions | None = None,
    listing: Listing | None = None,
) -> TransferResult:
    """Copy ``src_uri`` to ``dst_uri`` through ``fleet`` along ``plan``; see module docstring.

    ``verify``: ``"full"`` (size + CRC32C per object: the store's own checksum, a write the
    store or the sink checked, else a read-back), ``"read-back"`` (no trust in checked writes:
    read back what the store keeps no CRC32C for) or ``"size"`` (see ``transfer.verify``).
    ``delete`` (implies ``sync``): remove destination objects absent
    from the source once everything else succeeded, refusing when more than ``max_delete``
    would go. ``wait_lock``: wait for another run of the same transfer instead of failing.
    ``listing``: the run's listings taken earlier (``list_request``, e.g. to size the plan),
    copied from instead of listing the source (and destination) again.
    Raises ``TransferError`` with a message naming what failed (the journal then lets the same
    call resume), or ``PartialTransferError`` (``SourceChangedError`` when only changes) when
    some objects could not be copied and everything else was.
    """
    check_request(
        src_uri,
        dst_uri,
        src_options=src_options,
        dst_options=dst_options,
        part_size=part_size,
        verify=verify,
        dispatch=dispatch,
        max_delete=max_delete,
    )
    if len(plan.dsts) != 1:
        raise TransferError(
            f"run_transfer copies to one destination; the plan has {len(plan.dsts)} "
            f"({', '.join(plan.dsts)}): run one transfer per destination"
        )
    check_fleet(plan, fleet)
    directory = Path(journal_dir) if journal_dir else default_journal_dir()
    key = transfer_key(src_uri, dst_uri, part_size, include, exclude)
    with transfer_lock(
        src_uri,
        dst_uri,
        journal_dir=directory,
        part_size=part_size,
        include=include,
        exclude=exclude,
        wait=wait_lock,
    ):
        return _Run(plan, fleet, src_uri, dst_uri, src_options, dst_options, include, exclude).run(
            Journal(directory, key),
            sync=sync or delete,
            delete=delete,
            max_delete=max_delete,
            progress=progress,
            part_size=part_size,
            verify=verify,
            dispatch=dispatch,
            listing=listing,
        )


class _Run:
    """One run's state, so the steps can be small methods."""

    def __init__(
        self,
        plan: TransferPlan,
        fleet: GatewayFleet,
        src_uri: str,
        dst_uri: str,
        src_options: Mapping[str, Any] | None,
        dst_options: Mapping[str, Any] | None,
        include: Sequence[str],
        exclude: Sequence[str],
    ) -> None:
        self.plan, self.fleet = plan, fleet
        self.src_uri, self.dst_uri = src_uri, dst_uri
        self.src_options, self.dst_options = src_options, dst_options
        self.include, self.exclude = include, exclude
        self.t0 = time.monotonic()
        # Seconds per step (list, prepare, move, check_source, commit, verify, record), so a
        # slow run says where its time went; see ``step``.
        self.steps: dict[str, float] = {}
        self._mark = self.t0
        self.job_id = f"job-{uuid.uuid4().hex[:12]}"
        self.route = [" -> ".join(r) + f" ({s:.0%})" for r, s in plan_routes(plan)]

    def step(self, name: str) -> None:
        """Close step ``name``: the time since the previous step ended is booked to it."""
        now = time.monotonic()
        self.steps[name] = round(self.steps.get(name, 0.0) + now - self._mark, 3)
        self._mark = now

    def result(self, **fields: Any) -> TransferResult:
        return TransferResult(
            steps=self.steps,
            transfer_id=self.fleet.transfer_id,
            job_id=self.job_id,
            src_uri=self.src_uri,
            dst_uri=self.dst_uri,
            route=self.route,
            **fields,
        )

    def run(
        self,
        journal: Journal,
        *,
        sync: bool,
        delete: bool,
        max_delete: int | None,
        progress: ProgressCallback | None,
        part_size: int,
        verify: str,
        dispatch: DispatchOptions | None,
        listing: Listing | None = None,
    ) -> TransferResult:
        try:
            secret = load_secret(self.fleet.secret_ref)
        except OSError as exc:
            gone = " (deprovisioned already?)" if isinstance(exc, FileNotFoundError) else ""
            raise TransferError(
                f"cannot read the secret of fleet {self.fleet.transfer_id}{gone}: {exc}"
            ) from exc
        src = open_side(self.src_uri, self.src_options, "source")
        dst = open_side(self.dst_uri, self.dst_options, "destination")
        fresh = listing is None  # else the caller's listing; a sync may still lack the dst
        if listing is None:
            listing = Listing(Catalog(journal.path.parent))
        if fresh or (sync and not listing.has_destination):
            fill_listing(
                listing.catalog,
                src,
                self.dst_uri,
                self.dst_options,
                self.src_uri,
                self.include,
                self.exclude,
                sync=sync,
                source=fresh,
            )
        else:
            check_destination(dst, self.dst_uri)
        try:
            return self._run(
                listing.catalog, src, dst, journal, secret, sync, delete, max_delete, progress,
                part_size, verify, dispatch,
            )  # fmt: skip
        finally:
            listing.close()

    def _run(
        self,
        catalog: Catalog,
        src: ObjectStore,
        dst: ObjectStore,
        journal: Journal,
        secret: bytes,
        sync: bool,
        delete: bool,
        max_delete: int | None,
        progress: ProgressCallback | None,
        part_size: int,
        verify: str,
        dispatch: DispatchOptions | None,
    ) -> TransferResult:
        todo = plan_todo(
            catalog,
            dst,
            self.dst_uri,
            self.include,
            self.exclude,
            sync=sync,
            delete=delete,
            max_delete=max_delete,
            names_fit=src.capabilities.file_names and dst.capabilities.file_names,
        )
        skipped = todo.skipped
        self.step("list")
        if not todo.objects:
            unread = catalog.outcomes("failed")
            deleted, errors = (
                (0, dict(unread)) if unread else self.mirror_delete(src, dst, catalog, False)
            )
            result = self.result(
                objects=0,
                bytes=0,
                seconds=round(time.monotonic() - self.t0, 3),
                gbps=0.0,
                objects_skipped=skipped,
                objects_deleted=deleted,
                verification={"status": "passed", "objects": 0, "method": "sync: up to date"},
                status="partial" if errors else "ok",
                objects_failed=len(errors),
                first_errors=[f"{k!r}: {why}" for k, why in sorted(errors.items())][:5],
            )
            if errors:
                raise partial_error(result, errors, [])
            journal.remove()
            return result
        caps = dst.capabilities
        # Segments already finished against the same source version are skipped, and so are
        # objects whose multipart upload an earlier run completed (their upload id is spent).
        catalog.load_journal(journal.path)
        resumed = resume(catalog, part_size, caps)
        uploads = prepare_uploads(dst, self.dst_uri, catalog, journal, part_size)
        chunks, segments, nbytes, objects = chunk_totals(catalog, part_size, caps)
        self.step("prepare")
        done_now = 0

        def on_done(finished: list[tuple[Chunk, list[int]]]) -> None:
            nonlocal done_now
            rows, records = [], []
            for chunk, seg_crcs in finished:
                ok = set(chunk.vouched)  # ``seg.v``: a whole object's vouch, or a part's
                for i, (seg, crc) in enumerate(zip(chunk.segments, seg_crcs, strict=False)):
                    rows.append((enc(seg.key), seg.part, crc, int(i in ok)))
                    records.append((seg.seg_id, crc, seg.fp or "null"))
            journal.record_done(records)  # the durable record first, then the scratch one
            catalog.write("INSERT OR REPLACE INTO seg VALUES(?,?,?,?)", rows)
            done_now += len(rows)

        dispatcher = Dispatcher(
            self.plan,
            self.fleet,
            secret,
            src_uri=self.src_uri,
            dst_uri=self.dst_uri,
            src_options=self.src_options,
            dst_options=self.dst_options,
            options=dispatch,
            job_id=self.job_id,
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
        transfer_seconds = time.monotonic() - self.t0
        self.step("move")
        return self._finish(
            catalog, src, dst, journal, stats, dispatcher, uploads, part_size, verify,
            skipped, resumed, transfer_seconds, delete=todo.to_delete > 0,
        )  # fmt: skip

    def _finish(
        self,
        catalog: Catalog,
        src: ObjectStore,
        dst: ObjectStore,
        journal: Journal,
        stats: DispatchStats,
        dispatcher: Dispatcher,
        uploads: dict[str, str],
        part_size: int,
        verify: str,
        skipped: int,
        resumed: int,
        transfer_seconds: float,
        *,
        delete: bool,
    ) -> TransferResult:
        """Check the source, commit, verify, mirror-delete and report (see module doc)."""
        caps = dst.capabilities
        # Commit: changed objects keep the destination's version; failed ones are left out.
        catalog.set_outcome("failed", stats.failed_keys.items(), FAILED)
        try:
            fresh = changed_objects(src, catalog) if relist_needed(catalog, delete) else []
        except StoreError as exc:
            raise TransferError(
                f"cannot list source {self.src_uri} again after the copy: {exc}"
            ) from exc
        changed_now = sorted(set(stats.changed_keys) | set(fresh))
        failed = catalog.outcomes("failed")
        changed = set(changed_now) - set(failed)
        catalog.set_outcome("changed", ((k, "changed") for k in sorted(changed)), CHANGED)
        abort_changed(dst, uploads, sorted(changed | set(failed)), journal)
        self.step("check_source")
        missing = fold_expected(catalog, part_size, caps)
        if missing:
            raise TransferError(f"internal error: {missing[:3]} have unfinished segments")
        limit = whole_limit(part_size, caps)
        to_complete = [
            Completion(k, [s.part for s in segments_of(k, size, None, part_size, caps)], size,
                       crc, fp)
            for k, size, crc, fp in (
                (dec(raw), size, crc, fp)
                for raw, size, crc, fp in catalog.pages(
                    "key, size, (SELECT crc FROM exp e WHERE e.key = src.key), fp",
                    "src",
                    f"state = {TODO} AND size > ?",
                    (limit,),
                )
            )
            if k in uploads
        ]  # fmt: skip
        unconfirmed, blocked = complete_uploads(
            dst, self.dst_uri, uploads, to_complete, journal, verify
        )
        if blocked:  # failed like an object the sink could not name; not expected there
            catalog.set_outcome("failed", sorted(blocked.items()), FAILED)
            catalog.write("DELETE FROM exp WHERE key = ?", [(enc(k),) for k in blocked])
            failed.update(blocked)
        vouch_multipart(catalog, limit, unconfirmed)
        self.step("commit")
        verification = verify_catalog(dst, catalog, verify)
        self.step("verify")
        for key, why in sorted(unconfirmed.items()):
            bad = [f for f in verification.failures if f.startswith(f"{key}: ")]
            if bad:
                raise TransferError(
                    f"completing the upload of {key} failed: {why}; the upload is gone and "
                    f"{key} at {self.dst_uri} does not match its source ({bad[0]}): delete the "
                    f"journal {journal.path} and copy it again"
                )
        if verification.status != "passed":
            # Objects the journal said were done but do not verify (changed at the destination
            # since) are forgotten, so the next run copies them again instead of failing again.
            for line in verification.failures:
                key = line.split(": ", 1)[0]
                journal.forget(key)
            raise TransferError(
                f"verification failed for {len(verification.failures)} object(s): "
                + "; ".join(verification.failures[:3])
                + " (nothing was deleted; re-run the same command to copy them again)"
            )
        deleted = 0
        if delete and not changed and not failed:
            deleted, delete_errors = self.mirror_delete(src, dst, catalog, True)
            failed.update(delete_errors)
        copied, nbytes = (
            int(x) for x in catalog.one("SELECT count(*), coalesce(sum(size), 0) FROM exp")
        )
        seconds = time.monotonic() - self.t0
        predicted, actual = plan_costs(self.plan, nbytes, seconds)
        from skyplane_ops.profiler.passive import after_transfer  # every transfer is a measurement

        paths = after_transfer(
            self.plan,
            self.fleet.backend,
            self.job_id,
            dispatcher.routes,
            stats.path_bytes,
            stats.path_seconds,
        )
        self.step("record")
        notes = [f"{k!r}: {why}" for k, why in sorted(failed.items())]
        notes += [f"{k!r}: source: changed during the run" for k in sorted(changed)]
        result = self.result(
            objects=copied,
            bytes=nbytes,
            seconds=round(seconds, 3),
            gbps=round(nbytes * 8 / 1e9 / seconds, 4) if seconds else 0.0,
            chunks=stats.chunks,
            chunks_resent=stats.resent,
            chunks_resumed=resumed,
            objects_skipped=skipped,
            predicted_gbps=round(self.plan.predicted_gbps, 4),
            predicted_cost_usd=predicted,
            actual_cost_usd=actual,
            paths=paths,
            verification={
                **verification.to_dict(),
                "transfer_seconds": round(transfer_seconds, 3),
            },
            status="partial" if (changed or failed) else "ok",
            objects_failed=len(failed),
            objects_changed=len(changed),
            objects_deleted=deleted,
            first_errors=notes[:5],
            routed_around=stats.dead_hops[:5],
        )
        if changed or failed:
            for line in notes:
                log.warning("not copied: %s", line)
            raise partial_error(result, failed, sorted(changed))  # the journal is kept
        journal.remove()
        return result

    def mirror_delete(
        self, src: ObjectStore, dst: ObjectStore, catalog: Catalog, listed_again: bool
    ) -> tuple[int, dict[str, str]]:
        """``sync --delete`` after a clean copy: (deleted, {key: why} of failed deletes).
        Candidates are ``dst.extra`` rows absent from a fresh source listing (``now``)."""
        if not catalog.one("SELECT 1 FROM dst WHERE extra = 1 LIMIT 1"):
            return 0, {}
        if not listed_again:
            try:
                catalog.add_now(src)
            except StoreError as exc:
                raise TransferError(
                    f"cannot list source {self.src_uri} again before deleting: {exc}; "
                    "nothing was deleted"
                ) from exc
        keys = (
            dec(k)
            for (k,) in catalog.pages(
                "key", "dst", "extra = 1 AND NOT EXISTS (SELECT 1 FROM now n WHERE n.key = dst.key)"
            )
        )
        return mirror.delete_extra(dst, keys, ())
