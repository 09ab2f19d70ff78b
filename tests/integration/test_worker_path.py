"""The worker path: a copy the plan's schedule gives to the machine running the job starts no
gateway process and no VM, checks every chunk as every path does, and loses nothing when the
run is killed (the journal resumes it). Real CLI processes, real local stores; the VM start-up
is the local backend's emulated ``boot_delay`` (a cloud's ~60 s cannot run here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.provision.worker import running_agents
from skyplane_ops.sequence import CopyRun
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.testing.kill import kill_when
from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset
from skyplane_ops.transfer.todo import FIRST_BATCH_COUNT

MiB = 1024 * 1024
REGIONS = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]
BOOTING = ["--backend-options", '{"boot_delay": 30}']


def _cli(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _events(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_a_daily_partition_starts_no_gateway_and_waits_for_no_vm(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {f"part/{i}.json": 1000 + i for i in range(50)})
    proc = _cli(home, "cp", f"file://{src}", f"file://{dst}", *REGIONS, *BOOTING, "--json")
    seen: set[int] = set()
    while proc.poll() is None:  # every gateway process the run would start is seen here
        seen.update(agents_of(home))
        try:
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert not seen  # no gateway process at any time
    result = json.loads(out)
    assert result["verification"]["status"] == "passed" and result["objects"] == 50
    assert read_tree(dst) == data
    # Small first batches: the first objects are written while later ones are read (one chunk
    # of all 50 would read every object before writing any).
    assert result["chunks"] >= 50 // FIRST_BATCH_COUNT
    done = {e["phase"]: e for e in _events(err) if e.get("state") == "done"}
    # Done long before one emulated VM (30 s) could be up: nothing waited for it.
    assert sum(float(e["seconds"]) for e in done.values()) < 30  # type: ignore[arg-type]


def test_vms_only_starts_the_overlays_gateways(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {f"{i}": 500 for i in range(5)})
    run = CopyRun(
        api.TransferRequest.build(
            f"file://{src}", f"file://{dst}", src_region="aws:us-east-1",
            dst_region="aws:us-west-2", planning={"vms": "only"},
        ),
        Gateways(backend="local"),
    )  # fmt: skip
    result = run.run()
    assert result.verification["status"] == "passed" and read_tree(dst) == data
    assert run.plan is not None and not run.on_worker and len(run.plan.paths[0].regions) == 2


def test_the_worker_run_leaves_no_agent_and_no_secret(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {f"{i}": 700 for i in range(5)})
    request = api.TransferRequest.build(
        f"file://{src}", f"file://{dst}", src_region="aws:us-east-1", dst_region="aws:us-west-2"
    )
    run = CopyRun(request, Gateways(backend="local", backend_options={"boot_delay": 30}))
    fleets: list[api.GatewayFleet] = []
    run.events.provisioned = fleets.append  # type: ignore[method-assign]
    assert run.run().verification["status"] == "passed" and read_tree(dst) == data
    assert run.on_worker and [f.backend for f in fleets] == ["worker"]
    assert running_agents() == 0 and not Path(fleets[0].secret_ref).exists()


def test_a_killed_worker_run_tears_nothing_and_resumes(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {f"{i:02d}.bin": 8 * MiB for i in range(48)})
    argv = ["cp", f"file://{src}", f"file://{dst}", *REGIONS, *BOOTING, "--chunk-mib", "1"]
    proc = _cli(home, *argv, "--json")
    assert proc.stderr is not None
    for line in proc.stderr:  # the move has started ...
        if '"phase": "transfer", "state": "started"' in line:
            break
    # ... and written its first bytes: killed mid-copy.
    if not kill_when(proc, lambda: dst.exists() and any(p.is_file() for p in dst.rglob("*"))):
        pytest.skip("the copy finished before it could be killed (an unloaded, fast machine)")
    # Nothing torn: every object the user sees is whole and equal to its source.
    landed = read_tree(dst) if dst.exists() else {}
    assert all(data[k] == v for k, v in landed.items() if k in data)
    assert set(landed) <= set(data)
    again = _cli(home, *argv, "--json")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert read_tree(dst) == data and json.loads(out)["verification"]["status"] == "passed"


def test_airflows_deferrable_copy_runs_a_worker_plan_inline(tmp_path: Path) -> None:
    """Seconds of work on the worker: the deferrable copy operator's steps run it in the task
    (no fleet handed to a driver, no trigger round trip); a plan with VMs still hands over."""
    pytest.importorskip("airflow")
    from types import SimpleNamespace

    from skyplane_ops.airflow.operators.copy import SkyplaneCopyOperator

    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {f"{i}": 900 for i in range(5)})
    saved: list[str] = []
    state = SimpleNamespace(save_secret=saved.append)
    job = SimpleNamespace(env={})

    def run_for(vms: str) -> CopyRun:
        request = api.TransferRequest.build(
            f"file://{src}", f"file://{dst}", src_region="aws:us-east-1",
            dst_region="aws:us-west-2", planning={"vms": vms},
        )  # fmt: skip
        return CopyRun(request, Gateways(backend="local", backend_options={"boot_delay": 0.5}))

    run = run_for("auto")
    result = SkyplaneCopyOperator._start_deferred(None, run, job, state)  # type: ignore[arg-type]
    assert result is not None and result.verification["status"] == "passed"
    assert read_tree(dst) == data and saved == [] and run.fleet is None
    assert running_agents() == 0
    run = run_for("only")
    assert SkyplaneCopyOperator._start_deferred(None, run, job, state) is None  # type: ignore[arg-type]
    assert run.fleet is not None and saved == [run.fleet.secret_ref]  # the driver's to run
    api.deprovision(run.fleet)


def test_no_vms_on_the_local_backend_starts_no_gateway_even_early(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {f"{i}": 800 for i in range(20)})
    proc = _cli(home, "cp", f"file://{src}", f"file://{dst}", *REGIONS, "--no-vms", "--json")
    seen: set[int] = set()
    while proc.poll() is None:
        seen.update(agents_of(home))
        try:
            proc.wait(timeout=0.02)
        except subprocess.TimeoutExpired:
            pass
    _out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert not seen and read_tree(dst) == data
