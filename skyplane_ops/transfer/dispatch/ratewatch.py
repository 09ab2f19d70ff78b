"""The bandwidth cap of a running job: each gateway's share per hop, and changes while it runs.

The cap (bytes/s, summed over all paths) is split by the plan: a hop gets the share of the
paths through it, divided among its sending gateways (``hop_rates``); each gateway enforces
its share with a token bucket per next hop (``gateway_agent.ratelimit``). ``RateWatcher``
watches the live file of the transfer (``bwlimit.live_path``) and, when a new cap is written
there, sends every started gateway its hops' new rates (``POST /v1/jobs/ID/rates``).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.bwlimit import format_rate, read_live

log = logging.getLogger(__name__)
POLL_S = 0.2


def hop_rates(
    routes: list[tuple[list[str], float]], fleet: GatewayFleet, region: str, cap: float | None
) -> dict[str, float | None]:
    """{``region>next``: bytes/s} of one gateway in ``region`` under the transfer's ``cap``
    (None: no cap): the cap times the share of the paths through the hop, over the hop's
    sending gateways."""
    shares: dict[str, float] = {}
    for route, share in routes:
        for u, v in itertools.pairwise(route):
            if u == region:
                shares[f"{u}>{v}"] = shares.get(f"{u}>{v}", 0.0) + share
    senders = max(1, len(fleet.in_region(region)))
    return {hop: (cap * s / senders if cap else None) for hop, s in shares.items()}


def tree_hop_rates(
    trees: Sequence[tuple[float, Mapping[str, Any]]],
    fleet: GatewayFleet,
    region: str,
    cap: float | None,
) -> dict[str, float | None]:
    """The same for a multicast job: (share, job tree) pairs, a tree's share of the chunks
    being its share over the sum. A chunk crosses every edge of its tree once, so a hop
    carries the share of the trees that use it, and the cap bounds the bytes read at the root
    (each destination receives at most the cap)."""
    total = sum(share for share, _ in trees) or 1.0
    shares: dict[str, float] = {}
    for share, tree in trees:
        for nxt in (tree.get("next") or {}).get(region, ()):
            hop = f"{region}>{nxt}"
            shares[hop] = shares.get(hop, 0.0) + share / total
    senders = max(1, len(fleet.in_region(region)))
    return {hop: (cap * s / senders if cap else None) for hop, s in shares.items()}


class Capped(Protocol):
    """What the watcher needs of the dispatcher."""

    job_id: str
    fleet: GatewayFleet
    routes: list[tuple[list[str], float]]
    bwlimit: float | None
    _started: list[str]
    _by_id: dict[str, Gateway]

    def local_rate_of(self, region: str) -> float | None: ...


class RateWatcher:
    """``with RateWatcher(dispatcher, clients, path):`` applies new caps written at ``path``."""

    def __init__(
        self, job: Capped, clients: Mapping[str, GatewayClient], path: Path | None
    ) -> None:
        self._job = job
        self._clients = clients
        self._path = path
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: tuple[int, int] | None = None
        self._sent: dict[str, float | None] = {}  # gateway id -> the cap it last took
        self._initial: float | None = job.bwlimit  # what the job specs carry
        self.changes = 0

    def __enter__(self) -> RateWatcher:
        if self._path is not None:
            self._look()  # a cap set before the run started applies from its first byte
            self._initial = self._job.bwlimit
            self._thread = threading.Thread(target=self._loop, name="bwlimit", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self._look()
            self._deliver()

    def _look(self) -> None:
        assert self._path is not None
        try:
            st = self._path.stat()
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return
        self._seen = stamp
        cap = read_live(self._path)
        if cap is not None and cap != self._job.bwlimit:
            log.info("bandwidth cap changed to %s", format_rate(cap))
            self._job.bwlimit = cap
            self.changes += 1

    def _deliver(self) -> None:
        """Every started gateway that has not taken the current cap is sent its rates."""
        job = self._job
        for gateway_id in list(job._started):
            if self._sent.get(gateway_id, self._initial) == job.bwlimit:
                continue
            gateway = job._by_id[gateway_id]
            rates: dict[str, float | None] = dict(
                hop_rates(job.routes, job.fleet, gateway.region, job.bwlimit)
            )
            local = job.local_rate_of(gateway.region)
            if any(route == [gateway.region] for route, _ in job.routes):
                rates["local"] = local  # its one-region route (the worker's): its share
            try:
                if rates:
                    self._clients[gateway_id].set_rates(job.job_id, rates)
            except (GatewayError, OSError) as exc:
                log.warning("could not send the new cap to %s: %s", gateway_id, exc)
                continue
            self._sent[gateway_id] = job.bwlimit
