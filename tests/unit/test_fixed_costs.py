"""The everyday job's fixed costs: how small objects are batched into chunks, and the planner
loaded while the listing waits on the store."""

from __future__ import annotations

from skyplane_ops.profiles import loader
from skyplane_ops.sequence.planning import warm_planning
from skyplane_ops.transfer.manifest import DEFAULT_BATCH_COUNT
from skyplane_ops.transfer.todo import MIN_BATCH_COUNT, MIN_CHUNKS, batch_count_for


def test_a_daily_partition_is_many_small_chunks_and_a_big_job_keeps_full_batches() -> None:
    assert batch_count_for(500) == MIN_BATCH_COUNT  # 63 chunks, not 2
    assert batch_count_for(3) == MIN_BATCH_COUNT
    assert -(-5000 // batch_count_for(5000)) >= MIN_CHUNKS
    assert batch_count_for(100_000) == DEFAULT_BATCH_COUNT  # per-chunk costs stay amortised


def test_warm_planning_fills_the_profile_caches_the_plan_step_reads() -> None:
    loader._default_grid.cache_clear()
    warm_planning().join(timeout=120)
    assert loader._default_grid.cache_info().currsize >= 1
