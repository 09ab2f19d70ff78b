"""The relay pruning's pair loop (unrolled for speed: it was most of a two-region plan's time)
keeps exactly the relays the plain statement of the dominance rule keeps, on the shipped
profile's ~120 relays and on a fleet of near-identical ones."""

from __future__ import annotations

import math

import pytest

from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.problem import Problem, build_problem
from skyplane_ops.planner.prune import prune_dominated_relays
from skyplane_ops.planner.solve import usable_paths
from skyplane_ops.profiles import load_profile


def _reference(
    problem: Problem, paths: list[CandidatePath], t_upper: float
) -> set[tuple[str, ...]]:
    """The relays kept, by the rule as written before the loop was unrolled."""
    src, dst = problem.src, problem.dsts[0]
    relay_paths = [p for p in paths if len(p.regions) == 3]
    rows, slack = [], []
    for path in relay_paths:
        r = path.regions[1]
        spec = problem.regions[r]
        kappa = min(
            spec.ingress_cap_gbps,
            spec.egress_cap_gbps,
            problem.vm_pair_gbps(src, r),
            problem.vm_pair_gbps(r, dst),
        )
        row = (
            path.usd_per_gb,
            problem.conns_per_gbps(src, r),
            problem.conns_per_gbps(r, dst),
            -kappa,
            spec.vm_usd_per_hour,
        )
        rows.append(row)
        plain = all(
            not problem.sat_binds(*e) and not math.isfinite(problem.rates(*e).region_cap_gbps)
            for e in ((src, r), (r, dst))
        )
        slack.append((spec.max_vms - 1) * kappa if plain else 0.0)
    covered = [0.0] * len(rows)
    for i, ri in enumerate(rows):
        for j, rj in enumerate(rows):
            pairs = list(zip(ri, rj, strict=True))
            if (
                slack[i]
                and i != j
                and all(a <= b for a, b in pairs)
                and (i < j or any(a != b for a, b in pairs))
            ):
                covered[j] += slack[i]
    return {
        p.regions
        for p, c in zip(relay_paths, covered, strict=True)
        if c < t_upper * (1 + 1e-9) + 1e-9
    }


@pytest.mark.parametrize(
    ("src", "dst"),
    [("aws:us-east-1", "aws:us-west-2"), ("gcp:us-central1", "azure:westeurope")],
)
@pytest.mark.parametrize("t_upper", [0.5, 5.0, 50.0, 500.0])
def test_pruning_keeps_what_the_rule_keeps(src: str, dst: str, t_upper: float) -> None:
    problem = build_problem(load_profile(), src, dst, 100.0, max_vms=4)
    paths = usable_paths(problem)
    assert sum(len(p.regions) == 3 for p in paths) > 50
    kept = prune_dominated_relays(problem, paths, t_upper)
    assert {p.regions for p in kept if len(p.regions) == 3} == _reference(problem, paths, t_upper)
    if t_upper < 100:
        assert len(kept) < len(paths)  # the rule drops relays here: the comparison has teeth
    assert [p for p in kept if len(p.regions) == 2] == [p for p in paths if len(p.regions) == 2]
