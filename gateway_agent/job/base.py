"""What every role of a gateway job shares: the job's state from its spec, the pools to the
next hops, the stores, the counters and event log, and the object thread pool. The source, sink
and routing parts of ``Job`` build on it.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from gateway_agent import auth, wire
from gateway_agent.flow import ByteBudget, Lease
from gateway_agent.job.tree import Tree, parse_trees
from gateway_agent.pool import OutboundPool, OutChunk, Peer, PoolCallbacks
from gateway_agent.ratelimit import TokenBucket
from gateway_agent.stores import open_store
from gateway_agent.stores.base import ObjectStore
from gateway_agent.stores.credentials import CredentialCell, StoreCredentials

# The job's logger: its records keep the name they had before ``job.py`` was split.
log = logging.getLogger("gateway_agent.job")

T = TypeVar("T")
R = TypeVar("R")

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
    # Whether the chunk's end-to-end tag matched, when checked on arrival (None: not yet).
    tag_ok: bool | None = None


class JobError(Exception):
    """A job spec this gateway cannot run."""


class ObjectFailed(Exception):
    """One object of a chunk cannot be copied (its source is unreadable or changed, or the
    destination cannot hold its name); the rest of the chunk can. ``kind`` is the event sent to
    the control plane: ``changed`` or ``failed``; ``side`` is ``source`` or ``destination``."""

    def __init__(self, kind: str, key: str, side: str, why: str) -> None:
        super().__init__(why)
        self.kind, self.key, self.side, self.why = kind, key, side, why


def _open_credentials(
    spec: dict[str, Any], token: Any, secret: bytes, gateway_id: str
) -> tuple[StoreCredentials | None, StoreCredentials | None, int]:
    """The source and destination credentials sealed in ``token`` for this job on this
    gateway (None where the control plane sent none), and their serial (0 at the start)."""
    context = auth.credentials_context(str(spec["job_id"]), gateway_id)
    try:
        sealed = json.loads(auth.unseal(secret, str(token), context))
        src, dst = (sealed.get(side) for side in ("src", "dst"))
        return (
            StoreCredentials.from_dict(src) if src else None,
            StoreCredentials.from_dict(dst) if dst else None,
            int(sealed.get("serial", 0)),
        )
    except Exception:  # never the reason: it could quote what was sealed
        raise JobError("the job's store credentials do not open on this gateway") from None


def _credentials(
    spec: dict[str, Any], secret: bytes, gateway_id: str
) -> tuple[CredentialCell | None, CredentialCell | None, int]:
    """Cells holding the source and destination credentials sealed into
    ``spec["sealed_credentials"]`` (None where the control plane sent none), and their
    serial."""
    token = spec.get("sealed_credentials")
    if not token:
        return None, None, 0
    src, dst, serial = _open_credentials(spec, token, secret, gateway_id)
    return (
        CredentialCell(src) if src is not None else None,
        CredentialCell(dst) if dst is not None else None,
        serial,
    )


def _rate(value: Any) -> float | None:
    """A hop's rate from the spec: a positive number of bytes/s, else none."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def _local_calls(store: ObjectStore) -> bool:
    """Whether the store's calls are local system calls (see ``Capabilities.local_calls``)."""
    return bool(getattr(store.capabilities, "local_calls", False))


