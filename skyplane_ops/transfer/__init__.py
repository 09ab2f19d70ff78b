"""The transfer engine: run a planned transfer on a provisioned fleet, resumably and verified.

The one call the CLI, Airflow and Dagster faces use::

    from skyplane_ops.transfer import run_transfer
    result = run_transfer(plan, fleet, "s3://src/data/", "gs://dst/data/")
    result.to_dict()   # small: ids, objects, bytes, seconds, Gbps, cost, verification

Steps: list the source (include/exclude globs) -> manifest (parts aligned to the destination's
part size, small objects batched) -> skip what the journal says is finished (and, with
``sync=True``, what the destination already has) -> create/reuse multipart uploads -> dispatch
chunks along the plan's paths -> check the source did not change -> complete multipart uploads
-> verify every object (size + CRC32C). Nothing partial becomes visible: parts stay staged until
completion, small objects are written whole. On failure the journal is kept and re-running the
same call resumes; on success it is deleted.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway_agent.auth import load_secret
from gateway_agent.stores.base import ObjectInfo, ObjectStore, SkippedEntry
from gateway_agent.stores.errors import BucketNotFoundError, StoreError, UploadNotFoundError
from gateway_agent.synthetic import open_any_store
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.transfer.checksum import crc32c_combine
from skyplane_ops.transfer.dispatch import Dispatcher, DispatchOptions, check_fleet, plan_routes
from skyplane_ops.transfer.journal import Journal, default_journal_dir, transfer_key
from skyplane_ops.transfer.manifest import (
    DEFAULT_PART_SIZE,
    Chunk,
    Manifest,
    build_manifest,
    fingerprint,
    list_source,
    make_chunks,
    refused_names,
    same_object,
)
from skyplane_ops.transfer.progress import Progress, ProgressCallback
from skyplane_ops.transfer.result import TransferResult
from skyplane_ops.transfer.verify import changed_objects, verify_objects

log = logging.getLogger(__name__)

__all__ = [
    "DispatchOptions",
    "ObjectsFailedError",
    "Progress",
    "ProgressCallback",
    "SourceChangedError",
    "TransferResult",
    "run_transfer",
]


class SourceChangedError(TransferError):
    """Source objects changed while they were copied; they were not committed."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = sorted(keys)
        shown = ", ".join(self.keys[:3]) + (" ..." if len(self.keys) > 3 else "")
        super().__init__(
            f"{len(self.keys)} source object(s) changed during the transfer and were not "
            f"committed: {shown}; everything else was committed, re-run with sync to copy "
            "their new version"
        )


class ObjectsFailedError(TransferError):
    """Some objects could not be copied (an unreadable source entry, a name the destination
    cannot hold); everything else was committed and verified. ``failures`` maps each key to
    the side that failed and why; ``changed`` lists source objects that changed meanwhile."""

    def __init__(self, failures: Mapping[str, str], changed: Sequence[str] = ()) -> None:
        self.failures = dict(sorted(failures.items()))
        self.changed = list(changed)
        shown = "; ".join(f"{k!r}: {why}" for k, why in list(self.failures.items())[:3])
        more = f" (and {len(self.failures) - 3} more)" if len(self.failures) > 3 else ""
        extra = f"; {len(self.changed)} changed during the copy" if self.changed else ""
        super().__init__(
            f"partial: {len(self.failures)} object(s) could not be copied: {shown}{more}{extra}; "
            "everything else was committed and verified: fix the cause and re-run"
        )


def _open(uri: str, options: Mapping[str, Any] | None, side: str) -> ObjectStore:
    try:
        return open_any_store(uri, dict(options or {}))
    except (StoreError, ValueError) as exc:
        raise TransferError(f"cannot open {side} {uri}: {exc}") from exc


def _check_destination(dst: ObjectStore, dst_uri: str, full: bool) -> dict[str, ObjectInfo]:
    """Fail early when the destination does not exist; with ``full`` return its listing."""
    try:
        if not full:
            next(iter(dst.list()), None)
            return {}
        return {o.key: o for o in dst.list()}
    except BucketNotFoundError as exc:
        raise TransferError(f"destination {dst_uri} does not exist: {exc}") from exc
    except StoreError as exc:
        raise TransferError(f"cannot access destination {dst_uri}: {exc}") from exc


