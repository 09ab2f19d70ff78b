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

This module holds the ``Dispatcher`` (start, the poll loop, stop); its parts live next to it:
``options`` (options, totals, stats), ``spec`` (routes and the job spec), ``submit`` (where
each chunk goes, and sending it), ``liveness`` (polls and dead paths) and ``flight`` (objects
done, for progress).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from gateway_agent.auth import seal
from gateway_agent.client import GatewayClient
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.lease import keep_alive
from skyplane_ops.transfer.dispatch.credentials import copy_source, resolve
from skyplane_ops.transfer.dispatch.flight import _Flight
from skyplane_ops.transfer.dispatch.join import Arrivals, Joining, waiting_paths
from skyplane_ops.transfer.dispatch.liveness import Liveness
from skyplane_ops.transfer.dispatch.options import ChunkTotals, DispatchOptions, DispatchStats
from skyplane_ops.transfer.dispatch.ratewatch import RateWatcher
from skyplane_ops.transfer.dispatch.refresh import CredentialRefresher
from skyplane_ops.transfer.dispatch.spec import JobSpecs, check_fleet, plan_routes
from skyplane_ops.transfer.liveness import HopWatch
from skyplane_ops.transfer.manifest import Chunk
from skyplane_ops.transfer.progress.report import Progress, ProgressCallback
from skyplane_ops.transfer.submitter import Submitter

# The package's name, as when this was the module skyplane_ops.transfer.dispatch.
log = logging.getLogger("skyplane_ops.transfer.dispatch")


def _start_on(client: GatewayClient, *, spec: dict[str, Any]) -> dict[str, Any]:
    return client.start_job(spec)


# Chunks pulled from the catalog and submitted at a time when topping up the window.
SUBMIT_SLICE = 16
# Status polls per gateway and ``poll_interval`` at most (a poll is a long poll: it answers
# when the gateway has news, so at most this many answers per interval carry news).
POLL_GAPS = 4


