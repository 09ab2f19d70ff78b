"""Per-edge link records and the rule that turns measurements at several connection counts
into a per-connection rate and a saturation rate.

A ``LinkEstimate`` is what the planner needs about one ordered region pair: the rate one VM
pair reached at ``connections`` flows, and where known the rate of one flow (where flows are
the bottleneck) and the most one VM pair carries at any count. ``None`` means unknown; the
planner then falls back to the paper's linear model (per-conn = gbps / connections,
saturation = gbps), so no plan predicts more than was measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

#: Where a number came from, in the order a user reads them in ``plan`` output.
SOURCES = ("published", "profile", "passive", "model")

#: Measurements of one pair at different counts are combined only if they were taken this
#: close to the newest one (one profiling session); older rows at other counts are stale.
SESSION_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class LinkEstimate:
    """What one ordered region pair carries between one VM at each end."""

    gbps: float  # one VM pair at `connections` connections (the grid figure)
    connections: int  # the connection count `gbps` refers to (64 for published data)
    per_conn_gbps: float | None  # one TCP flow where flows are the bottleneck; None = unknown
    sat_gbps: float | None  # most one VM pair carries with any number of flows; None = unknown
    region_cap_gbps: float | None  # most the region pair carries whatever the VM count
    source: str  # "published" | "profile" | "passive" | "model"
    measured_at: str | None  # ISO-8601 UTC time of the measurement; None for the model

    def scaled_gbps(self, connections: int) -> float:
        """The rate at ``connections`` flows: linear in flows (the paper's model) where the
        per-flow rate is unknown, else min(flows * per-flow rate, saturation)."""
        if self.per_conn_gbps is None:
            return self.gbps * connections / self.connections
        rate = self.per_conn_gbps * connections
        return rate if self.sat_gbps is None else min(rate, self.sat_gbps)

    def with_source(self, source: str) -> LinkEstimate:
        return replace(self, source=source)


@dataclass(frozen=True)
class CountSample:
    """One measurement of a pair: rate, connection count and time (UTC)."""

    gbps: float
    connections: int
    measured_at: datetime
    region_cap_gbps: float | None = None


def combine_counts(
    samples: Iterable[CountSample], *, source: str = "profile", window: timedelta = SESSION_WINDOW
) -> LinkEstimate:
    """Turn one pair's samples into a LinkEstimate (the one documented rule).

    1. Keep the newest sample per connection count, and of those only the ones taken within
       ``window`` of the newest sample overall (one session; older counts are stale).
    2. ``gbps``/``connections``/``measured_at``: the sample at the largest count.
    3. With two or more counts: ``per_conn_gbps`` = the rate at the smallest count divided by
       that count (where flows are fewest they are most likely the bottleneck), ``sat_gbps`` =
       the largest rate measured at any count. With one count both stay None (unknown).
       The profiler's store (``profiler.links``) applies the same rule per profiler run.
    4. ``region_cap_gbps``: the smallest cap any kept sample gives, else None.
    """
    newest: dict[int, CountSample] = {}
    for sample in samples:
        if sample.connections < 1 or sample.gbps < 0:
            raise ValueError(f"bad sample {sample}: connections >= 1 and gbps >= 0 needed")
        have = newest.get(sample.connections)
        if have is None or sample.measured_at >= have.measured_at:
            newest[sample.connections] = sample
    if not newest:
        raise ValueError("combine_counts needs at least one sample")
    latest = max(s.measured_at for s in newest.values())
    kept = sorted(
        (s for s in newest.values() if latest - s.measured_at <= window),
        key=lambda s: s.connections,
    )
    top = kept[-1]
    caps = [s.region_cap_gbps for s in kept if s.region_cap_gbps is not None]
    per_conn = sat = None
    if len(kept) >= 2:
        per_conn = kept[0].gbps / kept[0].connections
        sat = max(s.gbps for s in kept)
    return LinkEstimate(
        gbps=top.gbps,
        connections=top.connections,
        per_conn_gbps=per_conn,
        sat_gbps=sat,
        region_cap_gbps=min(caps) if caps else None,
        source=source,
        measured_at=latest.isoformat(),
    )
