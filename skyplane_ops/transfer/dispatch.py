"""Dispatch chunks along the plan's paths to the fleet's gateways and follow their progress.

Every path of the plan becomes a route (a list of regions) in one job spec that every gateway
on a route receives. Chunks are assigned to paths by the plan's shares (by bytes) and, within a
path, to the least-loaded source gateway. Progress comes from each gateway's incremental event
log: ``done`` at the sink finishes a chunk, ``bad`` (checksum) and ``lost`` (send failure) make
it go again, ``changed`` means the source object no longer matches the listing, ``error`` fails
the transfer with a message that names the gateway.

Gateways are polled without blocking on any one of them, and ``liveness.HopWatch`` decides
when a hop is dead (no answer or no bytes for ``hop_timeout`` seconds, or a next hop the
gateways report unreachable): its chunks then go to the plan's other paths, or, when there is
none, the transfer fails naming the hop. While the job runs, the fleet's leases are renewed
(``provision.lease``), so gateways of a control plane that died stop by themselves.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gateway_agent.auth import seal
from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet, data_host
from skyplane_ops.provision.lease import LINGER_S, keep_alive
from skyplane_ops.transfer.liveness import DeadPath, HopWatch
from skyplane_ops.transfer.manifest import Chunk, Segment
from skyplane_ops.transfer.progress import Progress, ProgressCallback
from skyplane_ops.transfer.submitter import Submitter

log = logging.getLogger(__name__)


def _submit_to(client: GatewayClient, *, job_id: str, batch: list[dict[str, Any]]) -> int:
    return client.submit_chunks(job_id, batch)


def _start_on(client: GatewayClient, *, spec: dict[str, Any]) -> dict[str, Any]:
    return client.start_job(spec)


# Chunk descriptors per submit request, and segments per request: a batch of small objects is
# one chunk of up to 256 segments, so the request body stays a few hundred KiB.
SUBMIT_BATCH = 500
SUBMIT_SEGMENTS = 4096
# Chunks pulled from the catalog and submitted at a time when topping up the window.
SUBMIT_SLICE = 16
# Status polls per gateway and ``poll_interval`` at most (a poll is a long poll: it answers
# when the gateway has news, so at most this many answers per interval carry news).
POLL_GAPS = 4
# TCP connections per hop at most when the hop's receivers listen on a loopback address.
LOOPBACK_CONNECTIONS = 8


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class DispatchOptions:
    """Knobs of the data path; ``None`` connections means "as the plan says"."""

    connections: int | None = None
    # True/False for every hop, "cross-cloud" for hops between providers (aws:... -> gcp:...),
    # or an explicit collection of (src_region, dst_region) hops.
    encrypt: bool | str | frozenset[tuple[str, str]] = False
    compress_level: int = 0
    max_attempts: int = 4
    poll_interval: float = 0.1
    stall_timeout: float = 300.0
    # A hop that answers nothing or moves no bytes for this long is dead (see liveness.py);
    # it must exceed the time one chunk takes over the slowest hop.
    hop_timeout: float = 30.0
    # Gateway leases while the job runs (None: the fleet's, else 60 s; 0: hold no lease) and
    # after it ends.
    lease_s: float | None = None
    lease_linger_s: float = LINGER_S
    reader_threads: int = 8
    writer_threads: int = 8
    # Per job and gateway: the objects of a batched chunk are read/written this many at once
    # (64: at 20 ms per S3 request, 32 in flight capped a gateway near 1,000 PUT/s; the store
    # pools hold 64 connections).
    object_threads: int = 64
    # Chunks submitted and not yet finished, per source gateway: the rest waits in the control
    # plane, so a gateway holds a bounded batch of work at any object count (and a dead path
    # has few chunks to move).
    window_chunks: int = 64
    # gateway id or region -> hooks honoured only by agents started with --enable-test-hooks
    test_hooks: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkTotals:
    """What a chunk iterator will yield, known before the first chunk (for progress)."""

    chunks: int
    nbytes: int
    objects: int


@dataclass
class DispatchStats:
    chunks: int = 0
    resent: int = 0
    rerouted: int = 0
    dead_hops: list[str] = field(default_factory=list)
    bytes_done: int = 0
    changed_keys: set[str] = field(default_factory=set)
    # key -> why, for objects a gateway could not copy ("source: ..." / "destination: ...")
    failed_keys: dict[str, str] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # Per route index: bytes delivered, and seconds from the start until its last chunk landed.
    path_bytes: dict[int, int] = field(default_factory=dict)
    path_seconds: dict[int, float] = field(default_factory=dict)


def plan_routes(plan: TransferPlan) -> list[tuple[list[str], float]]:
    """(regions, share) per path; a plan without paths means the direct route."""
    routes = [(list(p.regions), float(p.share)) for p in plan.paths if p.share > 0]
    if not routes:
        routes = [([plan.src, plan.dsts[0]], 1.0)]
    total = sum(s for _, s in routes) or 1.0
    return [(r, s / total) for r, s in routes]


def check_fleet(plan: TransferPlan, fleet: GatewayFleet) -> None:
    """Every region on a route needs at least one gateway in the fleet."""
    needed = {r for route, _ in plan_routes(plan) for r in route}
    missing = sorted(r for r in needed if not fleet.in_region(r))
    if missing:
        raise TransferError(
            f"the plan routes through {', '.join(missing)} but the fleet has no gateway there "
            f"(fleet regions: {', '.join(fleet.regions) or 'none'})"
        )


class Dispatcher:
    """Runs one job across the fleet: start, submit, poll, retry, stop."""

    def __init__(
        self,
        plan: TransferPlan,
        fleet: GatewayFleet,
        secret: bytes,
        *,
        src_uri: str,
        dst_uri: str,
        src_options: Mapping[str, Any] | None = None,
        dst_options: Mapping[str, Any] | None = None,
        options: DispatchOptions | None = None,
        job_id: str | None = None,
    ) -> None:
        check_fleet(plan, fleet)
        self.plan = plan
        self.fleet = fleet
        self.options = options or DispatchOptions()
        self.job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        self.routes = plan_routes(plan)
        used = {r for route, _ in self.routes for r in route}
        self.gateways: list[Gateway] = [g for g in fleet.gateways if g.region in used]
        # Start and submit: a couple of attempts, bounded so a hung gateway cannot hold the
        # dispatch loop much longer than the hop timeout.
        bounded = min(30.0, max(5.0, self.options.hop_timeout / 2))
        self.clients = {
            g.gateway_id: GatewayClient(
                g.host,
                g.control_port,
                secret,
                timeout=bounded,
                attempts=2,
                gateway_id=g.gateway_id,
            )
            for g in self.gateways
        }
        # Status polls and stops: one attempt, short timeout (liveness decides, not retries).
        quick = max(1.0, min(10.0, self.options.hop_timeout / 3))
        self._quick = {
            g.gateway_id: GatewayClient(
                g.host, g.control_port, secret, timeout=quick, attempts=1, gateway_id=g.gateway_id
            )
            for g in self.gateways
        }
        self._alive = [True] * len(self.routes)
        # When each gateway was last asked for its status, and the least time between asks.
        self._asked: dict[str, float] = {}
        self._poll_gap = self.options.poll_interval / POLL_GAPS
        self._chunk_path: dict[int, int] = {}
        self._by_id = {g.gateway_id: g for g in self.gateways}
        self._secret = secret
        self._src_uri = src_uri
        self._dst_uri = dst_uri
        self._sealed = seal(
            secret,
            json.dumps({"src": dict(src_options or {}), "dst": dict(dst_options or {})}).encode(),
        )
        self._assigned: dict[str, int] = {g.gateway_id: 0 for g in self.gateways}
        self._path_bytes = [0] * len(self.routes)  # submitted along each path
        self._outstanding = [0] * len(self.routes)  # submitted, not finished (see top_up)
        self._started: list[str] = []
        self._sender = Submitter()  # submits go out in the background, in order per gateway

    # ---- job spec --------------------------------------------------------------------------------

    def _connections(self, src: str, dst: str) -> int:
        if self.options.connections:
            return self.options.connections
        pair = len(self.fleet.in_region(src)) * len(self.fleet.in_region(dst))
        n = 8
        for hop in self.plan.hops:
            if hop.src == src and hop.dst == dst and hop.connections > 0:
                n = max(1, min(64, -(-hop.connections // max(1, pair))))
                break
        if self._on_loopback(src, dst):
            # Parallel connections beat a WAN's per-flow limits; on one host there is none,
            # and each connection more is a sender and a receiver thread contending for the
            # gateways' interpreter (64 of them cost the source ~10 % of its CPU at 100k
            # small objects).
            n = min(n, LOOPBACK_CONNECTIONS)
        return n

    def _on_loopback(self, src: str, dst: str) -> bool:
        """Whether every gateway of hop ``src -> dst`` sends to a loopback address."""
        receivers = self.fleet.in_region(dst)
        return bool(receivers) and all(_is_loopback(data_host(g, src)) for g in receivers)

    def _encrypt_hop(self, src: str, dst: str) -> bool:
        mode = self.options.encrypt
        if isinstance(mode, bool):
            return mode
        if mode == "cross-cloud":
            return src.split(":", 1)[0] != dst.split(":", 1)[0]
        if isinstance(mode, str):
            raise TransferError(f"encrypt must be a bool, 'cross-cloud' or a set of hops: {mode!r}")
        return (src, dst) in mode

    def job_spec(self, gateway: Gateway) -> dict[str, Any]:
        hops: dict[str, dict[str, Any]] = {}
        for route, _ in self.routes:
            for u, v in itertools.pairwise(route):
                hops[f"{u}>{v}"] = {
                    "connections": self._connections(u, v),
                    "encrypt": self._encrypt_hop(u, v),
                    "compress_level": self.options.compress_level,
                }
        hooks = self.options.test_hooks.get(gateway.gateway_id) or self.options.test_hooks.get(
            gateway.region
        )
        return {
            "job_id": self.job_id,
            "routes": {str(i): route for i, (route, _) in enumerate(self.routes)},
            "gateways": {
                region: [
                    {
                        "id": g.gateway_id,
                        "host": data_host(g, gateway.region),
                        "data_port": g.data_port,
                    }
                    for g in self.fleet.in_region(region)
                ]
                for region in {r for route, _ in self.routes for r in route}
            },
            "hops": hops,
            "src_uri": self._src_uri,
            "dst_uri": self._dst_uri,
            "sealed_options": self._sealed,
            "reader_threads": self.options.reader_threads,
            "writer_threads": self.options.writer_threads,
            "object_threads": self.options.object_threads,
            "test_hooks": hooks or {},
        }

    # ---- helpers ---------------------------------------------------------------------------------

    def _call(self, gateway_id: str, fn: Callable[[GatewayClient], Any]) -> Any:
        try:
            return fn(self.clients[gateway_id])
        except GatewayError as exc:
            g = self._by_id[gateway_id]
            raise TransferError(
                f"gateway {gateway_id} in region {g.region} ({g.host}:{g.control_port}) "
                f"failed: {exc}"
            ) from exc

    def _pick_path(self, nbytes: int) -> int:
        """The live path that would finish its outstanding bytes plus this chunk first, at
        rates in proportion to the plan's shares: all chunks submitted at once split by the
        shares; chunks submitted later (more than a window) go where work drains fastest, so
        a path slower than predicted does not become the transfer's tail."""
        best = min(
            (i for i in range(len(self.routes)) if self._alive[i]),
            key=lambda i: (self._outstanding[i] + nbytes) / max(self.routes[i][1], 1e-9),
        )
        self._path_bytes[best] += nbytes
        self._outstanding[best] += nbytes
        return best

    def _pick_source(self, path: int, nbytes: int) -> str:
        region = self.routes[path][0][0]
        gid = min(
            (g.gateway_id for g in self.fleet.in_region(region)), key=lambda i: self._assigned[i]
        )
        self._assigned[gid] += nbytes
        return gid

    def _descriptor(self, chunk: Chunk, path: int, uploads: Mapping[str, str]) -> dict[str, Any]:
        return {
            "chunk": chunk.chunk_id,
            "path": str(path),
            "attempt": chunk.attempts,
            "segs": [_segment(s, uploads) for s in chunk.segments],
        }

    def _submit(self, chunks: list[Chunk], uploads: Mapping[str, str]) -> None:
        per_gateway: dict[str, list[dict[str, Any]]] = {}
        for c in chunks:
            path = self._pick_path(c.nbytes)
            self._chunk_path[c.chunk_id] = path
            gid = self._pick_source(path, c.nbytes)
            per_gateway.setdefault(gid, []).append(self._descriptor(c, path, uploads))
        for gid, descs in per_gateway.items():
            batch: list[dict[str, Any]] = []
            segments = 0
            for d in descs:
                if batch and (len(batch) >= SUBMIT_BATCH or segments >= SUBMIT_SEGMENTS):
                    self._send(gid, batch)
                    batch, segments = [], 0
                batch.append(d)
                segments += len(d["segs"])
            if batch:
                self._send(gid, batch)

    def _send(self, gid: str, batch: list[dict[str, Any]]) -> None:
        """Queue ``batch`` for ``gid`` (a failure is raised by the poll loop's next turn)."""
        self._sender.send(
            gid, partial(self._call, gid, partial(_submit_to, job_id=self.job_id, batch=batch))
        )

    # ---- run -------------------------------------------------------------------------------------

    def run(
        self,
        chunks: Iterable[Chunk],
        uploads: Mapping[str, str],
        on_done: Callable[[list[tuple[Chunk, list[int]]]], None],
        progress: ProgressCallback | None = None,
        totals: ChunkTotals | None = None,
    ) -> DispatchStats:
        """Move every chunk or raise ``TransferError``; jobs are stopped either way.

        ``chunks`` may be a lazy iterator (the engine's comes from the catalog) with its
        ``totals``: only the window of submitted, unfinished chunks is ever held, so memory
        does not grow with the transfer. Without ``totals`` the chunks are counted first.
        """
        if totals is None:
            chunks = list(chunks)
            keys = {s.key for c in chunks for s in c.segments}
            totals = ChunkTotals(len(chunks), sum(c.nbytes for c in chunks), len(keys))
            del keys
        with ExitStack() as stack:
            if self.options.lease_s is None or self.options.lease_s > 0:
                stack.enter_context(
                    keep_alive(
                        self.fleet,
                        self._secret,
                        lease_s=self.options.lease_s,
                        linger_s=self.options.lease_linger_s,
                    )
                )
            # Not a ``with`` block: leaving must not wait for a poll stuck on a hung gateway.
            pollers = ThreadPoolExecutor(
                max_workers=max(1, 2 * len(self.gateways)), thread_name_prefix="poll"
            )
            try:
                return self._run(iter(chunks), totals, uploads, on_done, progress, pollers)
            finally:
                self._sender.close()
                self.stop(pollers)
                pollers.shutdown(wait=False, cancel_futures=True)
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_jobs(self) -> None:
        # Sinks and relays first, so sources find their next hops listening for the job.
        order = sorted(
            self.gateways,
            key=lambda g: min(
                (-route.index(g.region) for route, _ in self.routes if g.region in route),
                default=0,
            ),
        )
        for g in order:
            spec = self.job_spec(g)
            self._call(g.gateway_id, partial(_start_on, spec=spec))
            self._started.append(g.gateway_id)

    def _run(
        self,
        source: Iterator[Chunk],
        totals: ChunkTotals,
        uploads: Mapping[str, str],
        on_done: Callable[[list[tuple[Chunk, list[int]]]], None],
        progress: ProgressCallback | None,
        pollers: ThreadPoolExecutor,
    ) -> DispatchStats:
        stats = DispatchStats(chunks=totals.chunks)
        # ``source``: not yet pulled (lazy); ``pending``: submitted and not finished. Nothing
        # else per chunk or per object is kept: ``flight`` holds only objects in the window.
        pending: dict[int, Chunk] = {}
        total_bytes = totals.nbytes
        flight = _Flight(totals.objects)
        pulled = 0
        exhausted = False
        next_id = totals.chunks  # ids for the rest of a chunk that lost an object
        window = max(1, self.options.window_chunks) * max(
            1, len({g.gateway_id for r, _ in self.routes for g in self.fleet.in_region(r[0])})
        )
        self.window = window

        def top_up() -> None:
            nonlocal pulled, exhausted
            # What each path still has to deliver, for ``_pick_path``.
            self._outstanding = [0] * len(self.routes)
            for cid, c in pending.items():
                p = self._chunk_path.get(cid)
                if p is not None:
                    self._outstanding[p] += c.nbytes
            room = max(0, window - len(pending))
            # A slice at a time: the first request leaves after 16 chunks are built, not after
            # the whole window (64 chunks of 256 small objects: ~0.1 s before any gateway read).
            while room and not exhausted:
                want = min(room, SUBMIT_SLICE)
                batch = list(itertools.islice(source, want))
                exhausted = len(batch) < want
                for c in batch:
                    pending[c.chunk_id] = c
                    flight.pulled(c)
                pulled += len(batch)
                room -= len(batch)
                if batch:
                    self._submit(batch, uploads)

        t0 = time.monotonic()
        self._start_jobs()
        top_up()
        watch = HopWatch(
            [r for r, _ in self.routes],
            {
                region: [g.gateway_id for g in self.gateways if g.region == region]
                for region in {r for route, _ in self.routes for r in route}
            },
            self.options.hop_timeout,
            time.monotonic(),
        )
        self._watch = watch
        self._uploads = uploads
        cursors = dict.fromkeys(self.clients, 0)
        polls: dict[str, Future[dict[str, Any]]] = {}
        last_progress = time.monotonic()
        while pending or not exhausted:
            finished: list[tuple[Chunk, list[int]]] = []
            retry: list[Chunk] = []
            failure: TransferError | None = None
            self._sender.raise_failed()
            for gid in self.clients:
                if failure is not None:
                    break
                try:
                    st = self._poll(gid, polls, cursors, watch, pollers)
                except TransferError as exc:
                    failure = exc
                    break
                if st is None:
                    continue
                stats.counters[gid] = st["counters"]
                for ev in st["events"]:
                    kind = ev.get("t")
                    if kind == "error":
                        try:
                            self._on_error(gid, ev, watch, pending, stats)
                        except TransferError as exc:
                            failure = exc  # journal what finished first, then fail
                        continue
                    chunk = pending.get(ev.get("chunk", -1))
                    if chunk is None:
                        continue
                    path = self._chunk_path.get(chunk.chunk_id)
                    if kind == "done":
                        del pending[chunk.chunk_id]
                        self._chunk_path.pop(chunk.chunk_id, None)
                        chunk.vouched = tuple(int(i) for i in ev.get("vouched", ()))
                        finished.append((chunk, [int(x) for x in ev.get("crcs", [])]))
                        flight.landed(chunk)
                        stats.bytes_done += chunk.nbytes
                        if path is not None:
                            watch.chunk_finished(path, time.monotonic())
                        p = path or 0
                        stats.path_bytes[p] = stats.path_bytes.get(p, 0) + chunk.nbytes
                        stats.path_seconds[p] = time.monotonic() - t0
                    elif kind in ("bad", "lost"):
                        if "path" in ev and str(ev["path"]) != str(path):
                            continue  # a copy on a path it was rerouted from
                        chunk.attempts += 1
                        if chunk.attempts >= self.options.max_attempts:
                            failure = self._chunk_failed(gid, chunk, path, ev, pending, stats)
                            if failure is not None:
                                break
                            retry = [c for c in retry if c.chunk_id != chunk.chunk_id]
                            continue
                        log.info("re-sending chunk %s: %s", chunk.chunk_id, ev.get("why"))
                        stats.resent += 1
                        retry.append(chunk)
                    elif kind in ("changed", "failed"):
                        del pending[chunk.chunk_id]
                        self._chunk_path.pop(chunk.chunk_id, None)
                        flight.dropped(ev["key"])  # not moved by this run
                        if kind == "changed":
                            stats.changed_keys.add(ev["key"])
                        else:
                            stats.failed_keys[ev["key"]] = f"{ev.get('side')}: {ev.get('why')}"
                        rest = [s for s in chunk.segments if s.key != ev["key"]]
                        if rest:
                            again = Chunk(next_id, rest)
                            next_id += 1
                            pending[again.chunk_id] = again
                            retry.append(again)
            if finished:
                on_done(finished)
                last_progress = time.monotonic()
            if failure is not None:
                raise failure
            if retry:
                self._submit(retry, uploads)
            self._check_paths(watch, pending, stats)
            top_up()
            if progress is not None:
                elapsed = time.monotonic() - t0
                progress(
                    Progress(
                        bytes_done=stats.bytes_done,
                        bytes_total=total_bytes,
                        chunks_done=pulled - len(pending),
                        chunks_total=stats.chunks,
                        elapsed_s=round(elapsed, 3),
                        gbps=round(stats.bytes_done * 8 / 1e9 / elapsed, 4) if elapsed else 0,
                        resent=stats.resent,
                        objects_done=flight.done,
                        objects_total=flight.total,
                        path_gbps={
                            " -> ".join(self.routes[i][0]): round(n * 8 / 1e9 / elapsed, 4)
                            for i, n in stats.path_bytes.items()
                        }
                        if elapsed
                        else {},
                    )
                )
            if time.monotonic() - last_progress > self.options.stall_timeout:
                raise TransferError(
                    f"no chunk finished for {self.options.stall_timeout:.0f} s "
                    f"({stats.chunks - pulled + len(pending)} chunks outstanding)"
                )
            if pending or not exhausted:
                # Until a gateway has news (its long poll answers), at most one interval.
                # A gateway without a poll in flight is due again after one gap.
                idle = len(polls) < len(self.clients)
                timeout = self._poll_gap if idle else self.options.poll_interval
                if polls:
                    futures_wait(list(polls.values()), timeout=timeout, return_when=FIRST_COMPLETED)
                else:
                    time.sleep(timeout)
        self._sender.wait()
        return stats

    # ---- liveness --------------------------------------------------------------------------------

    def _poll(
        self,
        gid: str,
        polls: dict[str, Future[dict[str, Any]]],
        cursors: dict[str, int],
        watch: HopWatch,
        pollers: ThreadPoolExecutor,
    ) -> dict[str, Any] | None:
        """The status of ``gid`` if its last poll has answered; the next poll is then on its
        way at once (or once a gap of ``poll_interval / POLL_GAPS`` since the last one has
        passed). Each poll waits at the gateway for news (up to ``poll_interval``), so a
        finished chunk is seen when it lands, not up to two intervals later."""
        fut = polls.get(gid)
        if fut is not None and not fut.done():
            return None
        st = None
        if fut is not None:
            del polls[gid]
            now = time.monotonic()
            try:
                st = fut.result()
            except GatewayError as exc:
                if exc.status:  # it answered, with an error: that is not a liveness question
                    g = self._by_id[gid]
                    raise TransferError(
                        f"gateway {gid} in region {g.region} ({g.host}:{g.control_port}) "
                        f"failed: {exc}"
                    ) from exc
                refused = isinstance(exc.__cause__, ConnectionRefusedError)
                watch.unanswered(gid, str(exc), now, refused)
                return None  # asked again on the next round, not in a tight loop
            watch.answered(gid, st["counters"], now)
            cursors[gid] = st["cursor"]
        # At most one poll per gap and gateway: one that answers at once every time (an agent
        # without long polls, a stopped job) is not asked in a tight loop.
        now = time.monotonic()
        if now - self._asked.get(gid, float("-inf")) < self._poll_gap:
            return st
        self._asked[gid] = now
        polls[gid] = pollers.submit(
            self._quick[gid].status, self.job_id, cursors[gid], self.options.poll_interval
        )
        return st

    def _on_error(
        self,
        gid: str,
        ev: dict[str, Any],
        watch: HopWatch,
        pending: dict[int, Chunk],
        stats: DispatchStats,
    ) -> None:
        """A gateway error: fatal, unless it names a next hop the plan can route around."""
        g = self._by_id[gid]
        hop = ev.get("hop")
        if not hop:
            raise TransferError(f"gateway {gid} in region {g.region}: {ev['why']}")
        u, v = str(hop[0]), str(hop[1])
        for p, (route, _) in enumerate(self.routes):
            if self._alive[p] and (u, v) in itertools.pairwise(route):
                self._path_died(DeadPath(p, (u, v), f"{gid}: {ev['why']}"), pending, stats)

    def _hop_from(self, gid: str, path: int | None) -> tuple[str, str] | None:
        """The hop out of ``gid``'s region along ``path`` (None if it is the path's end)."""
        if path is None:
            return None
        route = self.routes[path][0]
        region = self._by_id[gid].region
        if region not in route or route.index(region) + 1 >= len(route):
            return None
        return region, route[route.index(region) + 1]

    def _chunk_failed(
        self,
        gid: str,
        chunk: Chunk,
        path: int | None,
        ev: dict[str, Any],
        pending: dict[int, Chunk],
        stats: DispatchStats,
    ) -> TransferError | None:
        """A chunk lost ``max_attempts`` times: the hop it was lost on is dead when the plan
        has other paths (its chunks move there); otherwise the error names the hop."""
        hop = self._hop_from(gid, path) if ev.get("t") == "lost" else None
        where = f" on hop {hop[0]} -> {hop[1]}" if hop else f" at {gid}"
        why = (
            f"chunk {chunk.chunk_id} ({chunk.segments[0].key}) failed {chunk.attempts} "
            f"times{where}; last: {ev.get('why')}"
        )
        if hop is None or path is None or sum(self._alive) < 2:
            return TransferError(why)
        chunk.attempts = 0
        self._path_died(DeadPath(path, hop, why), pending, stats)
        return None

    def _check_paths(
        self,
        watch: HopWatch,
        pending: dict[int, Chunk],
        stats: DispatchStats,
    ) -> None:
        outstanding: dict[int, int] = {}
        for cid in pending:
            p = self._chunk_path.get(cid)
            if p is not None:
                outstanding[p] = outstanding.get(p, 0) + 1
        for dead in watch.check(time.monotonic(), outstanding):
            self._path_died(dead, pending, stats)

    def _path_died(self, dead: DeadPath, pending: dict[int, Chunk], stats: DispatchStats) -> None:
        """Send the dead path's chunks along the others, or fail naming the hop."""
        self._alive[dead.path] = False
        self._watch.alive[dead.path] = False
        stats.dead_hops.append(dead.describe())
        if not any(self._alive):
            raise TransferError(f"{dead.describe()}; the plan has no other path to route around it")
        self._drop_everywhere(dead.path)
        self._watch.grace(time.monotonic())  # the other paths get a full window for the extra load
        moved = [c for cid, c in pending.items() if self._chunk_path.get(cid) == dead.path]
        log.warning("%s: moving %d chunk(s) to the other paths", dead.describe(), len(moved))
        stats.rerouted += len(moved)
        if moved:
            self._submit(moved, self._uploads)

    def _drop_everywhere(self, path: int) -> None:
        """Tell every live gateway of the job that ``path`` is dead, so budget held by chunks
        waiting for it is freed for the other paths (best effort, in parallel, bounded)."""
        now = time.monotonic()
        live = [g for g in self._started if not self._watch.gateway_dead(g, now)]

        def drop(gid: str) -> None:
            try:
                self._quick[gid].drop_path(self.job_id, str(path))
            except GatewayError as exc:
                log.debug("dropping path %s on %s: %s", path, gid, exc)

        if live:
            with ThreadPoolExecutor(max_workers=len(live)) as pool:
                list(pool.map(drop, live))

    def stop(self, pollers: ThreadPoolExecutor | None = None) -> None:
        """Stop the job on every gateway it was started on (best effort, in parallel, one short
        attempt each: a hung gateway must not hold the caller)."""

        def stop_one(gid: str) -> None:
            try:
                self._quick[gid].stop_job(self.job_id)
            except GatewayError as exc:
                log.debug("stopping job on %s: %s", gid, exc)

        started, self._started = self._started, []
        watch: HopWatch | None = getattr(self, "_watch", None)
        if watch is not None:  # a gateway that stopped answering will not answer this either
            now = time.monotonic()
            started = [g for g in started if not watch.gateway_dead(g, now)]
        if pollers is None:
            for gid in started:
                stop_one(gid)
        else:
            list(pollers.map(stop_one, started))


