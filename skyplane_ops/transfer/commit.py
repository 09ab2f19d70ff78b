"""The commit step: multipart uploads are created, completed (or aborted) here, never deleted.

Safety rule: this module never deletes a destination object. An object whose source changed
during the run keeps whatever the destination had (its multipart upload is aborted, so
nothing staged becomes visible; a small object that was already written whole holds the
version that was read, which the store's read checks guarantee is one consistent version).
It is reported and copied again by the next run. Only ``mirror.delete_extra`` (``sync
--delete``) removes destination objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from gateway_agent.stores.base import ObjectInfo, ObjectStore, landed_version
from gateway_agent.stores.errors import (
    KeyBlockedError,
    KeyNotSupportedError,
    StoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.objmeta import MetadataNotSupportedError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.catalog import TODO, Catalog, dec, enc
from skyplane_ops.transfer.journal.file import Journal
from skyplane_ops.transfer.todo import whole_limit

log = logging.getLogger(__name__)


def prepare_uploads(
    dst: ObjectStore,
    dst_uri: str,
    catalog: Catalog,
    journal: Journal,
    part_size: int,
    meta_of: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> dict[str, str]:
    """A multipart upload per multi-part object still to copy, reused from the journal (its
    index in the catalog) when the source version is the same. Only large objects (at least a
    part each) are held here. ``meta_of(key)``: the metadata a new upload is created with (the
    object's, read from the source: the gateways write parts only)."""
    uploads: dict[str, str] = {}
    limit = whole_limit(part_size, dst.capabilities)
    where = f"state = {TODO} AND size > ?"
    for raw, fp, known in list(
        catalog.pages(
            "key, fp, (SELECT j.upload_id FROM j_upload j WHERE j.key = src.key AND j.fp = src.fp)",
            "src",
            where,
            (limit,),
        )
    ):
        key = dec(raw)
        upload_id = known
        if upload_id is None:
            try:
                meta = meta_of(key) if meta_of is not None else None
                if meta:
                    upload_id = cast(Any, dst).create_multipart(key, meta=meta)
                else:
                    upload_id = dst.create_multipart(key)
            except MetadataNotSupportedError as exc:
                raise TransferError(
                    f"{dst_uri}: cannot hold the metadata of {key!r}: {exc}"
                ) from exc
            except StoreError as exc:
                raise TransferError(f"destination {dst_uri} is not writable: {exc}") from exc
            journal.record_upload(key, upload_id, fp)
        uploads[key] = upload_id
    return uploads


@dataclass(frozen=True)
class Completion:
    """One multipart object to complete: its parts and what verification expects."""

    key: str
    parts: list[int]
    size: int
    crc: int
    fp: str


def complete_uploads(
    dst: ObjectStore,
    dst_uri: str,
    uploads: Mapping[str, str],
    todo: Sequence[Completion],
    journal: Journal,
    verify: str,
    meta_of: Callable[[str], Mapping[str, Any] | None] | None = None,
    landed: dict[str, str] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """Complete each upload and journal it at once, so a re-run never completes it twice.
    ``landed`` gets {key: the destination version each completion's answer named}.

    Every completion is attempted; if any fails, ``TransferError`` names it (the journal keeps
    the completed ones). An upload the store no longer knows may have been completed by an
    earlier run that stopped before journaling it: with ``verify`` ``"full"`` or
    ``"read-back"`` it is left to the CRC32C check (never vouched for: ``vouch_multipart``).
    Returns ({key: the store's message} of those, {key: why} of objects whose name the
    destination cannot take: a per-object failure, their uploads kept staged and journaled so
    the run after the user clears the way only completes them). ``meta_of``: the metadata a
    store that takes it at the commit (``META_AT_COMPLETE``: Azure's block list) is given.
    """
    if not getattr(dst, "META_AT_COMPLETE", False):
        meta_of = None
    unconfirmed: dict[str, str] = {}
    blocked: dict[str, str] = {}
    failures: list[tuple[str, StoreError]] = []

    def complete(item: Completion) -> None:
        key = item.key
        try:
            meta = meta_of(key) if meta_of is not None else None
            if meta:
                info = cast(Any, dst).complete_multipart(key, uploads[key], item.parts, meta=meta)
            else:
                info = dst.complete_multipart(key, uploads[key], item.parts)
        except (KeyBlockedError, KeyNotSupportedError) as exc:
            blocked[key] = f"destination: {exc}"
            return
        except UploadNotFoundError as exc:
            if verify == "size":
                failures.append((key, exc))
            else:
                log.warning("upload of %s not found (completed before?): %s", key, exc)
                unconfirmed[key] = str(exc)
            return
        except StoreError as exc:
            failures.append((key, exc))
            return
        journal.record_commit(key, item.size, item.crc, item.fp)
        version = landed_version(info) if isinstance(info, ObjectInfo) else None
        if landed is not None and version:
            landed[key] = version

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(complete, todo))
    if failures:
        key, exc = sorted(failures, key=lambda f: f[0])[0]
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise TransferError(
            f"completing the upload of {key} at {dst_uri} failed{more}: {exc}; completed "
            f"uploads are journaled in {journal.path}: fix the cause and re-run the same "
            "command to resume"
        )
    return unconfirmed, blocked


def abort_changed(
    dst: ObjectStore, uploads: Mapping[str, str], keys: Iterable[str], journal: Journal
) -> None:
    """Abort the staged uploads of changed or failed objects (nothing visible is touched) and
    forget them in the journal, so a re-run starts those objects afresh."""
    for key in keys:
        if key not in uploads:
            continue  # a whole object: the destination keeps the version it has
        try:
            dst.abort_multipart(key, uploads[key])
        except StoreError as exc:
            log.warning("aborting the upload of %s: %s", key, exc)
        journal.drop_upload(key)


def vouch_multipart(catalog: Catalog, limit: int, unconfirmed: Mapping[str, str]) -> None:
    """Vouch for each multipart object this run completed whose every part was written by a
    vouched write of this run (``seg.v``; resumed parts are not: ``todo.resume``). A part the
    store did not vouch for, or an upload found completed already (``unconfirmed``: its bytes
    may be an earlier run's), leaves the object to be checked at verification."""
    catalog.run(
        "INSERT OR IGNORE INTO vouch SELECT key FROM src "
        f"WHERE state = {TODO} AND size > ? AND EXISTS (SELECT 1 FROM seg g WHERE g.key = src.key) "
        "AND NOT EXISTS (SELECT 1 FROM seg g WHERE g.key = src.key AND g.v = 0)",
        (limit,),
    )
    catalog.write("DELETE FROM vouch WHERE key = ?", [(enc(k),) for k in unconfirmed])