class JobBase:
    """The state and services a job's roles share (``Job`` adds the roles)."""

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
        # Multicast paths: a distribution tree each (``tree``); their chunks fan out.
        try:
            self.trees: dict[str, Tree] = parse_trees(spec)
        except (ValueError, KeyError, TypeError) as exc:
            raise JobError(f"job {spec.get('job_id')}: {exc}") from None
        # Paths with a clear hop: their chunks carry an end-to-end tag from the source, which
        # the sink requires (a path sealed hop by hop is authenticated by AES-GCM already).
        self._frame_key = wire.frame_key(secret)
        hops: dict[str, dict[str, Any]] = spec.get("hops", {})
        edges = {p: list(itertools.pairwise(r)) for p, r in self.routes.items()}
        edges.update({p: t.edges() for p, t in self.trees.items()})
        self._tagged_paths = {
            path
            for path, pairs in edges.items()
            if any(not hops.get(f"{u}>{v}", {}).get("encrypt", False) for u, v in pairs)
        }
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
        # A multicast job names a destination per sink region (``dst_uris``).
        self._dst_uri: str | None = (spec.get("dst_uris") or {}).get(region, spec.get("dst_uri"))
        self._src_options: dict[str, Any] = options.get("src", {})
        self._dst_options: dict[str, Any] = options.get("dst", {})
        # The store credentials the control plane sealed for this job on this gateway: kept in
        # memory only, handed to the store constructors (none: the SDK's own chain).
        # Their serial: a fresh set (``update_credentials``) must carry a higher one.
        self._src_credentials, self._dst_credentials, self._credentials_serial = _credentials(
            spec, secret, gateway_id
        )
        self._src: ObjectStore | None = None
        self._dst: ObjectStore | None = None
        self._store_lock = threading.Lock()
        # The objects of a batched chunk are read and written in parallel: against a store with
        # tens of ms per request, one thread per chunk would cap a gateway at a few hundred
        # small objects per second.
        self._object_threads = max(1, int(spec.get("object_threads", 64)))
        self._objects_pool: ThreadPoolExecutor | None = None
        # Metadata policy (``objmeta``): the source reads each object's metadata and sends it in
        # the chunk's segment when ``keep``; the sink writes it with ``set`` applied on top.
        metadata: dict[str, Any] = spec.get("metadata") or {}
        self._meta_keep = bool(metadata.get("keep", False))
        self._meta_set: dict[str, str] = dict(metadata.get("set") or {})
        # A one-region route (the worker's: this gateway reads and writes itself) has no hop
        # to pace: ``local_rate`` (bytes/s) paces its chunks where they reach the sink writers.
        self._local_bucket = TokenBucket(_rate(spec.get("local_rate")))
        self._local_batch_readers = threading.BoundedSemaphore(LOCAL_BATCH_READERS)
        self._local_batch_writers = threading.BoundedSemaphore(LOCAL_BATCH_WRITERS)
        on_tree = any(region in t.regions for t in self.trees.values())
        if not on_tree and not any(region in r for r in self.routes.values()):
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
        for tree in self.trees.values():
            next_regions.update(tree.next.get(self.region, ()))
        for nxt in sorted(next_regions):
            callbacks = PoolCallbacks(
                sent=self._on_sent,
                lost=partial(self._on_lost, to=nxt),
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
                sender=self.gateway_id,
                rate=_rate(hop.get("rate")),
            )

    def set_rates(self, rates: dict[str, Any]) -> dict[str, Any]:
        """New bandwidth caps per hop (``{"a>b": bytes/s or None}``) of this gateway's pools,
        from the next frame on (the transfer's cap changed while it runs); ``"local"``: the
        pace of its one-region route (a run of both: the whole cap until the overlay joins)."""
        applied = {}
        for hop, rate in rates.items():
            if hop == "local":  # the one-region route's pace (``local_rate``: its share)
                self._local_bucket.set_rate(_rate(rate))
                applied[hop] = self._local_bucket.rate
                continue
            src, _, nxt = str(hop).partition(">")
            pool = self._pools.get(nxt)
            if src == self.region and pool is not None:
                pool.bucket.set_rate(_rate(rate))
                applied[hop] = pool.bucket.rate
        return {"rates": applied}

    def _store(self, which: str) -> ObjectStore:
        with self._store_lock:
            if which == "src":
                if self._src is None:
                    if not self._src_uri:
                        raise JobError("job has no source URI")
                    self._src = open_store(self._src_uri, self._src_options, self._src_credentials)
                return self._src
            if self._dst is None:
                if not self._dst_uri:
                    raise JobError("job has no destination URI")
                self._dst = open_store(self._dst_uri, self._dst_options, self._dst_credentials)
            return self._dst

    def update_credentials(self, data: dict[str, Any]) -> dict[str, Any]:
        """Fresh store credentials from the control plane (``POST /v1/jobs/ID/credentials``,
        sealed for this job on this gateway like the first ones): each store's cell takes them
        in place, so work in flight carries on. Only a set with a higher serial than the last
        one is taken (a late, older set changes nothing); a kind or side this job was not
        started with is refused."""
        token = data.get("sealed_credentials")
        if not token:
            raise JobError("no sealed_credentials")
        src, dst, serial = _open_credentials(self.spec, token, self._secret, self.gateway_id)
        with self._store_lock:
            if serial <= self._credentials_serial:
                return {"updated": False, "serial": self._credentials_serial}
            pairs = ((self._src_credentials, src), (self._dst_credentials, dst))
            for cell, fresh in pairs:
                if fresh is not None and (cell is None or cell.kind != fresh.kind):
                    raise JobError("fresh credentials for a store this job holds none for")
            for cell, fresh in pairs:
                if cell is not None and fresh is not None:
                    cell.update(fresh)
            self._credentials_serial = serial
        log.info("job %s: store credentials refreshed (serial %d)", self.job_id, serial)
        return {"updated": True, "serial": serial}

    def credential_counters(self) -> dict[str, int]:
        """Fresh credential sets received, and taken by the stores' SDKs (job counters)."""
        cells = [c for c in (self._src_credentials, self._dst_credentials) if c is not None]
        return {
            "credentials_received": sum(c.updates for c in cells),
            "credentials_taken": sum(c.taken for c in cells),
        }

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

    def _on_lost(self, item: OutChunk, why: str, to: str | None = None) -> None:
        """A copy that could not be sent; ``to``: the next hop it was for (a tree's chunk
        may have reached the others: the control plane re-sends it only below ``to``)."""
        self._count(chunks_lost=1)
        where = {"to": to} if to is not None else {}
        self._event(
            t="lost", chunk=item.meta["chunk"], path=item.meta.get("path"), why=why, **where
        )

    def _object_failed(self, chunk: int, bad: ObjectFailed) -> None:
        """Report one object of ``chunk`` as changed or failed; the control plane re-sends the
        chunk's other objects and reports this one (never a job-wide error)."""
        log.warning("job %s: %s %s: %s", self.job_id, bad.kind, bad.key, bad.why)
        self._event(t=bad.kind, chunk=chunk, key=bad.key, side=bad.side, why=bad.why)

    def _slow_store_hook(self, nbytes: int, t0: float, hook: str = "sink_rate_bps") -> bool:
        """Test hooks ``sink_rate_bps`` / ``source_rate_bps``: a store that writes / reads at
        that rate per thread; False if the job stopped meanwhile."""
        rate = float(self._hooks.get(hook, 0)) if self._hooks else 0.0
        if rate:
            self._stop.wait(max(0.0, nbytes / rate - (time.monotonic() - t0)))
        return not self._stop.is_set()

    def route(self, chunk: InChunk) -> None:
        """Hand a chunk on (``Job.route``): where the source role puts what it read."""
        raise NotImplementedError
