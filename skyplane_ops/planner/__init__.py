"""The overlay planner: a pure function from a ``Problem`` to a ``TransferPlan`` (OR-Tools).

``build_problem(profile, src, dsts, volume_gb, ...)`` derives the problem from a profile;
``plan_transfer(problem)`` solves it (modes, LP rounding, baselines, frontier); the
renderers in ``render`` show it. See ``formulation`` for the model and its derivation.
"""

from skyplane_ops.planner.api import plan_transfer
from skyplane_ops.planner.baselines import direct_plan, ron_plan
from skyplane_ops.planner.frontier import FrontierPoint, pareto_frontier
from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.planner.problem import (
    InvalidProblemError,
    Problem,
    RegionSpec,
    build_problem,
    deadline_to_floor,
)
from skyplane_ops.planner.render import plot_frontier, render_mermaid, render_text
from skyplane_ops.planner.solve import max_throughput_gbps, solve_lp_plan, solve_plan

__all__ = [
    "FrontierPoint",
    "Hop",
    "InvalidProblemError",
    "PlanPath",
    "Problem",
    "RegionSpec",
    "TransferPlan",
    "build_problem",
    "deadline_to_floor",
    "direct_plan",
    "max_throughput_gbps",
    "pareto_frontier",
    "plan_transfer",
    "plot_frontier",
    "render_mermaid",
    "render_text",
    "ron_plan",
    "solve_lp_plan",
    "solve_plan",
]
