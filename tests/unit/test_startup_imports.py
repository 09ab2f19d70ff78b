"""What the CLI pays before any byte moves: planning on a measured grid store must not import
pandas or pyarrow.dataset (about a second on a loaded machine, counted in every ``cp``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

from skyplane_ops.profiler import GridStore, Measurement

A, B = "aws:us-east-1", "aws:us-west-2"
AT = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _row(src: str, dst: str, gbps: float) -> Measurement:
    return Measurement(
        src=src,
        dst=dst,
        gbps=gbps,
        sent_gbps=gbps,
        received_gbps=gbps,
        rtt_ms=10.0,
        connections=64,
        duration_s=3.0,
        measured_at=AT,
        run_id="r1",
        vm_class="m5.8xlarge",
        tier="",
        backend="test",
    )


def test_planning_on_a_grid_store_imports_neither_pandas_nor_pyarrow_dataset(
    tmp_path: Path,
) -> None:
    store = GridStore(str(tmp_path / "grid"))
    store.append(_row(A, B, 4.0))
    store.append(_row(B, A, 3.0))
    assert store.publish()
    code = textwrap.dedent(
        f"""
        import json, sys
        from skyplane_ops import api
        from skyplane_ops.profiler import GridStore
        rows = GridStore({str(tmp_path / "grid")!r}).read_version()
        plan = api.plan({A!r}, {B!r}, 1.0, grid_store={str(tmp_path / "grid")!r})
        print(json.dumps({{
            "heavy": sorted(m for m in ("pandas", "pyarrow.dataset") if m in sys.modules),
            "at": sorted(r.measured_at.isoformat() for r in rows),
            "gbps": plan.predicted_gbps,
        }}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    seen = json.loads(out.stdout)
    assert seen["heavy"] == []
    # The timestamps still read back aware and exact (they are converted without pandas).
    assert seen["at"] == [AT.isoformat()] * 2
    assert seen["gbps"] > 0
