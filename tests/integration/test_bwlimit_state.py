"""``bwlimit`` through the state store (issue 39): a run on one "host" follows a cap changed
from another "host" that shares only the state store (S3 on moto) with it.

The run is the Airflow deferred driver (``airflow.driver``), a real detached process with its
own ``SKYPLANE_OPS_HOME``, moving real bytes through real gateway processes; the change comes
from ``skyplane-ops bwlimit ID RATE --state-store URI`` in another process with another home.
The rate is the slope of the driver's progress samples (its own clock) as it publishes them in
the state store with its heartbeat, away from the start, the change and the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops import api
from skyplane_ops.airflow.driver import start_driver, stop_driver
from skyplane_ops.testing.emulators import Emulator
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan, read_tree, write_dataset
from skyplane_ops.transfer.bwlimit import live_path, read_live

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

MiB = 1 << 20


def _slope(points: list[tuple[float, int]], lo: float, hi: float) -> float:
    """Bytes/s between the first samples at or past ``lo`` and ``hi`` bytes (the last sample
    when none reached ``hi``: under load the driver's heartbeats are further apart than the
    last few percent take, and the run may end between two of them)."""
    t0, b0 = next(p for p in points if p[1] >= lo)
    t1, b1 = next((p for p in points if p[1] >= hi), points[-1])
    assert t1 > t0 and b1 - b0 >= 0.5 * (hi - lo), (lo, hi, points)
    return (b1 - b0) / (t1 - t0)


def _home(tmp_path: Path, name: str) -> dict[str, str]:
    home = tmp_path / name
    home.mkdir()
    return {"HOME": str(home), "SKYPLANE_OPS_HOME": str(home / ".skyplane-ops")}


def test_a_cap_changed_through_the_state_store_reaches_a_driver_on_another_host(
    tmp_path: Path, moto_s3: Emulator
) -> None:
    state_uri = moto_s3.make_bucket(f"state{uuid.uuid4().hex[:8]}")
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {f"f{i:02d}": 4 * MiB for i in range(24)})  # 1 MiB parts
    total = sum(map(len, data.values()))
    tid = f"bws-{uuid.uuid4().hex[:8]}"
    state = api.TransferState(state_uri, tid, moto_s3.options)
    host_b, host_c = _home(tmp_path, "B"), _home(tmp_path, "C")
    plan = make_plan([SRC, DST])
    points: list[tuple[float, int]] = []  # the driver's (elapsed s, bytes done) in the store
    final: dict[str, Any] = {}
    changed_at: int | None = None
    with local_fleet(plan) as (_, fleet):
        request = api.TransferRequest.build(
            f"file://{src}/", f"file://{dst}/", journal_dir=str(tmp_path / "B" / "journal"),
            transfer_id=tid, part_size=MiB, bwlimit="4MiB",
        )  # fmt: skip
        handle = start_driver(
            request=request, plan=plan.to_dict(), fleet=fleet.to_dict(), env=host_b,
            work_dir=str(tmp_path / "B" / "work"), state_uri=state_uri,
            state_options=moto_s3.options, heartbeat_s=0.2,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                status = state.read_status() or {}
                progress = status.get("progress") or {}
                done = int(progress.get("bytes_done") or 0)
                if progress and (not points or points[-1][0] != progress["elapsed_s"]):
                    points.append((float(progress["elapsed_s"]), done))
                if status.get("state") in ("success", "failed", "cancelled"):
                    final = status
                    break
                if changed_at is None and done >= 0.35 * total:
                    changed_at = done
                    cli = subprocess.run(
                        [sys.executable, "-m", "skyplane_ops.cli", "bwlimit", tid, "12MiB",
                         "--state-store", state_uri, "--state-options",
                         json.dumps(moto_s3.options)],
                        env={**os.environ, **host_c}, capture_output=True, text=True,
                        timeout=120,
                    )  # fmt: skip
                    assert cli.returncode == 0, cli.stderr
                    assert "12.6 MB/s" in cli.stdout, cli.stdout
                time.sleep(0.05)  # a poll interval of the store, not a wait for an outcome
        finally:
            stop_driver(handle.pid)
    log = Path(handle.log_path).read_text()
    assert final.get("state") == "success", (final, log[-3000:])
    assert read_tree(dst) == data
    assert changed_at is not None
    before = [p for p in points if p[1] <= changed_at]
    after = [p for p in points if p[1] > changed_at]
    first = _slope(before, 0.05 * total, 0.9 * changed_at)
    second = _slope(after, changed_at + 0.2 * (total - changed_at), 0.97 * total)
    assert abs(first - 4 * MiB) <= 0.1 * 4 * MiB, first / MiB
    assert abs(second - 12 * MiB) <= 0.1 * 12 * MiB, second / MiB
    # C's home holds nothing: the change went through the store only, to B's live file.
    assert not (Path(host_c["SKYPLANE_OPS_HOME"]) / "bwlimit").exists()
    assert read_live(live_path(tid, Path(host_b["SKYPLANE_OPS_HOME"]))) == 12 * MiB
