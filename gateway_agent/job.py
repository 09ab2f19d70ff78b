"""One transfer job on one gateway: source, relay and sink roles, chosen per chunk by its path.

The job spec (from the control plane) names every path as a list of regions and every gateway
of those regions. For a chunk on path P this gateway finds its own region in P: the last region
means sink (verify CRC32C, write), anything else means forward to the next region's pool; chunk
descriptors submitted through the control API make it a source for them. Progress is exposed as
monotonic counters plus an event log read incrementally with a cursor.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

from gateway_agent import auth, wire
from gateway_agent.checksum import crc32c
from gateway_agent.flow import ByteBudget, Lease
from gateway_agent.pool import OutboundPool, OutChunk, Peer, PoolCallbacks
from gateway_agent.stores.base import ObjectStore, SupportsReadInto, SupportsWriteBatch
from gateway_agent.stores.errors import (
    KeyNotSupportedError,
    SourceChangedError,
    StoreError,
    TransientStoreError,
)
from gateway_agent.synthetic import open_any_store

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# Stores that accept any buffer and are done with it when the call returns; SDK-backed stores
# get ``bytes`` (they may retry, hash or hold on to the body).
ZERO_COPY_SCHEMES = frozenset({"file", "null"})

# How long stopping a job waits for its readers and writers to finish their current call.
STOP_GRACE_S = 5.0
# Readers of batched small objects from a store of local calls at once: their reads are
# system calls of microseconds, run inline, so more threads at it only contend for the
# interpreter (8 of them cost the source ~5 % of its CPU at 100k small files). Big ranges are
# read by every reader thread at once, as before.
LOCAL_BATCH_READERS = 2
# Writers of batched small objects to a store of local calls at once, for the same reason: at
# 100k files of 1 KiB, eight writers handing the interpreter to each other at every open, write
# and link cost the sink 0.35 of its 2.7 CPU-seconds. Big ranges, and batches to a store that
# flushes every write to disk (``fsync``: its calls wait for the disk, and overlap), are
# written by every writer thread at once.
LOCAL_BATCH_WRITERS = 1

COUNTERS = (
    "chunks_read",
    "bytes_read",
    "chunks_received",
    "bytes_received",
    "chunks_sent",
    "bytes_sent",
    "wire_bytes_sent",
    "chunks_written",
    "bytes_written",
    "chunks_bad",
    "chunks_lost",
)


@dataclass
class InChunk:
    """A chunk held by this gateway (read from the store or received from upstream)."""

    meta: dict[str, Any]
    payload: memoryview | bytes
    crc32c: int
    lease: Lease
    # CRC32C of the payload as received here (computed on arrival), if already known.
    received_crc: int | None = None


class JobError(Exception):
    """A job spec this gateway cannot run."""


class ObjectFailed(Exception):
    """One object of a chunk cannot be copied (its source is unreadable or changed, or the
    destination cannot hold its name); the rest of the chunk can. ``kind`` is the event sent to
    the control plane: ``changed`` or ``failed``; ``side`` is ``source`` or ``destination``."""

    def __init__(self, kind: str, key: str, side: str, why: str) -> None:
        super().__init__(why)
        self.kind, self.key, self.side, self.why = kind, key, side, why


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


def crc32c_b64(crc: int) -> str:
    """A CRC32C as S3 and GCS report it: 4 big-endian bytes, base64."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


def _source_problem(key: str, exc: StoreError) -> ObjectFailed | None:
    """The per-object verdict on a failed source read, or None when the whole job must stop
    (a transient error whose retries were spent: the store, not the object, is the problem)."""
    if isinstance(exc, SourceChangedError):
        return ObjectFailed("changed", key, "source", str(exc))
    if isinstance(exc, TransientStoreError):
        return None
    return ObjectFailed("failed", key, "source", f"reading the source failed: {exc}")


def _local_calls(store: ObjectStore) -> bool:
    """Whether the store's calls are local system calls (see ``Capabilities.local_calls``)."""
    return bool(getattr(store.capabilities, "local_calls", False))


def _serial_batches(store: ObjectStore) -> bool:
    """Whether batches are written to ``store`` by one writer at a time: its calls are local
    system calls of microseconds that do not wait for a disk (``LOCAL_BATCH_WRITERS``)."""
    return _local_calls(store) and not getattr(store, "fsync", False)