def _segment(s: Segment, uploads: Mapping[str, str]) -> dict[str, Any]:
    """A segment as the gateways read it: ``key`` and ``length``, plus ``offset``, ``part``
    with ``upload_id`` and ``version`` only where they say something (a whole object of an
    unversioned store is two fields: its metadata is encoded and decoded at every gateway of
    the path, per object)."""
    d: dict[str, Any] = {"key": s.key, "length": s.length}
    if s.offset:
        d["offset"] = s.offset
    if s.part >= 1:
        d["part"] = s.part
        d["upload_id"] = uploads.get(s.key)
    if s.version is not None:
        d["version"] = s.version
    return d


class _Flight:
    """Objects done, counted from the window alone: an object is done when its last segment
    has been pulled and none of its segments is still in flight (segments of one object come
    in order and together, so this needs only the objects in the window)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self._left: dict[str, int] = {}  # segments in flight per object
        self._ended: set[str] = set()  # objects whose last segment has been pulled
        self._dropped: set[str] = set()  # failed or changed in this run (few)

    def pulled(self, chunk: Chunk) -> None:
        for s in chunk.segments:
            if s.part == 0:  # a whole object: done when it lands, nothing to track
                continue
            self._left[s.key] = self._left.get(s.key, 0) + 1
            if s.last:
                self._ended.add(s.key)

    def landed(self, chunk: Chunk) -> None:
        for s in chunk.segments:
            if s.part == 0:
                self.done += s.key not in self._dropped
                continue
            n = self._left.get(s.key, 0) - 1
            if n > 0:
                self._left[s.key] = n
                continue
            self._left.pop(s.key, None)
            if s.key in self._ended:
                self._ended.discard(s.key)
                if s.key not in self._dropped:
                    self.done += 1

    def dropped(self, key: str) -> None:
        if key not in self._dropped:
            self._dropped.add(key)
            self.total -= 1
        self._left.pop(key, None)
        self._ended.discard(key)

    def __len__(self) -> int:
        """Objects tracked now (bounded by the window)."""
        return len(self._left)
