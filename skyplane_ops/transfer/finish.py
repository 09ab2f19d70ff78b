"""The engine's last steps, once every chunk has moved: check the source again, commit the
uploads, verify the destination, mirror-delete and report (see the package docstring).

Nothing here removes an object the user owns except ``mirror.delete_absent``, and only after
every copy committed and verified with nothing failed or changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway_agent.stores.base import ObjectStore
from gateway_agent.stores.errors import StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import mirror, syncstate
from skyplane_ops.transfer.catalog import CHANGED, FAILED, TODO, Catalog, dec, enc
from skyplane_ops.transfer.commit import (
    Completion,
    abort_changed,
    complete_uploads,
    vouch_multipart,
)
from skyplane_ops.transfer.dispatch import DispatchStats
from skyplane_ops.transfer.journal import Journal
from skyplane_ops.transfer.metadata import upload_meta, verify_metadata
from skyplane_ops.transfer.move import delete_moved
from skyplane_ops.transfer.report import ReportRun, write_report
from skyplane_ops.transfer.result import TransferResult, partial_error, plan_costs
from skyplane_ops.transfer.run_state import RunState
from skyplane_ops.transfer.todo import fold_expected, segments_of, whole_limit
from skyplane_ops.transfer.verify import (
    _VOUCHED,
    Verification,
    changed_objects,
    relist_needed,
    verify_catalog,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Moved:
    """What the move step leaves for the rest: its stats, the dispatcher's routes, the open
    multipart uploads, and the objects and segments earlier runs had done already."""

    stats: DispatchStats
    routes: list[tuple[list[str], float]]
    uploads: dict[str, str]
    skipped: int
    resumed: int
    seconds: float
    capped: bool = False  # a bandwidth cap held the rate: the paths' rates are not the links'


def finish_run(
    run: RunState,
    catalog: Catalog,
    src: ObjectStore,
    dst: ObjectStore,
    journal: Journal,
    moved: Moved,
    *,
    part_size: int,
    verify: str,
    delete: bool,
    move: bool = False,
) -> TransferResult:
    """Check the source, commit, verify, mirror-delete and report; raise on a failure
    (``TransferError``) or on objects left out (``PartialTransferError``)."""
    failed, changed = _check_source(run, catalog, src, dst, journal, moved, delete)
    run.step("check_source")
    meta_of = upload_meta(src, dst, run.request.metadata, run.request.metadata_set)
    unconfirmed = _commit(
        run, catalog, dst, journal, moved.uploads, part_size, verify, failed, meta_of
    )
    run.step("commit")
    verification = _verify(run, catalog, dst, journal, verify, unconfirmed, src)
    run.step("verify")
    deleting = delete and not changed and not failed
    deleted, delete_errors = 0, dict[str, str]()
    if deleting:
        deleted, delete_errors = mirror.delete_absent(src, dst, catalog, run.src_uri, True)
        failed.update(delete_errors)
    moved_away = 0
    if move:  # after verification passed (``_verify`` raised otherwise): the source goes
        moved_away, kept = delete_moved(src, catalog)
        failed.update(kept)
        run.step("move_delete")
    report = run.report_run(deleted=deleting, delete_failed=delete_errors)
    return _report(
        run, catalog, journal, moved, verification, failed, changed, deleted, report, moved_away
    )


def _check_source(
    run: RunState,
    catalog: Catalog,
    src: ObjectStore,
    dst: ObjectStore,
    journal: Journal,
    moved: Moved,
    delete: bool,
) -> tuple[dict[str, str], set[str]]:
    """Failed and changed objects; both keep the destination's version (their uploads are
    aborted), so a commit never lands bytes of a source that changed during the run."""
    catalog.set_outcome("failed", moved.stats.failed_keys.items(), FAILED)
    try:
        fresh = changed_objects(src, catalog) if relist_needed(catalog, delete) else []
    except StoreError as exc:
        raise TransferError(
            f"cannot list source {run.src_uri} again after the copy: {exc}"
        ) from exc
    failed = catalog.outcomes("failed")
    changed = set(moved.stats.changed_keys) | set(fresh)
    changed -= set(failed)
    catalog.set_outcome("changed", ((k, "changed") for k in sorted(changed)), CHANGED)
    abort_changed(dst, moved.uploads, sorted(changed | set(failed)), journal)
    return failed, changed


def _commit(
    run: RunState,
    catalog: Catalog,
    dst: ObjectStore,
    journal: Journal,
    uploads: dict[str, str],
    part_size: int,
    verify: str,
    failed: dict[str, str],
    meta_of: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> dict[str, str]:
    """Complete the multipart uploads (``meta_of``: their metadata, for a store that takes it
    at the commit); {key: why} of completions not confirmed (verification
    then decides). A name the destination refuses fails that object alone (``failed``)."""
    caps = dst.capabilities
    missing = fold_expected(catalog, part_size, caps)
    if missing:
        raise TransferError(f"internal error: {missing[:3]} have unfinished segments")
    limit = whole_limit(part_size, caps)
    to_complete = [
        Completion(k, [s.part for s in segments_of(k, size, None, part_size, caps)], size, crc, fp)
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
    ]
    landed: dict[str, str] = {}
    unconfirmed, blocked = complete_uploads(
        dst, run.dst_uri, uploads, to_complete, journal, verify, meta_of, landed
    )
    catalog.write("UPDATE way SET ver = ? WHERE key = ?", [(v, enc(k)) for k, v in landed.items()])
    if blocked:  # failed like an object the sink could not name; not expected there
        catalog.set_outcome("failed", sorted(blocked.items()), FAILED)
        catalog.write("DELETE FROM exp WHERE key = ?", [(enc(k),) for k in blocked])
        failed.update(blocked)
    vouch_multipart(catalog, limit, unconfirmed)
    return unconfirmed


def _verify(
    run: RunState,
    catalog: Catalog,
    dst: ObjectStore,
    journal: Journal,
    verify: str,
    unconfirmed: dict[str, str],
    src: ObjectStore | None = None,
) -> Verification:
    """Verify the destination against the catalog; raise, naming what does not match."""
    verification = verify_catalog(dst, catalog, verify)
    if verify == "full" and verification.status == "passed" and src is not None:
        # Metadata and write options, by HEAD, of the objects no write vouched for: a vouched
        # write (S3's checked PUT, a completed upload, a local file) stored the metadata it
        # was sent with the bytes, atomically, or failed.
        request = run.request
        _looked, bad = verify_metadata(
            src,
            dst,
            (dec(raw) for (raw,) in catalog.pages("key", "exp e", f"NOT {_VOUCHED}")),
            metadata=request.metadata,
            metadata_set=request.metadata_set,
            dst_options=request.dst.options,
        )
        if bad:
            verification.status, verification.failures = "failed", bad
    for key, why in sorted(unconfirmed.items()):
        bad = [f for f in verification.failures if f.startswith(f"{key}: ")]
        if bad:
            raise TransferError(
                f"completing the upload of {key} failed: {why}; the upload is gone and "
                f"{key} at {run.dst_uri} does not match its source ({bad[0]}): delete the "
                f"journal {journal.path} and copy it again"
            )
    if verification.status != "passed":
        # Objects the journal said were done but do not verify (changed at the destination
        # since) are forgotten, so the next run copies them again instead of failing again.
        for line in verification.failures:
            journal.forget(line.split(": ", 1)[0])
        raise TransferError(
            f"verification failed for {len(verification.failures)} object(s): "
            + "; ".join(verification.failures[:3])
            + " (nothing was deleted; re-run the same command to copy them again)"
        )
    return verification


def _report(
    run: RunState,
    catalog: Catalog,
    journal: Journal,
    moved: Moved,
    verification: Verification,
    failed: dict[str, str],
    changed: set[str],
    deleted: int,
    report: ReportRun,
    moved_away: int = 0,
) -> TransferResult:
    """Record the paths' measurements and build the result; objects left out raise a
    ``PartialTransferError`` (the journal is kept), else the journal goes."""
    copied, nbytes = (
        int(x) for x in catalog.one("SELECT count(*), coalesce(sum(size), 0) FROM exp")
    )
    seconds = run.elapsed()
    predicted, actual = plan_costs(run.plan, nbytes, seconds)
    from skyplane_ops.profiler.passive import after_transfer  # every transfer is a measurement

    stats = moved.stats
    paths = after_transfer(
        run.plan, run.fleet.backend, run.job_id, moved.routes, stats.path_bytes,
        stats.path_seconds, capped=moved.capped,
    )  # fmt: skip
    if stats.path_joined:  # when each path that joined the running job did (``dispatch.join``)
        joined = {tuple(moved.routes[p][0]): s for p, s in stats.path_joined.items()}
        paths = [
            {**p, "joined_s": joined[tuple(p["regions"])]} if tuple(p["regions"]) in joined else p
            for p in paths
        ]
    run.step("record")
    notes = [f"{k!r}: {why}" for k, why in sorted(failed.items())]
    notes += [f"{k!r}: source: changed during the run" for k in sorted(changed)]
    result = run.result(
        objects=copied,
        bytes=nbytes,
        seconds=round(seconds, 3),
        gbps=round(nbytes * 8 / 1e9 / seconds, 4) if seconds else 0.0,
        chunks=stats.chunks,
        chunks_resent=stats.resent,
        chunks_resumed=moved.resumed,
        objects_skipped=moved.skipped,
        predicted_gbps=round(run.plan.predicted_gbps, 4),
        predicted_cost_usd=predicted,
        actual_cost_usd=actual,
        paths=paths,
        verification={**verification.to_dict(), "transfer_seconds": round(moved.seconds, 3)},
        status="partial" if (changed or failed) else "ok",
        objects_failed=len(failed),
        objects_changed=len(changed),
        objects_deleted=deleted,
        objects_moved=moved_away,
        first_errors=notes[:5],
        routed_around=stats.dead_hops[:5],
    )
    write_report(run.request, result, report, catalog)  # every object's outcome
    if changed or failed:
        for line in notes:
            log.warning("not copied: %s", line)
        raise partial_error(result, failed, sorted(changed))  # the journal is kept
    syncstate.record_run(catalog)  # a sync's pairs, now known equal (before the journal goes)
    journal.remove()
    return result
