"""Both at once: the worker path carries bytes from the start, the overlay's gateways join the
running copy when they are up, and a provisioning the copy outran is cancelled and leaves
nothing. Real CLI processes and real local gateway processes; the VM start-up is the local
backend's emulated ``boot_delay`` and the worker's rate its real cap (``--worker-gbps``), so a
few MiB show what a cloud's minute and gigabytes would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.provision import records
from skyplane_ops.provision.worker import running_agents
from skyplane_ops.sequence import CopyRun
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.testing.kill import kill_when
from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset

MiB = 1024 * 1024
REGIONS = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]
# 3 s of emulated boot; the worker held to 50 Mbit/s (6.25 MB/s): alone it needs ~7 s for
# the 40 MiB object, so the schedule starts the overlay and it has work left when it joins.
BOTH = ["--backend-options", '{"boot_delay": 3}', "--worker-gbps", "0.05", "--chunk-mib", "1"]


def _cli(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wrote(dst: Path) -> bool:
    """Bytes reached the destination: an object, or a staged part of one."""
    return dst.exists() and any(p.is_file() for p in dst.rglob("*"))


def _stop_leftovers(home: Path) -> None:
    """Stop the gateway processes of this test's home (a killed CLI could not)."""
    for pid in agents_of(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _dataset(src: Path) -> dict[str, bytes]:
    # One object of 40 parts (its parts travel on both paths) and a few small ones.
    return write_dataset(src, {"big.bin": 40 * MiB, **{f"small/{i}": 100_000 for i in range(8)}})


def test_the_worker_starts_at_once_and_the_overlay_joins(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = _dataset(src)
    proc = _cli(home, "cp", f"file://{src}", f"file://{dst}", *REGIONS, *BOTH, "--json")
    before_up: bool | None = None
    while proc.poll() is None:
        if before_up is None and _wrote(dst):
            # The first bytes landed: was any overlay gateway up (ready) by then?
            before_up = not any(home.rglob("*.ready"))
        try:
            proc.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            pass
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["verification"]["status"] == "passed" and read_tree(dst) == data
    schedule = result["schedule"]
    assert before_up, "the first bytes landed only after the overlay was up"
    assert schedule["overlay"] == "joined" and schedule["joined_s"] > 0
    # Both carried bytes, and together every byte once (the big object's parts from both
    # paths were committed as the one object compared above).
    assert schedule["worker_bytes"] > 0 and schedule["overlay_bytes"] > 0
    assert schedule["worker_bytes"] + schedule["overlay_bytes"] == sum(map(len, data.values()))
    overlay = [p for p in result["paths"] if p["regions"][0] == "aws:us-east-1"]
    assert overlay and overlay[0]["joined_s"] == schedule["joined_s"]
    # The worker was held to its --worker-gbps (0.05), as the planner assumed.
    (worker,) = [p for p in result["paths"] if p["regions"] == ["worker@aws:us-east-1"]]
    assert worker["achieved_gbps"] <= 0.05 * 1.5
    assert not agents_of(home)  # the overlay was deprovisioned with the run


def test_a_copy_done_before_the_vms_are_up_cancels_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planned for 20 GB (the schedule starts the overlay: the worker alone would need more
    than its 20 s boot), the copy is a few KB and done long before: the provisioning is
    abandoned and whatever it started is gone."""
    home = tmp_path / "home"
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(home))
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {f"{i}": 2000 for i in range(5)})
    request = api.TransferRequest.build(
        f"file://{src}", f"file://{dst}", src_region="aws:us-east-1", dst_region="aws:us-west-2"
    )
    run = CopyRun(
        request, Gateways(backend="local", backend_options={"boot_delay": 20}), volume_gb=20.0
    )
    started = time.monotonic()
    result = run.run()
    assert time.monotonic() - started < 20  # nothing waited for the emulated VMs
    assert result.verification["status"] == "passed" and read_tree(dst) == data
    assert result.schedule["overlay"] == "cancelled" and result.schedule["overlay_bytes"] == 0
    assert not agents_of(home) and running_agents() == 0
    assert records.load_fleets(transfer_id=result.transfer_id) == []


def test_a_killed_run_of_both_resumes(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = _dataset(src)
    argv = ["cp", f"file://{src}", f"file://{dst}", *REGIONS, *BOTH, "--json"]
    proc = _cli(home, *argv)
    try:
        # Killed once the worker has written its first bytes.
        if not kill_when(proc, lambda: _wrote(dst)):
            pytest.skip("the copy finished before it could be killed")
        landed = read_tree(dst)  # nothing torn: what is visible is whole and the source's
        assert all(data[k] == v for k, v in landed.items() if k in data)
        assert set(landed) <= set(data)
        again = _cli(home, *argv)
        out, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        assert read_tree(dst) == data and json.loads(out)["verification"]["status"] == "passed"
    finally:
        _stop_leftovers(home)


def test_with_a_cap_the_worker_takes_all_of_it_until_the_overlay_joins(tmp_path: Path) -> None:
    """``--bwlimit`` in a run of both: while the overlay boots the worker is the only path, so
    it may use the whole cap (here its own 50 Mbit/s is the lower), not the share the plan
    gives it beside the overlay (under half of the 64 Mbit/s cap: ~28 Mbit/s); once paths join
    it paces to that share, and the copy stays whole."""
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = _dataset(src)
    argv = ["cp", f"file://{src}", f"file://{dst}", *REGIONS, *BOTH, "--bwlimit", "8MB", "--json"]
    out, err = _cli(home, *argv).communicate(timeout=300)
    result = json.loads(out)
    assert result["verification"]["status"] == "passed", err
    assert read_tree(dst) == data
    schedule = result["schedule"]
    assert schedule["overlay"] == "joined" and schedule["joined_s"] > 1
    (worker,) = [p for p in result["paths"] if p["regions"] == ["worker@aws:us-east-1"]]
    assert worker["share"] < 0.5  # its share of the cap once the overlay is in: < 32 Mbit/s
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    before = [
        e["path_gbps"]["worker@aws:us-east-1"]
        for e in events
        if e.get("event") == "progress"
        and 0.9 <= e["elapsed_s"] < schedule["joined_s"] - 0.3
        and "worker@aws:us-east-1" in e["path_gbps"]
    ]
    assert before, "no progress before the join"
    assert before[-1] >= 0.8 * 0.05, before  # the worker's own rate, not its share of the cap
    assert schedule["overlay_bytes"] > 0
    assert not agents_of(home)
