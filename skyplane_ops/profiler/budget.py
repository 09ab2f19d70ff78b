"""What a profiling run will cost in egress, estimated before anything is provisioned.

A probe from ``src`` to ``dst`` runs for T seconds at (at most) the modelled rate of that pair,
so it moves ``gbps * 1e9 / 8 * T`` bytes, paid at the source's egress price to ``dst``. The
modelled rate is the full per-pair rate (no scaling down for fewer connections), so the
estimate is an upper bound for a healthy path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.profiler.errors import BudgetExceededError

RateFn = Callable[[str, str], float]


@dataclass(frozen=True)
class PairCost:
    src: str
    dst: str
    gbps: float
    gb: float
    usd_per_gb: float
    usd: float


@dataclass(frozen=True)
class CostEstimate:
    """The estimated egress bytes and dollars of the probes of one run."""

    duration_s: float
    pairs: list[PairCost] = field(default_factory=list)

    @property
    def total_gb(self) -> float:
        return sum(p.gb for p in self.pairs)

    @property
    def total_usd(self) -> float:
        return sum(p.usd for p in self.pairs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration_s": self.duration_s,
            "pairs": len(self.pairs),
            "total_gb": round(self.total_gb, 6),
            "total_usd": round(self.total_usd, 6),
        }


def estimate_cost(
    pairs: Iterable[tuple[str, str]], duration_s: float, gbps: RateFn, usd_per_gb: RateFn
) -> CostEstimate:
    """Egress of probing every pair for ``duration_s`` at its modelled rate."""
    costs = []
    for src, dst in pairs:
        rate = max(0.0, float(gbps(src, dst)))
        price = max(0.0, float(usd_per_gb(src, dst)))
        gb = rate / 8.0 * duration_s
        costs.append(PairCost(src, dst, rate, gb, price, gb * price))
    return CostEstimate(duration_s=duration_s, pairs=costs)


def check_budget(estimate: CostEstimate, budget_usd: float | None) -> None:
    """Raise ``BudgetExceededError`` when the estimate is above the budget (None: no limit)."""
    if budget_usd is not None and estimate.total_usd > budget_usd:
        raise BudgetExceededError(estimate.total_usd, budget_usd, len(estimate.pairs))
