"""The overlay planner: a pure function from a ``Problem`` to a ``TransferPlan`` (OR-Tools).

``build_problem(profile, src, dsts, volume_gb, ...)`` derives the problem from a profile;
``plan_transfer(problem)`` solves it (modes, LP rounding, baselines, frontier); the text
forms in ``plan`` and the pictures in ``render``/``route`` show it (as text and bytes: the
planner writes no files). See ``formulation`` for the model and its derivation.

Names are loaded on first use: importing ``TransferPlan`` (as every Airflow DAG file that uses
the operators does at parse time) must not pay for importing OR-Tools and NumPy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "plan_transfer": "api",
    "direct_plan": "baselines",
    "ron_plan": "baselines",
    "FrontierPoint": "frontier",
    "pareto_frontier": "frontier",
    "Hop": "plan",
    "PlanPath": "plan",
    "TransferPlan": "plan",
    "InvalidProblemError": "problem",
    "Problem": "problem",
    "RegionSpec": "problem",
    "build_problem": "problem",
    "deadline_to_floor": "problem",
    "frontier_image": "render",
    "render_mermaid": "plan",
    "render_text": "plan",
    "max_throughput_gbps": "solve",
    "solve_lp_plan": "solve",
    "solve_plan": "solve",
}

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
    "frontier_image",
    "max_throughput_gbps",
    "pareto_frontier",
    "plan_transfer",
    "render_mermaid",
    "render_text",
    "ron_plan",
    "solve_lp_plan",
    "solve_plan",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


if TYPE_CHECKING:
    from skyplane_ops.planner.api import plan_transfer
    from skyplane_ops.planner.baselines import direct_plan, ron_plan
    from skyplane_ops.planner.frontier import FrontierPoint, pareto_frontier
    from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan, render_mermaid, render_text
    from skyplane_ops.planner.problem import (
        InvalidProblemError,
        Problem,
        RegionSpec,
        build_problem,
        deadline_to_floor,
    )
    from skyplane_ops.planner.render import frontier_image
    from skyplane_ops.planner.solve import max_throughput_gbps, solve_lp_plan, solve_plan
