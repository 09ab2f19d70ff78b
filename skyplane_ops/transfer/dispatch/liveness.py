"""The dispatcher's side of liveness (``liveness.HopWatch`` decides when a hop is dead): status
polls that tell the watch which gateways answer, what a dead hop means for its chunks (they go
along the plan's other paths, or the transfer fails naming the hop), and stopping the job on
the gateways that still answer.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.dispatch.options import DispatchOptions, DispatchStats
from skyplane_ops.transfer.dispatch.submit import Submission
from skyplane_ops.transfer.liveness import DeadPath, HopWatch
from skyplane_ops.transfer.manifest import Chunk

# The dispatcher's logger: its records keep the name they had before this module was split out.
log = logging.getLogger("skyplane_ops.transfer.dispatch")


def _leave_out(client: GatewayClient, *, job_id: str, gid: str) -> dict[str, Any]:
    return client.leave_out(job_id, gid)


class Liveness(Submission):
    """The liveness part of ``Dispatcher``: polls, gateway errors, dead paths (whose chunks
    are submitted again, hence a ``Submission``) and stop."""

    options: DispatchOptions
    _quick: dict[str, GatewayClient]
    _asked: dict[str, float]
    _poll_gap: float
    _started: list[str]
    _watch: HopWatch
    _uploads: Mapping[str, str]

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
            self._quick[gid].status,
            self.job_id,
            cursors.setdefault(gid, 0),  # a gateway that joined the job starts at 0
            self.options.poll_interval,
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
        self._leave_out_dead(watch, pending, stats)
        outstanding: dict[int, int] = {}
        for cid in pending:
            p = self._chunk_path.get(cid)
            if p is not None:
                outstanding[p] = outstanding.get(p, 0) + 1
        for dead in watch.check(time.monotonic(), outstanding):
            self._path_died(dead, pending, stats)

    def _leave_out_dead(
        self, watch: HopWatch, pending: dict[int, Chunk], stats: DispatchStats
    ) -> None:
        """A gateway dead while its region has live ones: the region carries on without it.

        It gets no more chunks or polls, and the pending chunks it may hold go again: at a
        source, those submitted to it; at a relay or sink, every pending chunk of a path
        through its region (which of them it holds is not known; a copy that still lands
        first is taken, the other ignored). The gateways sending to it leave it out once they
        cannot reach it (``OutboundPool``). A region whose gateways are all dead is not this
        method's: ``HopWatch`` declares its paths dead."""
        now = time.monotonic()
        for gid in self.clients:
            if gid in self._left or not watch.gateway_dead(gid, now):
                continue
            region = self._by_id[gid].region
            if not any(
                g != gid and not watch.gateway_dead(g, now) for g in watch.by_region[region]
            ):
                continue
            self._left.add(gid)
            watch.leave_out(gid)
            self._tell_live(f"leaving out {gid}", partial(_leave_out, job_id=self.job_id, gid=gid))
            again = [
                c
                for cid, c in pending.items()
                if (p := self._chunk_path.get(cid)) is not None
                and self._alive[p]
                and region in self.routes[p][0]
                and (region != self.routes[p][0][0] or c.source == gid)
            ]
            why = watch.last_error.get(gid, "no answer")
            stats.dead_hops.append(
                f"gateway {gid} in {region} died ({why}); {len(again)} chunk(s) went to the "
                "region's other gateways"
            )
            log.warning("%s", stats.dead_hops[-1])
            stats.rerouted += len(again)
            watch.grace(now)  # the gateways left take on its share
            if again:
                self._submit(again, self._uploads)

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
        waiting for it is freed for the other paths."""
        self._tell_live(f"dropping path {path}", lambda c: c.drop_path(self.job_id, str(path)))

    def _tell_live(self, what: str, call: Callable[[GatewayClient], Any]) -> None:
        """``call`` every live gateway of the job (best effort, in parallel, one short attempt
        each)."""
        now = time.monotonic()
        live = [
            g for g in self._started if g not in self._left and not self._watch.gateway_dead(g, now)
        ]

        def one(gid: str) -> None:
            try:
                call(self._quick[gid])
            except GatewayError as exc:
                log.debug("%s on %s: %s", what, gid, exc)

        if live:
            with ThreadPoolExecutor(max_workers=len(live)) as pool:
                list(pool.map(one, live))

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
