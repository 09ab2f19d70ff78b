"""The source role of a gateway job: read each submitted chunk's segments from the source
store (pinned to the listed version, under the byte budget), checksum them and hand the chunk
to routing. A module of its own so the read path can be followed without the rest of ``Job``.
"""

from __future__ import annotations

import os
import time
from typing import Any, cast

from gateway_agent import wire
from gateway_agent.flow import Lease
from gateway_agent.job.base import InChunk, JobBase, ObjectFailed, _local_calls
from gateway_agent.stores.base import (
    LIST_METADATA_MIN,
    ListsMetadata,
    ObjectStore,
    ReadsWithMetadata,
    SupportsMetadata,
    SupportsReadInto,
)
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import SourceChangedError, StoreError, TransientStoreError
from gateway_agent.stores.objmeta import Meta, travelling


def _source_problem(key: str, exc: StoreError) -> ObjectFailed | None:
    """The per-object verdict on a failed source read, or None when the whole job must stop
    (a transient error whose retries were spent: the store, not the object, is the problem)."""
    if isinstance(exc, SourceChangedError):
        return ObjectFailed("changed", key, "source", str(exc))
    if isinstance(exc, TransientStoreError):
        return None
    return ObjectFailed("failed", key, "source", f"reading the source failed: {exc}")