class Dispatcher(JobSpecs, Joining, Liveness):
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
        arrivals: Arrivals | None = None,
    ) -> None:
        self.plan = plan
        self.fleet = fleet
        self.options = options or DispatchOptions()
        self.job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        self.routes = plan_routes(plan)
        # Paths whose gateways are still coming up (``join``): only with ``arrivals``.
        self._arrivals = arrivals
        self._waiting = waiting_paths(self.routes, fleet) if arrivals is not None else set()
        if arrivals is None or len(self._waiting) == len(self.routes):
            check_fleet(plan, fleet)
        self._stack: ExitStack | None = None
        self._secret = secret
        used = {r for route, _ in self.routes for r in route}
        self.gateways: list[Gateway] = [g for g in fleet.gateways if g.region in used]
        self.clients = {g.gateway_id: self._client(g, quick=False) for g in self.gateways}
        self._quick = {g.gateway_id: self._client(g, quick=True) for g in self.gateways}
        self._alive = [p not in self._waiting for p in range(len(self.routes))]
        total = sum(share for _, share in self.routes) or 1.0
        self.plan_gbps = [plan.predicted_gbps * share / total for _, share in self.routes]
        self._path_since: dict[int, float] = {}
        self._path_done: dict[int, int] = {}
        # When each gateway was last asked for its status, and the least time between asks.
        self._asked: dict[str, float] = {}
        self._poll_gap = self.options.poll_interval / POLL_GAPS
        self._chunk_path: dict[int, int] = {}
        self._left: set[str] = set()  # dead gateways whose regions carry on without them
        self._by_id = {g.gateway_id: g for g in self.gateways}
        self._src_uri = src_uri
        self._dst_uri = dst_uri
        # What the gateways open the stores with: options (sealed like everything of the
        # stores) and credentials this process mints for this job from its own identity,
        # scoped to each end and short-lived, sealed per gateway that needs them
        # (``job_spec``) and refreshed while the job runs (``refresh``); the gateways inherit
        # none.
        lifetime = self.options.credentials_lifetime_s
        src_access = resolve(src_uri, src_options, lifetime_s=lifetime, name=self.job_id)
        # A server-side route's destination reads the source with its own set (S3 copies,
        # GCS rewrites): minted with that read too, on that route only.
        copy_from = copy_source(src_uri, dst_uri, bool(plan.details.get("server_side_paths")))
        dst_access = resolve(
            dst_uri,
            dst_options,
            write=True,
            lifetime_s=lifetime,
            name=self.job_id,
            copy_from=copy_from,
        )
        self._sealed = seal(
            secret, json.dumps({"src": src_access.options, "dst": dst_access.options}).encode()
        )
        self._credentials = (src_access.credentials, dst_access.credentials)
        self._credentials_lock = threading.Lock()
        self._credentials_serial = 0
        self._minted = {
            side: (access.minted, access.mint)
            for side, access in (("src", src_access), ("dst", dst_access))
            if access.minted is not None and access.mint is not None
        }
        self.refresher: CredentialRefresher | None = None
        self.bwlimit = self.options.bwlimit
        self.rates: RateWatcher | None = None
        self._assigned: dict[str, int] = {g.gateway_id: 0 for g in self.gateways}
        self._path_bytes = [0] * len(self.routes)  # submitted along each path
        self._outstanding = [0] * len(self.routes)  # submitted, not finished (see top_up)
        self._outstanding_n = [0] * len(self.routes)  # the same in chunks
        self._started: list[str] = []
        self._sender = Submitter()  # submits go out in the background, in order per gateway

    def _client(self, g: Gateway, *, quick: bool) -> GatewayClient:
        """Start and submit (``quick`` False): a couple of attempts, bounded so a hung gateway
        cannot hold the dispatch loop much longer than the hop timeout. Status polls and stops
        (``quick``): one attempt, short timeout (liveness decides, not retries)."""
        timeout = self.options.hop_timeout
        if quick:
            return GatewayClient(
                g.host, g.control_port, self._secret, timeout=max(1.0, min(10.0, timeout / 3)),
                attempts=1, gateway_id=g.gateway_id,
            )  # fmt: skip
        return GatewayClient(
            g.host, g.control_port, self._secret, timeout=min(30.0, max(5.0, timeout / 2)),
            attempts=2, gateway_id=g.gateway_id,
        )  # fmt: skip

    def _window(self) -> int:
        """Chunks submitted and unfinished at most: ``window_chunks`` per source gateway of
        the live paths."""
        sources = {
            g.gateway_id
            for p, (route, _) in enumerate(self.routes)
            if self._alive[p]
            for g in self.fleet.in_region(route[0])
        }
        return max(1, self.options.window_chunks) * max(1, len(sources))

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
            self._stack = stack  # joining gateways' leases are held until the job ends
            if self.options.lease_s is None or self.options.lease_s > 0:
                stack.enter_context(
                    keep_alive(
                        self.fleet,
                        self._secret,
                        lease_s=self.options.lease_s,
                        linger_s=self.options.lease_linger_s,
                    )
                )
            refresher = stack.enter_context(CredentialRefresher(self, self.clients))
            live = self.options.bwlimit_file
            self.rates = stack.enter_context(
                RateWatcher(self, self.clients, Path(live) if live else None)
            )
            self.refresher = refresher
            # Not a ``with`` block: leaving must not wait for a poll stuck on a hung gateway.
            joining = 8 if self._waiting else 0  # room for the polls of gateways to come
            pollers = ThreadPoolExecutor(
                max_workers=max(1, 2 * len(self.gateways)) + joining, thread_name_prefix="poll"
            )
            try:
                return self._run(iter(chunks), totals, uploads, on_done, progress, pollers)
            finally:
                refresher.close()
                self._sender.close()
                self.stop(pollers)
                pollers.shutdown(wait=False, cancel_futures=True)
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_jobs(self) -> None:
        self._start_jobs_on(self.gateways)

    def _start_jobs_on(self, gateways: list[Gateway]) -> None:
        # Sinks and relays first, so sources find their next hops listening for the job.
        order = sorted(
            gateways,
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
        self.window = self._window()

        def top_up() -> None:
            nonlocal pulled, exhausted
            # What each path still has to deliver, for ``_pick_path``.
            self._outstanding = [0] * len(self.routes)
            self._outstanding_n = [0] * len(self.routes)
            for cid, c in pending.items():
                p = self._chunk_path.get(cid)
                if p is not None:
                    self._outstanding[p] += c.nbytes
                    self._outstanding_n[p] += 1
            room = max(0, self.window - len(pending))
            # A slice at a time: the first request leaves after 16 chunks are built, not after
            # the whole window (64 chunks of 256 small objects: ~0.1 s before any gateway read).
            while room and not exhausted and self._has_room():
                # A chunk at a time while paths may join: each goes where there is room.
                want = 1 if self._arrivals is not None else min(room, SUBMIT_SLICE)
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
        self._path_since = {p: t0 for p in range(len(self.routes)) if self._alive[p]}
        self._path_done = stats.path_bytes
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
        watch.alive = list(self._alive)  # waiting paths are judged once they join
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
            self._join(watch, stats, t0)
            for gid in list(self.clients):
                if failure is not None:
                    break
                if gid in self._left:
                    continue
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
                        chunk.versions = tuple(ev.get("versions", ()))
                        finished.append((chunk, [int(x) for x in ev.get("crcs", [])]))
                        flight.landed(chunk)
                        stats.bytes_done += chunk.nbytes
                        if path is not None:
                            watch.chunk_finished(path, time.monotonic())
                        p = chunk.path = path or 0
                        stats.path_bytes[p] = stats.path_bytes.get(p, 0) + chunk.nbytes
                        # Its time on the job: from its join (a joined path) or the start.
                        since = stats.path_joined.get(p, 0.0)
                        stats.path_seconds[p] = time.monotonic() - t0 - since
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
                        chunks_in_flight=len(pending),
                        bytes_in_flight=sum(c.nbytes for c in pending.values()),
                        window_chunks=self.window,
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
