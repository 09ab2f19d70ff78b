"""The bandwidth cap is a bound of the planner like the others (issue 39): the plan predicts no
more than the cap, starts no more VMs than it needs for it, and a floor above it is refused."""

from __future__ import annotations

import pytest

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.sequence.planning import plan


def test_a_capped_plan_predicts_at_most_the_cap_with_fewer_vms() -> None:
    free = plan("aws:us-east-1", "gcp:europe-west4", 500.0, max_vms_per_region=8)
    capped = plan("aws:us-east-1", "gcp:europe-west4", 500.0, max_vms_per_region=8,
                  bwlimit_gbps=1.0)  # fmt: skip
    assert free.predicted_gbps > 1.5
    assert capped.predicted_gbps <= 1.0 + 1e-6
    assert sum(capped.vms.values()) <= sum(free.vms.values())
    fastest = plan("aws:us-east-1", "gcp:europe-west4", 500.0, max_cost_usd=1e6,
                   bwlimit_gbps=2.0)  # fmt: skip
    assert fastest.predicted_gbps <= 2.0 + 1e-6


def test_a_floor_above_the_cap_is_infeasible() -> None:
    with pytest.raises(InfeasibleError):
        plan("aws:us-east-1", "gcp:europe-west4", 50.0, min_throughput_gbps=4.0,
             bwlimit_gbps=1.0)  # fmt: skip
