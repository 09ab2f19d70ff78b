"""Hop liveness: when is a gateway, a hop, a path of the plan dead?

The dispatcher polls every gateway's status without blocking on any of them (a stopped
process answers nothing, it does not refuse). From those polls this module keeps, per gateway,
when it last answered and when bytes last *arrived* at it (read from the store at a source,
received from upstream at a relay or sink), and per path when a chunk on it last finished.

A path is declared dead when one of its regions has no gateway that answered for
``hop_timeout`` seconds, or when it has chunks outstanding, none of them finished for
``hop_timeout`` and some region on it received no bytes for that long; the dead hop is the one
into the first such region. A refused connection (the process is gone) counts after
``refused_grace`` seconds instead. A gateway dead while its region has live ones is the
dispatcher's to handle (``leave_out``): its region lives on in the others. Stalls are judged
only while no gateway of a live path has been silent for half the hop timeout: a silent
gateway starves its neighbours' other paths (their budget waits for it), so it must be found
dead first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

INBOUND = ("bytes_read", "bytes_received", "bytes_written")


@dataclass
class DeadPath:
    path: int
    hop: tuple[str, str]
    why: str

    def describe(self) -> str:
        return f"hop {self.hop[0]} -> {self.hop[1]} is dead: {self.why}"


class HopWatch:
    """Liveness bookkeeping for one job (all times are ``time.monotonic()`` seconds)."""

    def __init__(
        self,
        routes: Sequence[Sequence[str]],
        gateways: Mapping[str, Sequence[str]],
        hop_timeout: float,
        now: float,
        refused_grace: float = 3.0,
    ) -> None:
        self.routes = [list(r) for r in routes]
        self.by_region = {region: list(gids) for region, gids in gateways.items()}
        self.hop_timeout = hop_timeout
        self.refused_grace = min(refused_grace, hop_timeout)
        self.alive = [True] * len(self.routes)
        gids = [g for gs in self.by_region.values() for g in gs]
        self.last_ok = dict.fromkeys(gids, now)
        self.refused_since: dict[str, float] = {}
        self.last_error: dict[str, str] = {}
        self.moved = dict.fromkeys(gids, now)
        self._inbound = dict.fromkeys(gids, -1)
        self.finished = [now] * len(self.routes)

    # ---- observations ----------------------------------------------------------------------------

    def answered(self, gid: str, counters: Mapping[str, int], now: float) -> None:
        self.last_ok[gid] = now
        self.refused_since.pop(gid, None)
        inbound = sum(int(counters.get(k, 0)) for k in INBOUND)
        if inbound != self._inbound[gid]:
            self._inbound[gid] = inbound
            self.moved[gid] = now

    def unanswered(self, gid: str, why: str, now: float, refused: bool) -> None:
        self.last_error[gid] = why
        if refused:
            self.refused_since.setdefault(gid, now)
        else:
            self.refused_since.pop(gid, None)

    def chunk_finished(self, path: int, now: float) -> None:
        self.finished[path] = now

    def leave_out(self, gid: str) -> None:
        """Judge ``gid``'s region by its other gateways from now on (it died; they carry on)."""
        for gids in self.by_region.values():
            if gid in gids:
                gids.remove(gid)

    def join(self, gateways: Mapping[str, Sequence[str]], paths: Sequence[int], now: float) -> None:
        """Gateways that came up while the job runs (``gateways``: region -> ids) and the
        ``paths`` they complete: judged from ``now`` on, as if they had just answered."""
        for region, gids in gateways.items():
            have = self.by_region.setdefault(region, [])
            for gid in gids:
                if gid not in have:
                    have.append(gid)
                self.last_ok[gid] = self.moved[gid] = now
                self._inbound[gid] = -1
        for p in paths:
            self.alive[p] = True
            self.finished[p] = now

    def grace(self, now: float) -> None:
        """Restart the no-progress clocks (after rerouting, the paths left take on more work;
        gateways that stopped answering stay dead)."""
        self.finished = [now] * len(self.routes)
        self.moved = dict.fromkeys(self.moved, now)

    # ---- verdicts --------------------------------------------------------------------------------

    def gateway_dead(self, gid: str, now: float) -> bool:
        if now - self.last_ok[gid] > self.hop_timeout:
            return True
        since = self.refused_since.get(gid)
        return since is not None and now - since > self.refused_grace

    def _hop_into(self, route: list[str], i: int) -> tuple[str, str]:
        return (route[i - 1], route[i]) if i > 0 else (route[0], route[1])

    def check(self, now: float, outstanding: Mapping[int, int]) -> list[DeadPath]:
        """Paths that died since the last call (each reported once)."""
        dead: list[DeadPath] = []
        for p, route in enumerate(self.routes):
            verdict = self._unresponsive(route, p, now) if self.alive[p] else None
            if verdict is not None:
                self.alive[p] = False
                dead.append(verdict)
        if dead or self._suspect(now):
            # A gateway going silent starves the paths that share its neighbours (their
            # budget waits for it): judge stalls only once it has been dealt with.
            return dead
        for p, route in enumerate(self.routes):
            verdict = self._stalled(route, p, now, outstanding.get(p, 0)) if self.alive[p] else None
            if verdict is not None:
                self.alive[p] = False
                dead.append(verdict)
        return dead

    def _suspect(self, now: float) -> bool:
        """Some gateway of a live path has been silent for half the hop timeout."""
        live = {
            g
            for p, r in enumerate(self.routes)
            if self.alive[p]
            for x in r
            for g in self.by_region.get(x, [])
        }
        return any(now - self.last_ok[g] > self.hop_timeout / 2 for g in live)

    def _unresponsive(self, route: list[str], p: int, now: float) -> DeadPath | None:
        for i, region in enumerate(route):
            gids = self.by_region.get(region, [])
            if gids and all(self.gateway_dead(g, now) for g in gids):
                g = gids[0]
                why = self.last_error.get(g, "no answer")
                silent = now - self.last_ok[g]
                return DeadPath(
                    p,
                    self._hop_into(route, i),
                    f"gateway {', '.join(gids)} in {region} has not answered for "
                    f"{silent:.0f} s ({why})",
                )
        return None

    def _stalled(self, route: list[str], p: int, now: float, outstanding: int) -> DeadPath | None:
        if not outstanding or now - self.finished[p] <= self.hop_timeout:
            return None
        for i, region in enumerate(route):
            gids = self.by_region.get(region, [])
            last = max((self.moved[g] for g in gids), default=now)
            if now - last > self.hop_timeout:
                return DeadPath(
                    p,
                    self._hop_into(route, i),
                    f"no bytes reached {region} for {now - last:.0f} s "
                    f"({outstanding} chunk(s) outstanding on this path)",
                )
        return None
