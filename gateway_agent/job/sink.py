"""The sink role of a gateway job: check each arriving chunk's CRC32C, write its pieces to the
destination store (one store call for a batch of small objects where the store can) and tell
which writes vouch for the source's checksum. A module of its own so the write path can be
followed without the rest of ``Job``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import nullcontext
from functools import partial
from typing import Any, cast

from gateway_agent import wire
from gateway_agent.job.base import InChunk, JobBase, ObjectFailed, _local_calls
from gateway_agent.stores.base import (
    ObjectStore,
    SupportsMetadata,
    SupportsWriteBatch,
    landed_version,
)
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.crc32c_math import crc32c_b64
from gateway_agent.stores.errors import KeyBlockedError, KeyNotSupportedError
from gateway_agent.stores.objmeta import policy

# A destination problem of one object's name (the store cannot hold it, or something of
# another kind holds its place): that object fails, the chunk's others go again.
_NAME_PROBLEMS = (KeyNotSupportedError, KeyBlockedError)

# Stores that accept any buffer and are done with it when the call returns; SDK-backed stores
# get ``bytes`` (they may retry, hash or hold on to the body).
ZERO_COPY_SCHEMES = frozenset({"file", "null"})


def _pieces_match(
    pieces: Sequence[tuple[dict[str, Any], memoryview]], crcs: Sequence[int], whole: int
) -> list[bool]:
    """Per piece: do the bytes about to be written have the CRC32C the source sent for that
    segment (the one verification expects)? One piece is the chunk, whose CRC32C was checked;
    a batch's pieces are checked one by one (a second pass over small objects only)."""
    if len(crcs) != len(pieces):
        return [False] * len(pieces)
    if len(pieces) == 1:
        return [crcs[0] == whole]
    return [crc32c(piece) == crc for (_seg, piece), crc in zip(pieces, crcs, strict=True)]


def _serial_batches(store: ObjectStore) -> bool:
    """Whether batches are written to ``store`` by one writer at a time: its calls are local
    system calls of microseconds that do not wait for a disk (``LOCAL_BATCH_WRITERS``)."""
    return _local_calls(store) and not getattr(store, "fsync", False)