class SourceRole(JobBase):
    """The source part of ``Job``: reader threads run ``_source_loop``."""

    def _source_loop(self) -> None:
        while not self._stop.is_set():
            desc = self._source_q.get()
            if desc is None:
                return
            self._read_gate_hook()
            try:
                if self._copied(desc):  # the stores copied it (``serverside``)
                    continue
            except ObjectFailed as bad:
                self._object_failed(desc["chunk"], bad)
                continue
            except Exception as exc:
                self._fail(f"copying chunk {desc['chunk']} to {self._dst_uri} failed: {exc}")
                continue
            segs: list[dict[str, Any]] = desc["segs"]
            total = sum(int(s["length"]) for s in segs)
            lease = None
            while lease is None:
                lease = self._budget.lease(total, timeout=0.5, cancel=self._stop)
                if self._stop.is_set():
                    if lease is not None:
                        lease.release()
                    return
            t0 = time.monotonic()
            try:
                chunk = self._read_chunk(desc, total, lease)
            except ObjectFailed as bad:
                lease.release()
                self._object_failed(desc["chunk"], bad)
                continue
            except Exception as exc:  # any store error is reported with its text
                lease.release()
                self._fail(f"source {self._src_uri}: reading chunk {desc['chunk']} failed: {exc}")
                continue
            if chunk is None or not self._slow_store_hook(total, t0, "source_rate_bps"):
                lease.release()
                continue
            self.route(chunk)
            # Once routed, the chunk belongs to the pool (and its lease): holding it here while
            # waiting for the next descriptor would keep its payload alive past the budget.
            del chunk

    def _copied(self, desc: dict[str, Any]) -> bool:
        """Whether the stores copied this chunk themselves (``serverside.ServerSideRole``)."""
        return False

    def _read_gate_hook(self) -> None:
        """Test hook ``read_gate`` ``{"after": N, "file": PATH}``: once N chunk reads have
        started, later ones wait until PATH exists (``PATH.paused`` tells they wait), so a test
        changes the source at a known point of a real copy, without sleeps."""
        gate = self._hooks.get("read_gate") if self._hooks else None
        if not gate:
            return
        with self._lock:
            self._hooks["reads_started"] = started = int(self._hooks.get("reads_started", 0)) + 1
        if started <= int(gate["after"]):
            return
        with open(f"{gate['file']}.paused", "a"):
            pass
        while not os.path.exists(gate["file"]) and not self._stop.wait(0.02):
            pass

    @staticmethod
    def _read_segment(
        store: ObjectStore,
        seg: dict[str, Any],
        with_meta: bool = False,
        metas: dict[int, Meta] | None = None,
        index: int = 0,
    ) -> bytes:
        """One segment, pinned to the version the listing saw (when the manifest carries one):
        a torn or changed object raises instead of being read. With ``with_meta`` (a
        ``ReadsWithMetadata`` store) a whole object's metadata comes with its bytes, into
        ``metas[index]``."""
        key, offset, length = seg["key"], int(seg.get("offset", 0)), int(seg["length"])
        try:
            if with_meta and metas is not None and SourceRole._whole(seg):
                data, metas[index] = cast(ReadsWithMetadata, store).read_meta(
                    key, offset, length, seg.get("version")
                )
            elif seg.get("version") is not None:
                data = store.read(key, offset, length, seg["version"])
            else:
                data = store.read(key, offset, length)
        except StoreError as exc:
            bad = _source_problem(key, exc)
            if bad is None:
                raise
            raise bad from None
        if len(data) != length:
            raise ObjectFailed("changed", key, "source", "the object is shorter than listed")
        return data

    @staticmethod
    def _read_segment_into(
        store: SupportsReadInto, seg: dict[str, Any], view: memoryview
    ) -> memoryview:
        """``_read_segment`` into ``view`` (exactly the segment's length)."""
        key = seg["key"]
        try:
            n = store.read_into(key, int(seg.get("offset", 0)), view, seg.get("version"))
        except StoreError as exc:
            bad = _source_problem(key, exc)
            if bad is None:
                raise
            raise bad from None
        if n != int(seg["length"]):
            raise ObjectFailed("changed", key, "source", "the object is shorter than listed")
        return view

    @staticmethod
    def _whole(seg: dict[str, Any]) -> bool:
        """A whole object's segment (its metadata travels with it); a part's metadata went to
        its upload when the control plane created it."""
        return "part" not in seg and not seg.get("upload_id") and not seg.get("upload_ids")

    def _with_metadata(
        self,
        store: SupportsMetadata,
        segs: list[dict[str, Any]],
        read: dict[int, Meta] | None = None,
    ) -> list[dict[str, Any]]:
        """``segs`` with each whole object's metadata (``meta``, left out when it has none):
        ``read`` holds what came with the bytes (``ReadsWithMetadata``), else one listing for
        a chunk of many objects (``ListsMetadata``), else ``head_meta`` after the bytes;
        always of the version that was read."""
        read = read or {}
        listed: dict[str, Any] = {}
        wanted = [
            (seg["key"], seg.get("version"))
            for i, seg in enumerate(segs)
            if i not in read and self._whole(seg)
        ]
        if len(wanted) >= LIST_METADATA_MIN and isinstance(store, ListsMetadata):
            try:
                listed = store.metas_of(wanted)
            except TransientStoreError:
                raise
            except StoreError:
                listed = {}  # each object asks on its own below, and fails alone

        def one(i: int) -> dict[str, Any]:
            seg = segs[i]
            if not self._whole(seg):
                return seg
            try:
                if i in read:
                    found: Any = read[i]
                else:
                    found = listed.get(seg["key"])
                    if found is None:
                        found = store.head_meta(seg["key"], seg.get("version"))
                if isinstance(found, StoreError):
                    raise found
            except StoreError as exc:
                bad = _source_problem(seg["key"], exc)
                if bad is None:
                    raise
                raise bad from None
            meta = travelling(found)
            return {**seg, "meta": meta} if meta else seg

        return self._each(one, range(len(segs)), _local_calls(cast(ObjectStore, store)))

    def _read_chunk(self, desc: dict[str, Any], total: int, lease: Lease) -> InChunk | None:
        store = self._store("src")
        segs: list[dict[str, Any]] = desc["segs"]
        crcs: list[int] = []
        # Whole objects' metadata from the GET that reads their bytes, where the store can.
        with_meta = self._meta_keep and isinstance(store, ReadsWithMetadata)
        read_meta: dict[int, Meta] = {}
        # A chunk whose path has a clear hop is tagged end to end (see ``wire.FrameTagger``).
        tagger = (
            wire.FrameTagger(self._frame_key) if str(desc["path"]) in self._tagged_paths else None
        )
        if len(segs) == 1 and isinstance(store, SupportsReadInto):
            # A big file's range: into a pooled buffer (no fresh pages per chunk).
            lease.buffer = self._budget.take_buffer(total)
            data: bytes | bytearray | memoryview = self._read_segment_into(
                store, segs[0], memoryview(lease.buffer)[:total]
            )
            crcs.append(wire.crc_and_tag(data, tagger))
            full = crcs[0]
        elif len(segs) == 1:
            data = self._read_segment(store, segs[0], with_meta, read_meta, 0)
            crcs.append(wire.crc_and_tag(data, tagger))
            full = crcs[0]
        else:
            lease.buffer = self._budget.take_buffer(total)
            view = memoryview(lease.buffer)[:total]
            starts = [0]
            for s in segs[:-1]:
                starts.append(starts[-1] + int(s["length"]))

            into = store if isinstance(store, SupportsReadInto) else None

            def read_one(i: int) -> int:
                # A segment read is exactly its listed length (or ObjectFailed), so each lands
                # in its own slice of the buffer (read straight into it where the store can).
                if into is not None:
                    n = int(segs[i]["length"])
                    return crc32c(
                        self._read_segment_into(into, segs[i], view[starts[i] : starts[i] + n])
                    )
                part = self._read_segment(store, segs[i], with_meta, read_meta, i)
                piece = view[starts[i] : starts[i] + len(part)]
                piece[:] = part
                return crc32c(piece)

            if _local_calls(store):
                with self._local_batch_readers:
                    crcs = self._each(read_one, range(len(segs)), True)
            else:
                crcs = self._each(read_one, range(len(segs)))
            data = view
            full = wire.crc_and_tag(view, tagger)
        if self._meta_keep and isinstance(store, SupportsMetadata):
            segs = self._with_metadata(store, segs, read_meta)
        self._count(chunks_read=1, bytes_read=total)
        meta: dict[str, Any] = {
            "job": self.job_id,
            "chunk": desc["chunk"],
            "path": str(desc["path"]),
            "segs": segs,
            "crcs": crcs,
        }
        if tagger is not None:
            meta["tag"] = tagger.seal(meta, total, full)
        payload = data if isinstance(data, memoryview) else memoryview(data)
        return InChunk(meta, payload, full, lease)
