"""What every ``cp`` pays outside data movement: planning on a measured grid store and recording
the transfer's passive measurements must not import pandas or pyarrow.dataset (about a second each
on a loaded machine), nor must a whole copy (its report's Parquet included), and planning on the
shipped profile not even numpy."""

from __future__ import annotations

import json
import os
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


def test_planning_and_recording_on_a_grid_store_import_neither_pandas_nor_pyarrow_dataset(
    tmp_path: Path,
) -> None:
    store = GridStore(str(tmp_path / "grid"))
    store.append(_row(A, B, 4.0))
    assert store.publish()
    code = textwrap.dedent(
        f"""
        import dataclasses, json, sys
        from skyplane_ops import api
        from skyplane_ops.profiler import GridStore
        store = GridStore({str(tmp_path / "grid")!r})
        first = store.read_version()[0]
        store.append(dataclasses.replace(first, src={B!r}, dst={A!r}, gbps=3.0, measurement_id="2"))
        store.publish()
        rows = store.read_version()
        plan = api.plan({A!r}, {B!r}, 1.0, grid_store={str(tmp_path / "grid")!r})
        print(json.dumps({{
            "heavy": sorted(m for m in ("pandas", "pyarrow.dataset") if m in sys.modules),
            "at": sorted(r.measured_at.isoformat() for r in rows),
            "rows": sorted((r.src, r.dst, r.gbps, r.connections) for r in rows),
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
    assert seen["rows"] == [[A, B, 4.0, 64], [B, A, 3.0, 64]]
    assert seen["gbps"] > 0


def test_planning_on_the_shipped_profile_does_not_import_numpy() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from skyplane_ops import api
        plan = api.plan({A!r}, "aws:eu-west-1", 10.0)
        assert any(len(p.regions) >= 2 for p in plan.paths)
        print(sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert out.stdout.strip() == "[]"


def test_a_whole_copy_and_its_report_do_not_import_pandas(tmp_path: Path) -> None:
    """A real copy on the worker path, report and passive record written: no pandas (its
    import is 0.3-1 s of every run after the bytes have moved)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(5):
        (src / f"{i}.json").write_bytes(b"{}" * (i + 1))
    code = textwrap.dedent(
        f"""
        import sys
        from skyplane_ops import api
        result = api.copy(
            "file://{src}", "file://{tmp_path / "dst"}", src_region={A!r}, dst_region={B!r},
            journal_dir={str(tmp_path / "journal")!r}, planning={{"vms": "none"}},
        )
        assert result.verification["status"] == "passed" and result.objects == 5, result
        print(sorted(m for m in ("pandas", "pyarrow.dataset") if m in sys.modules))
        """
    )
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
    assert list((tmp_path / "home").rglob("objects.parquet"))  # the report was written
