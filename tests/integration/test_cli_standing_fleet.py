"""A pipeline of CLI steps on one fleet: ``provision --output``, ``cp``/``sync --fleet``
(several runs, the fleet left running), ``deprovision --fleet``. Real local gateway agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset

SRC_REGION, DST_REGION = "aws:us-east-1", "aws:us-west-2"
REGIONS = ["--src-region", SRC_REGION, "--dst-region", DST_REGION]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_runs_on_a_provisioned_fleet_leave_it_running_until_deprovision(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {"a.bin": 300_000, **{f"p/{i}": 1000 + i for i in range(20)}})
    fleet_file = tmp_path / "fleet.json"
    vms = ["--vms", f"{SRC_REGION}=1", "--vms", f"{DST_REGION}=1"]
    done = _cli(home, "provision", *vms, "--output", str(fleet_file))
    assert done.returncode == 0, done.stderr
    agents = sorted(agents_of(home))
    assert len(agents) == 2
    try:
        copy = ["cp", f"file://{src}", f"file://{dst}", *REGIONS, "--fleet", str(fleet_file)]
        done = _cli(home, *copy, "--json", "--no-progress")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["verification"]["status"] == "passed" and result["objects"] == 21
        # No gateway was started or stopped by the run: the fleet's own, still running.
        assert "provision" not in result["phases"] and "teardown" not in result["phases"]
        assert read_tree(dst) == data and sorted(agents_of(home)) == agents

        (src / "p" / "0").write_bytes(b"changed")
        sync = ["sync", f"file://{src}", f"file://{dst}", *REGIONS, "--fleet", str(fleet_file)]
        done = _cli(home, *sync, "--json", "--no-progress")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["objects"] == 1 and result["objects_skipped"] == 20
        assert (dst / "p" / "0").read_bytes() == b"changed"
        assert sorted(agents_of(home)) == agents

        # The plan stays in the fleet: a region it has no gateway in fails before any byte.
        other = tmp_path / "other"
        elsewhere = ["--src-region", SRC_REGION, "--dst-region", "aws:eu-west-1"]
        done = _cli(home, "cp", f"file://{src}", f"file://{other}", *elsewhere,
                    "--fleet", str(fleet_file))  # fmt: skip
        assert done.returncode == 2
        assert "aws:eu-west-1 has no host in the local fleet" in done.stderr
        assert not other.exists()
        # --backend must agree with the fleet's.
        done = _cli(home, *copy, "--backend", "ssh")
        assert done.returncode == 2 and "does not match --fleet, a local fleet" in done.stderr
        assert sorted(agents_of(home)) == agents
    finally:
        done = _cli(home, "deprovision", "--fleet", str(fleet_file))
    assert done.returncode == 0, done.stderr
    assert agents_of(home) == []
    # A deprovisioned fleet: one clear line, the copy left as it was.
    done = _cli(home, *copy, "--no-progress")
    assert done.returncode == 2 and "deprovisioned already?" in done.stderr, done.stderr
    assert read_tree(dst) == {**data, "p/0": b"changed"}


def test_a_fleet_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    home, dst = tmp_path / "home", tmp_path / "dst"
    (tmp_path / "src").mkdir()
    (tmp_path / "fleet.json").write_text("{not json")
    for fleet in (tmp_path / "missing.json", tmp_path / "fleet.json"):
        done = _cli(home, "cp", str(tmp_path / "src"), str(dst), *REGIONS, "--fleet", str(fleet))
        assert done.returncode == 2 and f"cannot read fleet {fleet}" in done.stderr
        assert "Traceback" not in done.stderr and not dst.exists()
    assert agents_of(home) == []