class Job:
    """Runs one job's roles on this gateway until stopped."""

    def __init__(
        self,
        spec: dict[str, Any],
        *,
        gateway_id: str,
        region: str,
        secret: bytes,
        budget: ByteBudget,
        test_hooks: bool = False,
    ) -> None:
        self.job_id: str = spec["job_id"]
        self.spec = spec
        self.gateway_id = gateway_id
        self.region = region
        self._secret = secret
        self._budget = budget
        self._hooks: dict[str, Any] = dict(spec.get("test_hooks") or {}) if test_hooks else {}
        self.routes: dict[str, list[str]] = {str(k): list(v) for k, v in spec["routes"].items()}
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.events: list[dict[str, Any]] = []
        self.error: str | None = None
        self.started = time.time()
        self._lock = threading.Lock()
        # Signalled on every new event and on stop: a status call may wait for news (long poll).
        self._news = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._source_q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._sink_q: queue.Queue[InChunk | None] = queue.Queue()
        self._pools: dict[str, OutboundPool] = {}
        self._dropped: set[str] = set()  # paths the control plane declared dead
        self._threads: list[threading.Thread] = []
        options: dict[str, Any] = {}
        if spec.get("sealed_options"):
            options = json.loads(auth.unseal(secret, spec["sealed_options"]))
        self._src_uri: str | None = spec.get("src_uri")
        self._dst_uri: str | None = spec.get("dst_uri")
        self._src_options: dict[str, Any] = options.get("src", {})
        self._dst_options: dict[str, Any] = options.get("dst", {})
        self._src: ObjectStore | None = None
        self._dst: ObjectStore | None = None
        self._store_lock = threading.Lock()
        # The objects of a batched chunk are read and written in parallel: against a store with
        # tens of ms per request, one thread per chunk would cap a gateway at a few hundred
        # small objects per second.
        self._object_threads = max(1, int(spec.get("object_threads", 64)))
        self._objects_pool: ThreadPoolExecutor | None = None
        self._local_batch_readers = threading.BoundedSemaphore(LOCAL_BATCH_READERS)
        self._local_batch_writers = threading.BoundedSemaphore(LOCAL_BATCH_WRITERS)
        if not any(region in r for r in self.routes.values()):
            raise JobError(f"gateway region {region!r} is on no path of job {self.job_id}")
        self._build_pools()

    # ---- setup ---------------------------------------------------------------------------------

    def _build_pools(self) -> None:
        gateways: dict[str, list[dict[str, Any]]] = self.spec["gateways"]
        hops: dict[str, dict[str, Any]] = self.spec.get("hops", {})
        next_regions: set[str] = set()
        for route in self.routes.values():
            if self.region in route:
                i = route.index(self.region)
                if i + 1 < len(route):
                    next_regions.add(route[i + 1])
        for nxt in sorted(next_regions):
            callbacks = PoolCallbacks(
                sent=self._on_sent,
                lost=self._on_lost,
                fatal=partial(self._hop_failed, nxt),
                stopped=self._stop.is_set,
            )
            peers = [Peer(g["id"], g["host"], int(g["data_port"])) for g in gateways.get(nxt, [])]
            if not peers:
                raise JobError(f"job {self.job_id} has no gateway in next-hop region {nxt!r}")
            hop = hops.get(f"{self.region}>{nxt}", {})
            self._pools[nxt] = OutboundPool(
                nxt,
                peers,
                int(hop.get("connections", 8)),
                self._secret,
                callbacks,
                encrypt=bool(hop.get("encrypt", False)),
                compress_level=int(hop.get("compress_level", 0)),
            )

    def start(self) -> None:
        for pool in self._pools.values():
            pool.start()
        is_source = any(r[0] == self.region for r in self.routes.values())
        is_sink = any(r[-1] == self.region for r in self.routes.values())
        if is_source:
            for i in range(int(self.spec.get("reader_threads", 8))):
                self._spawn(self._source_loop, f"read-{i}")
        if is_sink:
            for i in range(int(self.spec.get("writer_threads", 8))):
                self._spawn(self._sink_loop, f"write-{i}")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=f"{self.job_id}-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _store(self, which: str) -> ObjectStore:
        with self._store_lock:
            if which == "src":
                if self._src is None:
                    if not self._src_uri:
                        raise JobError("job has no source URI")
                    self._src = open_any_store(self._src_uri, self._src_options)
                return self._src
            if self._dst is None:
                if not self._dst_uri:
                    raise JobError("job has no destination URI")
                self._dst = open_any_store(self._dst_uri, self._dst_options)
            return self._dst

    def _each(self, fn: Callable[[T], R], items: Sequence[T], inline: bool = False) -> list[R]:
        """``[fn(x) for x in items]``, in parallel for several items unless ``inline`` (a store
        of local calls, where a thread hop per object costs more than the object). Every call
        finishes before this returns (nothing runs on after an error); then the first error in
        item order is raised, so one bad object fails only itself and the caller reports it."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        if inline or self._object_threads <= 1:
            results: list[R] = []
            first: BaseException | None = None
            for x in items:
                try:
                    results.append(fn(x))
                except Exception as exc:
                    first = first or exc
            if first is not None:
                raise first
            return results
        with self._store_lock:
            if self._objects_pool is None:
                self._objects_pool = ThreadPoolExecutor(
                    self._object_threads, thread_name_prefix=f"{self.job_id}-obj"
                )
            pool = self._objects_pool
        futures: list[Future[R]] = [pool.submit(fn, x) for x in items]
        errors = [f.exception() for f in futures]
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            raise error
        return [f.result() for f in futures]

    # ---- bookkeeping ---------------------------------------------------------------------------

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                self.counters[k] += v

    def _event(self, **event: Any) -> None:
        with self._lock:
            self.events.append(event)
            self._news.notify_all()

    def _hop_failed(self, nxt: str, message: str) -> None:
        self._fail(message, hop=[self.region, nxt])

    def _fail(self, message: str, hop: list[str] | None = None) -> None:
        """Report a job error; ``hop`` names a next hop that failed (the control plane may
        route around it), otherwise the error is this gateway's own."""
        log.error("job %s: %s", self.job_id, message)
        with self._lock:
            if hop is not None:
                self.events.append(
                    {"t": "error", "why": message, "gateway": self.gateway_id, "hop": hop}
                )
            elif self.error is None:
                self.error = message
                self.events.append({"t": "error", "why": message, "gateway": self.gateway_id})
            self._news.notify_all()

    def _on_sent(self, item: OutChunk, wire_bytes: int) -> None:
        self._count(chunks_sent=1, bytes_sent=len(item.payload), wire_bytes_sent=wire_bytes)

    def _on_lost(self, item: OutChunk, why: str) -> None:
        self._count(chunks_lost=1)
        self._event(t="lost", chunk=item.meta["chunk"], path=item.meta.get("path"), why=why)

    def status(self, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        """Counters plus the events after ``cursor`` (incremental, never the full history).

        ``wait`` > 0: a long poll; with no event after ``cursor`` yet, answer as soon as one
        comes (or the job stops), after ``wait`` seconds at most. The control plane then
        learns of a finished chunk at once instead of at its next poll."""
        with self._lock:
            if wait > 0:
                self._news.wait_for(
                    lambda: len(self.events) > cursor or self._stop.is_set(), timeout=wait
                )
            events = self.events[cursor:]
            return {
                "job_id": self.job_id,
                "gateway_id": self.gateway_id,
                "region": self.region,
                "counters": dict(self.counters),
                "events": events,
                "cursor": cursor + len(events),
                "error": self.error,
                "stopped": self._stop.is_set(),
                "queued": {r: p.queue.qsize() for r, p in self._pools.items()},
                # Chunk descriptors submitted here and not yet picked up by a reader.
                "backlog": self._source_q.qsize(),
            }

    def stop(self) -> None:
        """Stop every role; chunks still held are dropped and their budget released."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:
            self._news.notify_all()  # long polls answer now
        self._budget.wake()  # sources waiting for a lease give up at once
        for pool in self._pools.values():
            pool.close()
        for _ in self._threads:
            self._source_q.put(None)
            self._sink_q.put(None)
        # Readers and writers finish the store call they are in (a part is written whole or
        # not at all); the wait is bounded overall, not per thread.
        deadline = time.monotonic() + STOP_GRACE_S
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        for pool in self._pools.values():
            pool.drain()
        if self._objects_pool is not None:
            self._objects_pool.shutdown(wait=False, cancel_futures=True)
        while True:
            try:
                item = self._sink_q.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.lease.release()

    # ---- routing -------------------------------------------------------------------------------

    def submit(self, descriptors: list[dict[str, Any]]) -> int:
        """Queue chunk descriptors for this gateway to read and send (source role)."""
        for d in descriptors:
            route = self.routes.get(str(d["path"]))
            if route is None or route[0] != self.region:
                raise JobError(f"chunk {d.get('chunk')} is not sourced in {self.region}")
            self._source_q.put(d)
        return len(descriptors)

    def route(self, chunk: InChunk) -> None:
        """Hand a chunk on: to the sink writers if this is its last region, else downstream."""
        if self._stop.is_set():
            chunk.lease.release()
            return
        route = self.routes.get(str(chunk.meta["path"]))
        if route is None or self.region not in route:
            chunk.lease.release()
            self._fail(f"chunk {chunk.meta.get('chunk')} arrived on a path not through here")
            return
        i = route.index(self.region)
        if i == len(route) - 1:
            self._sink_q.put(chunk)
            return
        if str(chunk.meta["path"]) in self._dropped:
            chunk.lease.release()
            self._event(t="lost", chunk=chunk.meta.get("chunk"), path=chunk.meta["path"],
                        why="its path was declared dead")  # fmt: skip
            return
        chunk = self._apply_relay_hooks(chunk, first=i == 0)
        self._pools[route[i + 1]].put(
            OutChunk(chunk.meta, chunk.payload, chunk.crc32c, chunk.lease)
        )

    def drop_path(self, path: str) -> dict[str, Any]:
        """The control plane declared ``path`` dead (it re-sends its chunks on other paths):
        release what waits to go along it, and abort a next hop no live path still uses."""
        with self._lock:
            self._dropped.add(str(path))
            dropped = set(self._dropped)
        for nxt, pool in self._pools.items():
            users = {
                p
                for p, r in self.routes.items()
                if self.region in r and r[r.index(self.region) + 1 :][:1] == [nxt]
            }
            if users <= dropped:
                pool.abort()
            else:
                pool.drop(lambda meta: str(meta.get("path")) in dropped)
        return {"dropped": sorted(dropped)}

    def on_frame(
        self,
        meta: dict[str, Any],
        payload: memoryview,
        crc: int,
        lease: Lease,
        received_crc: int | None = None,
    ) -> None:
        """A frame arrived from upstream for this job."""
        self._count(chunks_received=1, bytes_received=len(payload))
        self.route(InChunk(meta, payload, crc, lease, received_crc))

    def _next_pool(self, meta: dict[str, Any]) -> OutboundPool | None:
        route = self.routes.get(str(meta.get("path")))
        if route is None or self.region not in route:
            return None
        i = route.index(self.region)
        return self._pools.get(route[i + 1]) if i + 1 < len(route) else None

    def can_splice(self, meta: dict[str, Any]) -> bool:
        """A relayed chunk can go straight through when the next hop sends frames unchanged."""
        if self._stop.is_set() or self._hooks:
            return False
        pool = self._next_pool(meta)
        return pool is not None and pool.plain

    def splice_forward(
        self,
        meta: dict[str, Any],
        meta_b: bytes,
        header: tuple[int, int, int, int, int, int, int],
        upstream: socket.socket,
        pipe: tuple[int, int],
    ) -> None:
        """Relay one frame kernel-side; waits for a free downstream connection (back-pressure).

        Raises ``wire.UpstreamError`` when the upstream connection broke mid-frame.
        """
        payload_len = header[2]
        pool = self._next_pool(meta)
        conn = pool.borrow() if pool is not None else None
        if pool is None or conn is None or conn.sock is None:
            wire.discard(upstream, payload_len)
            self._count(chunks_lost=1)
            self._event(
                t="lost",
                chunk=meta.get("chunk"),
                path=meta.get("path"),
                why="no downstream connection",
            )
            return
        try:
            n = wire.splice_frame(upstream, conn.sock, pipe, header, meta_b)
        except wire.DownstreamError as exc:
            pool.give_back(conn, broken=True)
            self._count(chunks_received=1, bytes_received=payload_len, chunks_lost=1)
            self._event(
                t="lost", chunk=meta.get("chunk"), path=meta.get("path"), why=f"send failed: {exc}"
            )
            return
        except wire.UpstreamError:
            pool.give_back(conn, broken=True)  # the peer saw half a frame: start afresh
            raise
        pool.give_back(conn)
        self._count(
            chunks_received=1,
            bytes_received=payload_len,
            chunks_sent=1,
            bytes_sent=payload_len,
            wire_bytes_sent=n,
        )

    def is_sink_for(self, meta: dict[str, Any]) -> bool:
        """Whether a chunk with this metadata ends its path at this gateway."""
        route = self.routes.get(str(meta.get("path")))
        return route is not None and route[-1] == self.region

    def _apply_relay_hooks(self, chunk: InChunk, first: bool) -> InChunk:
        """Test hooks (only with --enable-test-hooks): corrupt or delay forwarded chunks."""
        if not self._hooks or first:
            return chunk
        delay = float(self._hooks.get("relay_delay_s", 0))
        if delay:
            time.sleep(delay)
        with self._lock:
            corrupt = int(self._hooks.get("corrupt_chunks", 0))
            if corrupt > 0:
                self._hooks["corrupt_chunks"] = corrupt - 1
        if corrupt > 0 and len(chunk.payload):
            buf = bytearray(chunk.payload)
            buf[len(buf) // 2] ^= 0xFF
            self._event(t="hook", what="corrupted", chunk=chunk.meta["chunk"])
            return InChunk(chunk.meta, memoryview(buf), chunk.crc32c, chunk.lease, None)
        return chunk

    # ---- source role ---------------------------------------------------------------------------

    def _source_loop(self) -> None:
        while not self._stop.is_set():
            desc = self._source_q.get()
            if desc is None:
                return
            self._read_gate_hook()
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

    def _object_failed(self, chunk: int, bad: ObjectFailed) -> None:
        """Report one object of ``chunk`` as changed or failed; the control plane re-sends the
        chunk's other objects and reports this one (never a job-wide error)."""
        log.warning("job %s: %s %s: %s", self.job_id, bad.kind, bad.key, bad.why)
        self._event(t=bad.kind, chunk=chunk, key=bad.key, side=bad.side, why=bad.why)

    @staticmethod
    def _read_segment(store: ObjectStore, seg: dict[str, Any]) -> bytes:
        """One segment, pinned to the version the listing saw (when the manifest carries one):
        a torn or changed object raises instead of being read."""
        key, offset, length = seg["key"], int(seg.get("offset", 0)), int(seg["length"])
        try:
            if seg.get("version") is not None:
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

    def _read_chunk(self, desc: dict[str, Any], total: int, lease: Lease) -> InChunk | None:
        store = self._store("src")
        segs: list[dict[str, Any]] = desc["segs"]
        crcs: list[int] = []
        if len(segs) == 1 and isinstance(store, SupportsReadInto):
            # A big file's range: into a pooled buffer (no fresh pages per chunk).
            lease.buffer = self._budget.take_buffer(total)
            data: bytes | bytearray | memoryview = self._read_segment_into(
                store, segs[0], memoryview(lease.buffer)[:total]
            )
            crcs.append(crc32c(data))
            full = crcs[0]
        elif len(segs) == 1:
            data = self._read_segment(store, segs[0])
            crcs.append(crc32c(data))
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
                part = self._read_segment(store, segs[i])
                piece = view[starts[i] : starts[i] + len(part)]
                piece[:] = part
                return crc32c(piece)

            if _local_calls(store):
                with self._local_batch_readers:
                    crcs = self._each(read_one, range(len(segs)), True)
            else:
                crcs = self._each(read_one, range(len(segs)))
            data = view
            full = crc32c(view)
        self._count(chunks_read=1, bytes_read=total)
        meta = {
            "job": self.job_id,
            "chunk": desc["chunk"],
            "path": str(desc["path"]),
            "segs": segs,
            "crcs": crcs,
        }
        payload = data if isinstance(data, memoryview) else memoryview(data)
        return InChunk(meta, payload, full, lease)

    # ---- sink role -----------------------------------------------------------------------------

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

    def _slow_store_hook(self, nbytes: int, t0: float, hook: str = "sink_rate_bps") -> bool:
        """Test hooks ``sink_rate_bps`` / ``source_rate_bps``: a store that writes / reads at
        that rate per thread; False if the job stopped meanwhile."""
        rate = float(self._hooks.get(hook, 0)) if self._hooks else 0.0
        if rate:
            self._stop.wait(max(0.0, nbytes / rate - (time.monotonic() - t0)))
        return not self._stop.is_set()

    def _write_chunk(self, chunk: InChunk) -> None:
        t0 = time.monotonic()
        got = chunk.received_crc if chunk.received_crc is not None else crc32c(chunk.payload)
        if got != chunk.crc32c:
            self._count(chunks_bad=1)
            self._event(t="bad", chunk=chunk.meta["chunk"], why="crc32c mismatch")
            return
        store = self._store("dst")
        view = memoryview(chunk.payload).cast("B")
        zero_copy = str(self._dst_uri).split(":", 1)[0] in ZERO_COPY_SCHEMES
        pieces: list[tuple[dict[str, Any], memoryview]] = []
        pos = 0
        for seg in chunk.meta["segs"]:
            n = int(seg["length"])
            pieces.append((seg, view[pos : pos + n]))
            pos += n

        crcs: list[int] = chunk.meta.get("crcs", [])
        vouched: list[int] = []
        batch = isinstance(store, SupportsWriteBatch) and zero_copy and len(pieces) > 1
        if batch and not any(seg.get("upload_id") for seg, _ in pieces):
            with self._local_batch_writers if _serial_batches(store) else nullcontext():
                self._write_batch(cast(SupportsWriteBatch, store), pieces)
            acked = [True] * len(pieces)  # every piece landed (else it raised)
        else:
            acked = self._each(
                partial(self._write_one, store, zero_copy, crcs),
                list(enumerate(pieces)),
                _local_calls(store),
            )
        if store.capabilities.checked_writes:  # the write vouches for the bytes given
            acked = [a and b for a, b in zip(acked, _pieces_match(pieces, crcs, got), strict=True)]
        vouched = [i for i, ok in enumerate(acked) if ok]
        if not self._slow_store_hook(len(view), t0):
            return
        self._count(chunks_written=1, bytes_written=len(view))
        self._event(t="done", chunk=chunk.meta["chunk"], crcs=crcs, vouched=vouched)

    @staticmethod
    def _write_one(
        store: ObjectStore,
        zero_copy: bool,
        crcs: list[int],
        item: tuple[int, tuple[dict[str, Any], memoryview]],
    ) -> bool:
        """Write piece ``i``; True when the write vouches for the source's CRC32C: S3 echoes
        the checksum it checked the body against and stored; a store with ``checked_writes``
        stored exactly these bytes, which ``_write_chunk`` checked against it (a part too:
        the control plane vouches for a multipart object only when all its parts were)."""
        i, (seg, piece) = item
        data = cast(bytes, piece) if zero_copy else bytes(piece)
        checked = store.capabilities.checked_writes
        try:
            if seg.get("upload_id"):
                store.upload_part(seg["key"], seg["upload_id"], int(seg["part"]), data)
                return checked
            info = store.write(seg["key"], data)
            if checked:
                return True
        except KeyNotSupportedError as exc:  # this name only; the chunk's others go again
            raise ObjectFailed("failed", seg["key"], "destination", str(exc)) from None
        native = "crc32c" in store.capabilities.native_checksums
        stored = info.checksums.get("crc32c") if native else None
        return i < len(crcs) and stored is not None and stored == crc32c_b64(crcs[i])

    @staticmethod
    def _write_batch(
        store: SupportsWriteBatch, pieces: list[tuple[dict[str, Any], memoryview]]
    ) -> None:
        """A batch of whole small objects in one store call; the first failure in chunk order
        is raised after the others landed (a name the store cannot hold fails only itself)."""
        errors = store.write_batch([(seg["key"], piece) for seg, piece in pieces])
        for (seg, _piece), exc in zip(pieces, errors, strict=True):
            if isinstance(exc, KeyNotSupportedError):
                raise ObjectFailed("failed", seg["key"], "destination", str(exc))
            if exc is not None:
                raise exc