def _prepare_uploads(
    dst: ObjectStore,
    dst_uri: str,
    manifest: Manifest,
    journal: Journal,
    skip: Collection[str] = (),
) -> dict[str, str]:
    """A multipart upload per multi-part object (but ``skip``), reused from the journal."""
    uploads: dict[str, str] = {}
    for o in manifest.objects:
        if not manifest.is_multipart(o.key) or o.key in skip:
            continue
        fp = fingerprint(o)
        upload_id = journal.upload_for(o.key, fp)
        if upload_id is None:
            try:
                upload_id = dst.create_multipart(o.key)
            except StoreError as exc:
                raise TransferError(f"destination {dst_uri} is not writable: {exc}") from exc
            journal.record_upload(o.key, upload_id, fp)
        uploads[o.key] = upload_id
    return uploads


def _complete_uploads(
    dst: ObjectStore,
    dst_uri: str,
    manifest: Manifest,
    uploads: Mapping[str, str],
    keys: Sequence[str],
    expected: Mapping[str, tuple[int, int]],
    journal: Journal,
    fps: Mapping[str, list[Any]],
    verify: str,
) -> dict[str, str]:
    """Complete each upload and journal it at once, so a re-run never completes it twice.

    Every completion is attempted; if any fails, ``TransferError`` names it (the journal keeps
    the completed ones). An upload the store no longer knows may have been completed by an
    earlier run that stopped before journaling it: with ``verify="full"`` it is left to the
    CRC32C check; the returned dict maps such keys to the store's message.
    """
    unconfirmed: dict[str, str] = {}
    failures: list[tuple[str, StoreError]] = []

    def complete(key: str) -> None:
        parts = [s.part for s in manifest.segments[key]]
        try:
            dst.complete_multipart(key, uploads[key], parts)
        except UploadNotFoundError as exc:
            if verify != "full":
                failures.append((key, exc))
            else:
                log.warning("upload of %s not found (completed before?): %s", key, exc)
                unconfirmed[key] = str(exc)
            return
        except StoreError as exc:
            failures.append((key, exc))
            return
        size, crc = expected[key]
        journal.record_commit(key, size, crc, fps[key])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(complete, keys))
    if failures:
        key, exc = sorted(failures, key=lambda f: f[0])[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise TransferError(
            f"completing the upload of {key} at {dst_uri} failed{more}: {exc}; completed "
            f"uploads are journaled in {journal.path}: fix the cause and re-run the same "
            "command to resume"
        )
    return unconfirmed


def _costs(plan: TransferPlan, nbytes: int, seconds: float) -> tuple[float, float]:
    """(predicted, actual) $ for the bytes moved.

    Egress scales with bytes. The plan's VM $ covers ``volume/throughput + provisioning``
    seconds; its per-second rate is recovered from that and applied to the predicted and
    to the measured transfer time (provisioning time counted the same on both sides).
    """
    gb = nbytes / 1e9
    scale = gb / plan.volume_gb if plan.volume_gb > 0 else 0.0
    egress = plan.egress_cost_usd * scale
    prov_s = float(plan.details.get("provisioning_seconds", 60.0))
    plan_s = plan.volume_gb * 8 / plan.predicted_gbps if plan.predicted_gbps > 0 else 0.0
    rate = plan.vm_cost_usd / (plan_s + prov_s) if plan_s + prov_s > 0 else 0.0
    predicted_s = gb * 8 / plan.predicted_gbps if plan.predicted_gbps > 0 else 0.0
    predicted = egress + rate * (predicted_s + prov_s)
    actual = egress + rate * (seconds + prov_s)
    return round(predicted, 6), round(actual, 6)


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
    progress: ProgressCallback | None = None,
    part_size: int = DEFAULT_PART_SIZE,
    verify: str = "full",
    dispatch: DispatchOptions | None = None,
) -> TransferResult:
    """Copy ``src_uri`` to ``dst_uri`` through ``fleet`` along ``plan``; see module docstring.

    ``verify``: ``"full"`` (size + CRC32C, reading back when the destination reports no
    CRC32C) or ``"size"``. Raises ``TransferError`` (or ``SourceChangedError``) with a message
    naming what failed; the journal then lets the same call resume.
    """
    if verify not in ("full", "size"):
        raise TransferError(f"verify must be 'full' or 'size', not {verify!r}")
    if len(plan.dsts) != 1:
        raise TransferError(
            f"run_transfer copies to one destination; the plan has {len(plan.dsts)} "
            f"({', '.join(plan.dsts)}): run one transfer per destination"
        )
    check_fleet(plan, fleet)
    t0 = time.monotonic()
    try:
        secret = load_secret(fleet.secret_ref)
    except OSError as exc:
        raise TransferError(f"cannot read the fleet secret {fleet.secret_ref}: {exc}") from exc
    src = _open(src_uri, src_options, "source")
    dst = _open(dst_uri, dst_options, "destination")
    problems: list[SkippedEntry] = []  # left out by the listing (links, unreadable folders)
    objects = list_source(src, src_uri, include, exclude, problems)
    existing = _check_destination(dst, dst_uri, full=sync)
    skipped = 0
    if sync:
        todo = [o for o in objects if o.key not in existing or not same_object(o, existing[o.key])]
        skipped = len(objects) - len(todo)
        objects = todo
    # Per-object problems known before any work: unreadable source entries, and names the
    # destination cannot hold (never sent, so never half-written).
    unread = {p.key: f"source: {p.reason}" for p in problems if p.error}
    refused = refused_names(dst, objects)
    objects = [o for o in objects if o.key not in refused]
    unread.update(refused)
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    route = [" -> ".join(r) + f" ({s:.0%})" for r, s in plan_routes(plan)]
    if not objects:
        if unread:
            raise ObjectsFailedError(unread)
        return TransferResult(
            transfer_id=fleet.transfer_id,
            job_id=job_id,
            src_uri=src_uri,
            dst_uri=dst_uri,
            objects=0,
            bytes=0,
            seconds=round(time.monotonic() - t0, 3),
            gbps=0.0,
            objects_skipped=skipped,
            route=route,
            verification={"status": "passed", "objects": 0, "method": "sync: up to date"},
        )
    manifest = build_manifest(objects, dst.capabilities, part_size, skipped)
    journal = Journal(
        Path(journal_dir) if journal_dir else default_journal_dir(),
        transfer_key(src_uri, dst_uri, part_size, include, exclude),
    )
    # Segments already finished against the same source version are skipped, and so are
    # objects whose multipart upload an earlier run completed (their upload id is spent).
    crcs: dict[str, int] = {}
    remaining = []
    fps = {o.key: fingerprint(o) for o in objects}
    committed: dict[str, tuple[int, int]] = {}
    resumed = 0
    for o in objects:
        done_before = journal.commit_for(o.key, fps[o.key])
        if done_before is not None:
            committed[o.key] = done_before
            resumed += len(manifest.segments[o.key])
            continue
        for seg in manifest.segments[o.key]:
            done = journal.finished(seg.seg_id, fps[o.key])
            if done is None:
                remaining.append(seg)
            else:
                crcs[seg.seg_id] = done
                resumed += 1
    resumed_crcs = len(crcs)
    uploads = _prepare_uploads(dst, dst_uri, manifest, journal, skip=committed)
    chunks = make_chunks(remaining)

    def on_done(finished: list[tuple[Chunk, list[int]]]) -> None:
        records = []
        for chunk, seg_crcs in finished:
            for seg, crc in zip(chunk.segments, seg_crcs, strict=False):
                crcs[seg.seg_id] = crc
                records.append((seg.seg_id, crc, fps[seg.key]))
        journal.record_done(records)

    dispatcher = Dispatcher(
        plan,
        fleet,
        secret,
        src_uri=src_uri,
        dst_uri=dst_uri,
        src_options=src_options,
        dst_options=dst_options,
        options=dispatch,
        job_id=job_id,
    )
    try:
        stats = dispatcher.run(chunks, uploads, on_done, progress)
    except TransferError as exc:
        if "AccessDenied" in str(exc) or "permission denied" in str(exc).lower():
            raise TransferError(f"destination {dst_uri} is not writable: {exc}") from exc
        raise TransferError(
            f"{exc}; {resumed + len(crcs) - resumed_crcs} of "
            f"{sum(len(s) for s in manifest.segments.values())} segments "
            f"are finished and journaled in {journal.path}: re-run the same command to resume"
        ) from exc
    transfer_seconds = time.monotonic() - t0

    # Commit: detect source changes, complete multipart uploads, verify.
    failed = dict(stats.failed_keys)  # objects a gateway could not read or write: not copied
    changed = (set(stats.changed_keys) | changed_objects(src, objects)) - set(failed)
    for key in changed | set(failed):
        # Only staged parts are dropped: a whole object is never written from a torn or changed
        # read (reads are pinned to the listed version), and the destination's existing
        # version of a changed object is the user's and stays.
        if key in uploads:
            try:
                dst.abort_multipart(key, uploads[key])
            except StoreError as exc:
                log.warning("cleaning up changed object %s: %s", key, exc)
            journal.drop_upload(key)
    expected: dict[str, tuple[int, int]] = {}
    to_complete = []
    for o in objects:
        if o.key in changed or o.key in failed:
            continue
        if o.key in committed:
            expected[o.key] = committed[o.key]  # completed by an earlier run: verify only
            continue
        segs = manifest.segments[o.key]
        missing = [s.seg_id for s in segs if s.seg_id not in crcs]
        if missing:
            raise TransferError(f"internal error: {o.key} has unfinished segments {missing[:3]}")
        crc = crcs[segs[0].seg_id]
        for s in segs[1:]:
            crc = crc32c_combine(crc, crcs[s.seg_id], s.length)
        expected[o.key] = (o.size, crc)
        if o.key in uploads:
            to_complete.append(o.key)
    unconfirmed = _complete_uploads(
        dst, dst_uri, manifest, uploads, to_complete, expected, journal, fps, verify
    )
    verification = verify_objects(dst, expected, verify)
    for key, why in sorted(unconfirmed.items()):
        bad = [f for f in verification.failures if f.startswith(f"{key}: ")]
        if bad:
            raise TransferError(
                f"completing the upload of {key} failed: {why}; the upload is gone and {key} "
                f"at {dst_uri} does not match its source ({bad[0]}): delete the journal "
                f"{journal.path} and copy it again"
            )
    if failed or unread:
        raise ObjectsFailedError({**unread, **failed}, sorted(changed))
    if changed:
        journal.remove()  # everything else is committed; a re-run (or sync) starts afresh
        raise SourceChangedError(sorted(changed))
    if verification.status != "passed":
        raise TransferError(
            f"verification failed for {len(verification.failures)} object(s): "
            + "; ".join(verification.failures[:3])
        )
    journal.remove()
    nbytes = sum(o.size for o in objects)
    seconds = time.monotonic() - t0
    predicted, actual = _costs(plan, nbytes, seconds)
    from skyplane_ops.profiler.passive import after_transfer  # every transfer is a measurement

    paths = after_transfer(
        plan, fleet.backend, job_id, dispatcher.routes, stats.path_bytes, stats.path_seconds
    )
    return TransferResult(
        paths=paths,
        transfer_id=fleet.transfer_id,
        job_id=job_id,
        src_uri=src_uri,
        dst_uri=dst_uri,
        objects=len(objects),
        bytes=nbytes,
        seconds=round(seconds, 3),
        gbps=round(nbytes * 8 / 1e9 / seconds, 4) if seconds else 0.0,
        chunks=stats.chunks,
        chunks_resent=stats.resent,
        chunks_resumed=resumed,
        objects_skipped=skipped,
        route=route,
        predicted_gbps=round(plan.predicted_gbps, 4),
        predicted_cost_usd=predicted,
        actual_cost_usd=actual,
        verification={**verification.to_dict(), "transfer_seconds": round(transfer_seconds, 3)},
    )
