"""Typed errors of the profiler; all are user-facing (``SkyplaneOpsError``)."""

from __future__ import annotations

from skyplane_ops.errors import SkyplaneOpsError


class ProfilerError(SkyplaneOpsError):
    """A profiling run could not start or finish (bad arguments, failed probes)."""


class BudgetExceededError(ProfilerError):
    """The estimated egress cost of the run is above the user's budget; nothing was started."""

    def __init__(self, estimate_usd: float, budget_usd: float, pairs: int) -> None:
        self.estimate_usd = estimate_usd
        self.budget_usd = budget_usd
        self.pairs = pairs
        super().__init__(
            f"profiling {pairs} pair(s) would cost about ${estimate_usd:.4f} in egress, "
            f"above the budget of ${budget_usd:.4f}; raise --budget-usd, shorten --duration "
            "or profile fewer regions"
        )


class GridStoreError(ProfilerError):
    """A grid store location is malformed, unreachable, or holds an unreadable grid."""
