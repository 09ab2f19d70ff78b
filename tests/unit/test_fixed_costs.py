"""The everyday job's fixed costs: how small objects are batched into chunks, the planner
loaded while the listing waits on the store, and the finish's modules while the data moves."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from gateway_agent.stores.base import Capabilities, ObjectInfo
from skyplane_ops.profiles import loader
from skyplane_ops.sequence.planning import warm_planning
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.manifest import DEFAULT_BATCH_COUNT
from skyplane_ops.transfer.todo import (
    FIRST_BATCH_COUNT,
    RAMP_CHUNKS,
    batch_limit,
    chunk_totals,
    iter_chunks,
)

MiB = 1024 * 1024


class Listed:
    """A store that only lists (what the catalog reads)."""

    capabilities = Capabilities()

    def __init__(self, infos: list[ObjectInfo]) -> None:
        self.infos = infos

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        yield from self.infos


def test_a_daily_partition_starts_with_small_chunks_and_grows_to_full_batches(
    tmp_path: Path,
) -> None:
    at = datetime(2026, 11, 27, tzinfo=UTC)
    infos = [ObjectInfo(f"part-{i:05d}", 100_000, "e", {}, at, "v") for i in range(500)]
    catalog = Catalog(tmp_path)
    catalog.add_source(Listed(infos), "mem://s/", [], [])  # type: ignore[arg-type]
    caps = Capabilities()
    chunks = list(iter_chunks(catalog, 8 * MiB, caps))
    sizes = [len(c.segments) for c in chunks]
    assert sum(sizes) == 500
    # One small chunk per reader thread first: the first writes start after 8 reads, not ~70.
    assert sizes[:RAMP_CHUNKS] == [FIRST_BATCH_COUNT] * RAMP_CHUNKS
    assert max(sizes) > 4 * FIRST_BATCH_COUNT  # and then batches that amortise a request
    assert len(chunks) < 500 // (2 * FIRST_BATCH_COUNT)
    assert chunk_totals(catalog, 8 * MiB, caps)[0] == len(chunks)
    catalog.close()


def test_the_ramp_reaches_the_full_batch_and_respects_a_smaller_one() -> None:
    assert batch_limit(0, DEFAULT_BATCH_COUNT) == FIRST_BATCH_COUNT
    assert batch_limit(10 * RAMP_CHUNKS, DEFAULT_BATCH_COUNT) == DEFAULT_BATCH_COUNT
    assert batch_limit(0, 3) == 3


def test_warm_planning_fills_the_profile_caches_the_plan_step_reads() -> None:
    loader._default_grid.cache_clear()
    warm_planning().join(timeout=120)
    assert loader._default_grid.cache_info().currsize >= 1


def test_preload_finish_loads_the_report_and_passive_record_modules_in_a_fresh_process() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from skyplane_ops.transfer.preload import preload_finish\n"
        "assert 'pyarrow.parquet' not in sys.modules\n"
        "preload_finish().join(timeout=120)\n"
        "print(sorted(m for m in ('pyarrow.parquet', 'skyplane_ops.profiler.store', 'pandas')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['pyarrow.parquet', 'skyplane_ops.profiler.store']"
