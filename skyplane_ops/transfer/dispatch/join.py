"""Paths that join a running job: the overlay's, once its gateways are up.

A schedule that wants both the VM-less paths and the overlay (``planner.schedule``) starts
the job on the worker's gateway at once; the overlay's gateways are provisioned meanwhile
(``sequence.joining``). The plan names every path from the start, so path indices, shares
and the job spec's routes never change; a path whose regions have no gateway yet is
*waiting*: it gets no chunk and is not judged by liveness. When ``Arrivals.arrived`` hands
over the overlay's fleet, each waiting path whose regions now all have gateways joins: its
gateways are checked (``health``), leased and started with the job, and from then on
``submit._pick_path`` sends each chunk to whichever live path drains first.

Why chunks of one object may travel on both paths: every multipart upload is created by the
control plane before the move (``commit.prepare_uploads``), each sink writes its parts under
that upload id, and the control plane completes the upload once every part is journaled
(``finish``); a whole (small) object is one segment, written by one sink once. So an
object's parts commit as one object whichever sinks wrote them, and a chunk is journaled
once, when its ``done`` arrives, as on any multi-path plan.

The joined gateways must share the job's secret: the worker's fleet and the overlay's are
provisioned under the same transfer id, whose secret they share (``provision.secrets``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import ExitStack
from typing import Protocol

from gateway_agent.auth import load_secret
from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import TransferError
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.lease import keep_alive
from skyplane_ops.transfer.dispatch.options import DispatchOptions, DispatchStats
from skyplane_ops.transfer.liveness import HopWatch

log = logging.getLogger("skyplane_ops.transfer.dispatch")


class Arrivals(Protocol):
    """Gateways that come up while the job runs."""

    def arrived(self) -> GatewayFleet | None:
        """The fleet, once, when it is up (None before, after, or if it never came up)."""


def waiting_paths(routes: list[tuple[list[str], float]], fleet: GatewayFleet) -> set[int]:
    """The paths with a region that has no gateway in ``fleet`` yet."""
    return {p for p, (route, _) in enumerate(routes) if any(not fleet.in_region(r) for r in route)}


class Joining:
    """The joining part of ``Dispatcher``: waiting paths and the gateways that complete them."""

    fleet: GatewayFleet
    options: DispatchOptions
    job_id: str
    routes: list[tuple[list[str], float]]
    gateways: list[Gateway]
    clients: dict[str, GatewayClient]
    _quick: dict[str, GatewayClient]
    _by_id: dict[str, Gateway]
    _assigned: dict[str, int]
    _alive: list[bool]
    _secret: bytes
    _arrivals: Arrivals | None
    _waiting: set[int]
    _stack: ExitStack | None
    _started: list[str]
    _path_since: dict[int, float]
    window: int
    bwlimit: float | None

    # The Dispatcher's (``JobSpecs``).
    def local_rate_of(self, region: str) -> float | None:
        raise NotImplementedError

    # The Dispatcher's (a path joins as the job's first paths started).
    def _client(self, g: Gateway, *, quick: bool) -> GatewayClient:
        raise NotImplementedError

    def _window(self) -> int:
        raise NotImplementedError

    def _start_jobs_on(self, gateways: list[Gateway]) -> None:
        raise NotImplementedError

    def _join(self, watch: HopWatch, stats: DispatchStats, t0: float) -> None:
        """Join the waiting paths the arrived gateways complete (a no-op until they arrive)."""
        if self._arrivals is None or not self._waiting:
            return
        fleet = self._arrivals.arrived()
        if fleet is None:
            return
        now = time.monotonic()
        try:
            self._join_fleet(fleet, watch)
        except (TransferError, GatewayError, OSError) as exc:
            # The worker path carries on alone: the overlay is an addition, not the transfer.
            log.warning("the overlay's gateways could not join the job: %s", exc)
            stats.dead_hops.append(f"the overlay did not join: {exc}")
            self._waiting.clear()
            return
        joined = sorted(p for p in self._waiting if not waiting_paths([self.routes[p]], self.fleet))
        self._waiting.difference_update(joined)
        for p in joined:
            self._alive[p] = True
            self._path_since[p] = now
            stats.path_joined[p] = round(now - t0, 3)
        watch.join({}, joined, time.monotonic())
        self.window = self._window()
        self._reshare_local()
        log.info("paths %s joined the job after %.1f s", joined, now - t0)

    def _reshare_local(self) -> None:
        """With a cap, the worker's route took all of it while the overlay booted; once paths
        join it paces to its share (``JobSpecs.local_rate_of``), so the sum stays the cap."""
        if not self.bwlimit:
            return
        for gid in list(self._started):
            rate = self.local_rate_of(self._by_id[gid].region)
            if rate is None:  # no one-region route on this gateway
                continue
            try:
                self._quick[gid].set_rates(self.job_id, {"local": rate})
            except (GatewayError, OSError) as exc:
                log.warning("could not send %s its share of the cap: %s", gid, exc)

    def _join_fleet(self, fleet: GatewayFleet, watch: HopWatch) -> None:
        if load_secret(fleet.secret_ref) != self._secret:
            raise TransferError(f"fleet {fleet.transfer_id} does not share the job's secret")
        wanted = {r for p in self._waiting for r in self.routes[p][0]}
        new = [g for g in fleet.gateways if g.region in wanted and g.gateway_id not in self._by_id]
        if not new:
            return
        for g in new:
            self._client(g, quick=False).health()
        before = self.fleet
        self.fleet = _merged(self.fleet, fleet, new)
        self.gateways.extend(new)
        for g in new:
            self.clients[g.gateway_id] = self._client(g, quick=False)
            self._quick[g.gateway_id] = self._client(g, quick=True)
            self._by_id[g.gateway_id] = g
            self._assigned[g.gateway_id] = 0
        try:
            self._start_jobs_on(new)
        except BaseException:
            self._forget(before, new)  # the job goes on as before, without them
            raise
        by_region: dict[str, list[str]] = {}
        for g in new:
            by_region.setdefault(g.region, []).append(g.gateway_id)
        watch.join(by_region, [], time.monotonic())
        if self._stack is not None and (self.options.lease_s is None or self.options.lease_s > 0):
            self._stack.enter_context(
                keep_alive(
                    fleet,
                    self._secret,
                    lease_s=self.options.lease_s,
                    linger_s=self.options.lease_linger_s,
                )
            )

    def _forget(self, fleet: GatewayFleet, gateways: list[Gateway]) -> None:
        """Undo a join that failed half-way: its gateways are stopped (best effort) and
        neither polled nor sent anything (the run deprovisions them at its end)."""
        gone = {g.gateway_id for g in gateways}
        for gid in gone:
            if gid in self._started:
                try:
                    self._quick[gid].stop_job(self.job_id)
                except GatewayError:
                    pass
        self._started[:] = [g for g in self._started if g not in gone]
        self.gateways[:] = [g for g in self.gateways if g.gateway_id not in gone]
        for table in (self.clients, self._quick, self._by_id, self._assigned):
            for gid in gone:
                table.pop(gid, None)
        self.fleet = fleet


def _merged(running: GatewayFleet, arrived: GatewayFleet, new: list[Gateway]) -> GatewayFleet:
    """The job's fleet with ``new`` gateways of ``arrived``; the arrived fleet's backend, so
    its hops are judged as that backend's (the worker's path has no hop)."""
    return dataclasses.replace(arrived, gateways=[*running.gateways, *new])