class SinkRole(JobBase):
    """The sink part of ``Job``: writer threads run ``_sink_loop``."""

    def _sink_loop(self) -> None:
        while not self._stop.is_set():
            chunk = self._sink_q.get()
            if chunk is None:
                return
            try:
                self._write_chunk(chunk)
            except ObjectFailed as bad:
                self._object_failed(chunk.meta["chunk"], bad)
            except Exception as exc:
                self._fail(
                    f"destination {self._dst_uri}: writing chunk {chunk.meta['chunk']} failed: "
                    f"{exc!r}"
                )
            finally:
                chunk.lease.release()
                del chunk  # its payload is not pinned while this writer waits for the next

    def _write_chunk(self, chunk: InChunk) -> None:
        t0 = time.monotonic()
        if not self._authentic(chunk):
            self._count(chunks_bad=1)
            self._event(
                t="bad",
                chunk=chunk.meta["chunk"],
                path=chunk.meta.get("path"),
                why="the chunk's tag does not match: changed on the way (refused, not written)",
            )
            return
        got = chunk.received_crc if chunk.received_crc is not None else crc32c(chunk.payload)
        if got != chunk.crc32c:
            self._count(chunks_bad=1)
            self._event(
                t="bad", chunk=chunk.meta["chunk"], path=chunk.meta.get("path"),
                why="crc32c mismatch",
            )  # fmt: skip
            return
        store = self._store("dst")
        view = memoryview(chunk.payload).cast("B")
        zero_copy = str(self._dst_uri).split(":", 1)[0] in ZERO_COPY_SCHEMES
        pieces: list[tuple[dict[str, Any], memoryview]] = []
        pos = 0
        for seg in chunk.meta["segs"]:
            n = int(seg["length"])
            pieces.append((self._seg_here(seg), view[pos : pos + n]))
            pos += n

        crcs: list[int] = chunk.meta.get("crcs", [])
        vouched: list[int] = []
        versions: list[str | None] = []  # per piece: the version its write's answer named
        if self._meta_set:
            pieces = [(self._meta_of(seg), piece) for seg, piece in pieces]
        batch = isinstance(store, SupportsWriteBatch) and zero_copy and len(pieces) > 1
        if batch and not any(seg.get("upload_id") for seg, _ in pieces):
            with self._local_batch_writers if _serial_batches(store) else nullcontext():
                self._write_batch(cast(SupportsWriteBatch, store), pieces)
            acked = [True] * len(pieces)  # every piece landed (else it raised)
        else:
            answers = self._each(
                partial(self._write_one, store, zero_copy, crcs),
                list(enumerate(pieces)),
                _local_calls(store),
            )
            acked = [ok for ok, _version in answers]
            versions = [version for _ok, version in answers]
        if store.capabilities.checked_writes:  # the write vouches for the bytes given
            acked = [a and b for a, b in zip(acked, _pieces_match(pieces, crcs, got), strict=True)]
        vouched = [i for i, ok in enumerate(acked) if ok]
        if not self._slow_store_hook(len(view), t0):
            return
        self._count(chunks_written=1, bytes_written=len(view))
        here: dict[str, Any] = (
            {"dst": self.region} if str(chunk.meta.get("path")) in self.trees else {}
        )
        if any(versions):  # the transfer report's destination versions (none for a folder)
            here["versions"] = versions
        self._event(t="done", chunk=chunk.meta["chunk"], crcs=crcs, vouched=vouched, **here)

    def _seg_here(self, seg: dict[str, Any]) -> dict[str, Any]:
        """The segment as this sink writes it: a multicast part names the multipart upload of
        each destination region (``upload_ids``), of which this region's is the one."""
        ids = seg.get("upload_ids")
        return seg if not ids else {**seg, "upload_id": ids.get(self.region)}

    def _meta_of(self, seg: dict[str, Any]) -> dict[str, Any]:
        """``seg`` with the metadata to write (``--metadata-set`` over the source's); a part's
        went to its upload."""
        if seg.get("upload_id") or not self._meta_set:
            return seg
        meta = policy(seg.get("meta") or {}, True, self._meta_set)
        return {**seg, "meta": meta} if meta else seg

    def _authentic(self, chunk: InChunk) -> bool:
        """A chunk whose path has a clear hop must carry its source's tag, and every tag a
        chunk carries must match (checked on arrival while hot, else here)."""
        if "tag" not in chunk.meta:
            return str(chunk.meta.get("path")) not in self._tagged_paths
        if chunk.tag_ok is not None:
            return chunk.tag_ok
        return wire.check_tag(self._frame_key, chunk.meta, chunk.payload, chunk.crc32c)

    @staticmethod
    def _write_one(
        store: ObjectStore,
        zero_copy: bool,
        crcs: list[int],
        item: tuple[int, tuple[dict[str, Any], memoryview]],
    ) -> tuple[bool, str | None]:
        """Write piece ``i``; (vouched, the version the write's answer names: None for a part).
        Vouched when the write vouches for the source's CRC32C: S3 echoes the checksum it
        checked the body against and stored; a store with ``checked_writes`` stored exactly
        these bytes, which ``_write_chunk`` checked against it (a part too: the control plane
        vouches for a multipart object only when all its parts were)."""
        i, (seg, piece) = item
        data = cast(bytes, piece) if zero_copy else bytes(piece)
        checked = store.capabilities.checked_writes
        try:
            if seg.get("upload_id"):
                store.upload_part(seg["key"], seg["upload_id"], int(seg["part"]), data)
                return checked, None
            meta = seg.get("meta")
            if meta and isinstance(store, SupportsMetadata):
                info = cast(Any, store).write(seg["key"], data, meta=meta)
            else:
                info = store.write(seg["key"], data)
            if checked:
                return True, landed_version(info)
        except _NAME_PROBLEMS as exc:  # this name only; the chunk's others go again
            raise ObjectFailed("failed", seg["key"], "destination", str(exc)) from None
        native = "crc32c" in store.capabilities.native_checksums
        stored = info.checksums.get("crc32c") if native else None
        ok = i < len(crcs) and stored is not None and stored == crc32c_b64(crcs[i])
        return ok, landed_version(info)

    @staticmethod
    def _write_batch(
        store: SupportsWriteBatch, pieces: list[tuple[dict[str, Any], memoryview]]
    ) -> None:
        """A batch of whole small objects in one store call; the first failure in chunk order
        is raised after the others landed (a name the store cannot hold fails only itself)."""
        items = [(seg["key"], piece) for seg, piece in pieces]
        if any("meta" in seg for seg, _ in pieces) and isinstance(store, SupportsMetadata):
            metas = [seg.get("meta") for seg, _ in pieces]
            errors = cast(Any, store).write_batch(items, metas)
        else:
            errors = store.write_batch(items)
        for (seg, _piece), exc in zip(pieces, errors, strict=True):
            if isinstance(exc, _NAME_PROBLEMS):
                raise ObjectFailed("failed", seg["key"], "destination", str(exc))
            if exc is not None:
                raise exc
