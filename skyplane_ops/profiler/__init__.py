"""The profiler: measures the throughput grid with gateway probes and keeps it versioned.

``refresh_grid(regions, backend=..., store_uri=...)`` is the one call the CLI, the Airflow DAG
and the Dagster schedule make; ``GridStore`` reads what earlier runs measured.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Eager: the function ``planner_grid`` must shadow the submodule of the same name.
from skyplane_ops.profiler.planner_grid import measured_grid, planner_grid

if TYPE_CHECKING:
    from skyplane_ops.profiler.budget import CostEstimate, estimate_cost
    from skyplane_ops.profiler.durations import format_age, parse_duration
    from skyplane_ops.profiler.errors import BudgetExceededError, GridStoreError, ProfilerError
    from skyplane_ops.profiler.records import Measurement
    from skyplane_ops.profiler.run import RefreshResult, new_run_id, refresh_grid
    from skyplane_ops.profiler.schedule import all_pairs, schedule_rounds
    from skyplane_ops.profiler.store import GridStore, PairChange, PairStatus

# name -> submodule, imported on first use (PEP 562): every transfer imports
# ``profiler.passive``, which must not pay for the grid store's pyarrow (~0.3 s).
_LAZY = {
    "CostEstimate": "budget",
    "estimate_cost": "budget",
    "format_age": "durations",
    "parse_duration": "durations",
    "BudgetExceededError": "errors",
    "GridStoreError": "errors",
    "ProfilerError": "errors",
    "Measurement": "records",
    "RefreshResult": "run",
    "new_run_id": "run",
    "refresh_grid": "run",
    "all_pairs": "schedule",
    "schedule_rounds": "schedule",
    "GridStore": "store",
    "PairChange": "store",
    "PairStatus": "store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BudgetExceededError",
    "CostEstimate",
    "GridStore",
    "GridStoreError",
    "Measurement",
    "PairChange",
    "PairStatus",
    "ProfilerError",
    "RefreshResult",
    "all_pairs",
    "estimate_cost",
    "format_age",
    "measured_grid",
    "new_run_id",
    "parse_duration",
    "planner_grid",
    "refresh_grid",
    "schedule_rounds",
]
