"""From measurement rows to one link estimate per pair: the freshest trustworthy numbers.

The rule (the planner reads its result through ``planner_grid``):

1. **Active profile.** Of a pair's profiler rows, the newest run counts (its rows at every
   connection count; a newer run replaces an older one as a whole, so counts measured days
   apart are never mixed). From that run: ``gbps``/``connections`` is the rate at the largest
   count; with two or more counts, ``per_conn_gbps`` is the rate at the smallest count divided
   by that count and ``sat_gbps`` the largest rate measured at any count (one count: both
   unknown, so the planner falls back to the paper's linear model). If every row of the newest
   run is a "no link" row, the pair has no link.
2. **Passive rows** (hops of past transfers) newer than that run are applied in time order,
   when trustworthy: at least ``MIN_PASSIVE_BYTES`` moved over at least
   ``MIN_PASSIVE_SECONDS``. The estimate predicts ``p`` at the row's connection count (per-conn
   times count, capped by saturation; linear from ``gbps`` if those are unknown). A hop that
   delivered ``r < UNDER_RATIO * p`` lowers the whole estimate by ``r / p`` (the next plan sees
   the shortfall); one that delivered more than ``p`` raises saturation and ``gbps`` to ``r``
   (the link carries at least that). Shortfalls smaller than that are noise (another hop, the
   stores) and change nothing. A passive row also brings back a pair marked "no link".
3. A pair with only passive rows takes the newest trustworthy one as a single-count figure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from skyplane_ops.profiler.records import SOURCE_PASSIVE, Measurement

Pair = tuple[str, str]

#: A passive row below this is too small to say anything about a WAN link.
MIN_PASSIVE_BYTES = 64 * 1024 * 1024
MIN_PASSIVE_SECONDS = 1.0
#: A path that delivered under this fraction of its prediction is reported and re-planned.
UNDER_RATIO = 0.7


@dataclass(frozen=True)
class MeasuredLink:
    """One pair's estimate; the fields of ``profiles.throughput.LinkEstimate`` (duck-typed)."""

    gbps: float
    connections: int
    per_conn_gbps: float | None
    sat_gbps: float | None
    region_cap_gbps: float | None
    source: str
    measured_at: str | None

    def predict(self, connections: int) -> float:
        """Gbps one VM pair reaches with ``connections`` connections on this link."""
        if self.per_conn_gbps is not None and self.sat_gbps is not None:
            return min(self.per_conn_gbps * connections, self.sat_gbps)
        return self.gbps * connections / max(1, self.connections)

    def scaled(self, factor: float, source: str, when: str) -> MeasuredLink:
        def mul(x: float | None) -> float | None:
            return None if x is None else x * factor

        return replace(
            self,
            gbps=self.gbps * factor,
            per_conn_gbps=mul(self.per_conn_gbps),
            sat_gbps=mul(self.sat_gbps),
            source=source,
            measured_at=when,
        )


def trustworthy(row: Measurement) -> bool:
    """Active rows always are; a passive row must have moved enough data for long enough."""
    if row.source != SOURCE_PASSIVE:
        return True
    return row.bytes_received >= MIN_PASSIVE_BYTES and row.duration_s >= MIN_PASSIVE_SECONDS


def _iso(at: datetime) -> str:
    return at.isoformat()


def _from_run(rows: list[Measurement]) -> MeasuredLink | None:
    """Rule 1 on the rows of one profiler run of one pair (None: no link)."""
    alive = [r for r in rows if not r.no_link and r.gbps > 0]
    if not alive:
        return None
    newest: dict[int, Measurement] = {}
    for row in sorted(alive, key=lambda r: r.measured_at):
        newest[row.connections] = row
    counts = sorted(newest)
    top = newest[counts[-1]]
    when = _iso(max(r.measured_at for r in alive))
    if len(counts) < 2:
        return MeasuredLink(top.gbps, top.connections, None, None, None, "profile", when)
    low = newest[counts[0]]
    return MeasuredLink(
        gbps=top.gbps,
        connections=top.connections,
        per_conn_gbps=low.gbps / low.connections,
        sat_gbps=max(r.gbps for r in newest.values()),
        region_cap_gbps=None,
        source="profile",
        measured_at=when,
    )


def _apply_passive(link: MeasuredLink | None, row: Measurement) -> MeasuredLink:
    """Rule 2 (and 3 when ``link`` is None)."""
    when = _iso(row.measured_at)
    conns = max(1, row.connections)
    if link is None:
        return MeasuredLink(row.gbps, conns, None, None, None, SOURCE_PASSIVE, when)
    predicted = link.predict(conns)
    if predicted <= 0:
        return MeasuredLink(row.gbps, conns, None, None, None, SOURCE_PASSIVE, when)
    if row.gbps < UNDER_RATIO * predicted:
        return link.scaled(row.gbps / predicted, SOURCE_PASSIVE, when)
    if row.gbps > predicted:
        sat = None if link.sat_gbps is None else max(link.sat_gbps, row.gbps)
        gbps = max(link.gbps, row.gbps) if conns >= link.connections else link.gbps
        return replace(link, sat_gbps=sat, gbps=gbps, source=SOURCE_PASSIVE, measured_at=when)
    return link


def link_estimates(rows: Iterable[Measurement]) -> dict[Pair, MeasuredLink | None]:
    """Every pair in ``rows`` -> its estimate by the module's rule (None: no link)."""
    by_pair: dict[Pair, list[Measurement]] = {}
    for row in rows:
        by_pair.setdefault(row.pair, []).append(row)
    out: dict[Pair, MeasuredLink | None] = {}
    for pair, pair_rows in by_pair.items():
        active = [r for r in pair_rows if r.source != SOURCE_PASSIVE]
        link: MeasuredLink | None = None
        since: datetime | None = None
        if active:
            newest = max(active, key=lambda r: r.measured_at)
            run = [r for r in active if r.run_id == newest.run_id] if newest.run_id else [newest]
            link = _from_run(run)
            since = max(r.measured_at for r in run)
        passive = sorted(
            (
                r
                for r in pair_rows
                if r.source == SOURCE_PASSIVE
                and trustworthy(r)
                and (since is None or r.measured_at > since)
            ),
            key=lambda r: r.measured_at,
        )
        for row in passive:
            link = _apply_passive(link, row)
        if link is None and not active and not passive:
            continue  # only untrustworthy passive rows: nothing known
        out[pair] = link
    return out
