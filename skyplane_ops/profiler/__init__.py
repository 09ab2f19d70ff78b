"""The profiler: measures the throughput grid with gateway probes and keeps it versioned.

``refresh_grid(regions, backend=..., store_uri=...)`` is the one call the CLI, the Airflow DAG
and the Dagster schedule make; ``GridStore`` reads what earlier runs measured.
"""

from skyplane_ops.profiler.budget import CostEstimate, estimate_cost
from skyplane_ops.profiler.durations import format_age, parse_duration
from skyplane_ops.profiler.errors import BudgetExceededError, GridStoreError, ProfilerError
from skyplane_ops.profiler.planner_grid import measured_grid, planner_grid
from skyplane_ops.profiler.records import Measurement
from skyplane_ops.profiler.run import RefreshResult, new_run_id, refresh_grid
from skyplane_ops.profiler.schedule import all_pairs, schedule_rounds
from skyplane_ops.profiler.store import GridStore, PairChange, PairStatus

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
