"""From measurement rows to one link estimate per pair: the freshest trustworthy numbers.

The rule (the planner reads its result through ``planner_grid``):

1. **Active profile.** Of a pair's profiler rows, the newest run counts (its rows at every
   connection count; a newer run replaces an older one as a whole, so counts measured days
   apart are never mixed). That run's rows go through ``profiles.links.combine_counts``:
   ``gbps``/``connections`` is the rate at the largest count; with two or more counts,
   ``per_conn_gbps`` is the rate at the smallest count divided by that count and ``sat_gbps``
   the largest rate measured at any count (one count: both unknown, so the planner falls back
   to the paper's linear model). If every row of the newest run is a "no link" row, the pair
   has no link.
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
from dataclasses import replace
from datetime import datetime, timedelta

from skyplane_ops.profiler.records import SOURCE_PASSIVE, Measurement
from skyplane_ops.profiles.links import CountSample, LinkEstimate, combine_counts

Pair = tuple[str, str]

#: A passive row below this is too small to say anything about a WAN link.
MIN_PASSIVE_BYTES = 64 * 1024 * 1024
MIN_PASSIVE_SECONDS = 1.0
#: A path that delivered under this fraction of its prediction is reported and re-planned.
UNDER_RATIO = 0.7


def _scaled(link: LinkEstimate, factor: float, when: str) -> LinkEstimate:
    """``link`` with every rate multiplied by ``factor``, as a passive figure of ``when``."""

    def mul(x: float | None) -> float | None:
        return None if x is None else x * factor

    return replace(
        link,
        gbps=link.gbps * factor,
        per_conn_gbps=mul(link.per_conn_gbps),
        sat_gbps=mul(link.sat_gbps),
        source=SOURCE_PASSIVE,
        measured_at=when,
    )


def trustworthy(row: Measurement) -> bool:
    """Active rows always are; a passive row must have moved enough data for long enough."""
    if row.source != SOURCE_PASSIVE:
        return True
    return row.bytes_received >= MIN_PASSIVE_BYTES and row.duration_s >= MIN_PASSIVE_SECONDS


def _iso(at: datetime) -> str:
    return at.isoformat()


def _from_run(rows: list[Measurement]) -> LinkEstimate | None:
    """Rule 1 on the rows of one profiler run of one pair (None: no link), by the profiles'
    one rule for several connection counts (``profiles.links.combine_counts``)."""
    alive = [r for r in rows if not r.no_link and r.gbps > 0 and r.connections > 0]
    if not alive:
        return None
    samples = [CountSample(r.gbps, r.connections, r.measured_at) for r in alive]
    return combine_counts(samples, source="profile", window=timedelta.max)


def _apply_passive(link: LinkEstimate | None, row: Measurement) -> LinkEstimate:
    """Rule 2 (and 3 when ``link`` is None)."""
    when = _iso(row.measured_at)
    conns = max(1, row.connections)
    alone = LinkEstimate(row.gbps, conns, None, None, None, SOURCE_PASSIVE, when)
    if link is None:
        return alone
    predicted = link.scaled_gbps(conns)
    if predicted <= 0:
        return alone
    if row.gbps < UNDER_RATIO * predicted:
        return _scaled(link, row.gbps / predicted, when)
    if row.gbps > predicted:
        sat = None if link.sat_gbps is None else max(link.sat_gbps, row.gbps)
        gbps = max(link.gbps, row.gbps) if conns >= link.connections else link.gbps
        return replace(link, sat_gbps=sat, gbps=gbps, source=SOURCE_PASSIVE, measured_at=when)
    return link


def link_estimates(rows: Iterable[Measurement]) -> dict[Pair, LinkEstimate | None]:
    """Every pair in ``rows`` -> its estimate by the module's rule (None: no link)."""
    by_pair: dict[Pair, list[Measurement]] = {}
    for row in rows:
        by_pair.setdefault(row.pair, []).append(row)
    out: dict[Pair, LinkEstimate | None] = {}
    for pair, pair_rows in by_pair.items():
        active = [r for r in pair_rows if r.source != SOURCE_PASSIVE]
        link: LinkEstimate | None = None
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
