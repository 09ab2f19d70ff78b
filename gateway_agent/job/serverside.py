"""The server-side role of a gateway job: a chunk on a server-side path is copied by the
stores themselves (``SupportsCopyFrom``: S3 CopyObject/UploadPartCopy, GCS rewrite, Azure Put
Blob From URL), never read into this gateway. The control plane sees the same ``done`` event
as for a written chunk (a CRC32C per segment: the one the store reports for what it copied),
so the journal, the commit of staged uploads and the end verification are those of every path.

A chunk the destination cannot copy from this source (a part of a GCS object: a rewrite has
no byte range) goes the byte path of this same gateway (read, check, write). Where the store
reports no CRC32C of a copied part (moto's UploadPartCopy), the part is read from the source
to compute it (bytes through the gateway, counted as read). A destination that refuses the
copy (not implemented; access denied: its credentials may not read the source) sends this
chunk and the rest of the job the byte path, once, with a warning. The paths are the spec's
``server_side_paths``; the route of such a path is the one region of this gateway.
"""

from __future__ import annotations

import base64
import threading
from functools import partial
from typing import Any, cast

from gateway_agent.job.base import ObjectFailed, log
from gateway_agent.job.source import SourceRole, _source_problem
from gateway_agent.stores.base import (
    CopiesMetadata,
    ObjectStore,
    SupportsCopyFrom,
    SupportsMetadata,
)
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import (
    AccessDeniedError,
    CopyMismatchError,
    CopyNotSupportedError,
    KeyBlockedError,
    KeyNotSupportedError,
    StoreError,
)
from gateway_agent.stores.objmeta import policy

# Guards each job's switch to the byte path (taken once per refused chunk: never contended).
_REFUSAL = threading.Lock()


class ServerSideRole(SourceRole):
    """The source role with server-side paths: the source loop offers each chunk to
    ``_copied`` before reading it."""

    _copy_refused = False  # the destination answered "not implemented": bytes from now on

    def _copied(self, desc: dict[str, Any]) -> bool:
        """Copy a chunk of a server-side path store to store and report it done; False when
        the chunk is not on one or must go the byte path instead (nothing reported)."""
        paths = self.spec.get("server_side_paths") or ()
        if self._copy_refused or str(desc["path"]) not in {str(p) for p in paths}:
            return False
        src, dst = self._store("src"), self._store("dst")
        segs: list[dict[str, Any]] = desc["segs"]
        parts = any(s.get("upload_id") for s in segs)
        if not (isinstance(dst, SupportsCopyFrom) and dst.can_copy_from(src, part=parts)):
            return False
        try:
            got = self._each(partial(self._copy_one, src, cast(SupportsCopyFrom, dst)), segs)
        except CopyNotSupportedError as exc:
            with _REFUSAL:  # readers copy in parallel: one warning, however many were refused
                first, self._copy_refused = not self._copy_refused, True
            if first:
                log.warning("job %s: server-side copy refused, moving bytes: %s", self.job_id, exc)
            return False
        crcs = [crc for crc, _, _ in got]
        vouched = [i for i, (_, ok, _) in enumerate(got) if ok]
        versions = [made for _, _, made in got]  # per segment: the version its copy made
        total = sum(int(s["length"]) for s in segs)
        self._count(chunks_written=1, bytes_written=total)
        extra = {"versions": versions} if any(versions) else {}  # the report's, as a sink's
        self._event(
            t="done", chunk=desc["chunk"], crcs=crcs, vouched=vouched, how="server-side", **extra
        )
        return True

    def _copy_one(
        self, src: ObjectStore, dst: SupportsCopyFrom, seg: dict[str, Any]
    ) -> tuple[int, bool, str | None]:
        """One segment copied by the stores: its CRC32C (the store's, else read from the
        source), the version the copy made (None for a part) and whether the copy vouches
        for it (``COPY_VOUCHES``: the store computed it
        over the bytes it stored, as S3 echoes a PutObject's; verification then skips the
        object's HEAD). Per-object problems fail that object only (``ObjectFailed``)."""
        # A destination that reads the metadata itself, in fewer calls (``CopiesMetadata``),
        # else the source's HEAD (and tags), then its copy: no barrier either way.
        keeping = self._meta_keep and not seg.get("upload_id") and isinstance(dst, CopiesMetadata)
        if self._meta_keep and not keeping and isinstance(src, SupportsMetadata):
            seg = self._with_metadata(src, [seg])[0]
        key, version, n = seg["key"], seg.get("version"), int(seg["length"])
        offset = int(seg.get("offset", 0))
        try:
            if keeping:
                got = cast(CopiesMetadata, dst).copy_keeping_metadata(
                    src, key, n, version, self._meta_set
                )
            elif seg.get("upload_id"):
                got = dst.copy_part_from(
                    src, key, seg["upload_id"], int(seg["part"]), offset, n, version
                )
            else:
                meta = policy(seg.get("meta") or {}, True, self._meta_set) or None
                got = dst.copy_from(src, key, n, version, meta)
        except CopyNotSupportedError:
            raise
        except AccessDeniedError as exc:
            # S3 and GCS read the source with the destination's credentials (minted with
            # the source's read on this route; another account's bucket policy or KMS key
            # may still refuse it). The bytes path reads with the source's own
            # (``docs/vmless.md``).
            raise CopyNotSupportedError(str(exc), code=exc.code, status=exc.status) from None
        except (KeyNotSupportedError, KeyBlockedError, CopyMismatchError) as exc:
            raise ObjectFailed("failed", key, "destination", str(exc)) from None
        except StoreError as exc:
            bad = _source_problem(key, exc)
            if bad is None or bad.kind == "failed":
                raise
            raise bad from None
        if got.crc32c is not None:
            vouches = bool(getattr(dst, "COPY_VOUCHES", False))
            return int.from_bytes(base64.b64decode(got.crc32c), "big"), vouches, got.version
        if n == 0:
            return 0, False, got.version
        self._count(bytes_read=n)
        return crc32c(self._read_segment(src, seg)), False, got.version
