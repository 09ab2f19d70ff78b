"""``skyplane-ops cp`` / ``sync`` as a user runs them: planner, local fleet, summary, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset

MiB = 1024 * 1024
REGIONS = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]


def _cli(home: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, bytes]]:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    dst.mkdir()
    data = write_dataset(src, {"big.bin": 3 * MiB, **{f"s/{i}": 2000 for i in range(30)}})
    return src, dst, home, data


def test_cp_then_sync(setup: tuple[Path, Path, Path, dict[str, bytes]]) -> None:
    src, dst, home, data = setup
    proc = _cli(
        home, "cp", f"file://{src}", f"file://{dst}", *REGIONS, "--chunk-mib", "1", "--json"
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["objects"] == 31 and result["verification"]["status"] == "passed"
    assert result["route"] and result["plan_summary"]["src"] == "azure:canadacentral"
    assert '"event": "progress"' in err  # JSON progress lines when stderr is not a terminal
    assert read_tree(dst) == data
    assert agents_of(home) == []  # the fleet was torn down
    (src / "s" / "new").write_bytes(b"fresh")
    proc = _cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--json", "--no-progress")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["objects"] == 1 and result["objects_skipped"] == 31
    assert (dst / "s" / "new").read_bytes() == b"fresh"


def test_cp_missing_source_is_one_line_error(
    setup: tuple[Path, Path, Path, dict[str, bytes]],
) -> None:
    _, dst, home, _ = setup
    proc = _cli(home, "cp", "file:///nonexistent/dir", f"file://{dst}", *REGIONS)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "error:" in err and "/nonexistent/dir" in err and "Traceback" not in err


def test_ctrl_c_deprovisions(setup: tuple[Path, Path, Path, dict[str, bytes]]) -> None:
    src, dst, home, _ = setup
    hooks = json.dumps({"azure:canadacentral": {}, "gcp:asia-northeast1": {"sink_rate_bps": 1e5}})
    proc = _cli(
        home,
        "cp",
        f"file://{src}",
        f"file://{dst}",
        *REGIONS,
        "--chunk-mib",
        "1",
        "--gateway-test-hooks",
        hooks,
        "--no-progress",
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not agents_of(home):
        time.sleep(0.1)
    assert agents_of(home), "the fleet never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert agents_of(home) == []
    assert "big.bin" not in read_tree(dst)


@pytest.mark.sshd
@pytest.mark.slow
def test_cp_through_an_ssh_fleet_from_an_inventory_file(
    setup: tuple[Path, Path, Path, dict[str, bytes]], sshd_factory, tmp_path: Path
) -> None:
    """``cp --backend ssh --backend-options inventory.json``: real sshd hosts, real agents."""
    src, dst, home, data = setup
    servers = sshd_factory(2)
    remote = tmp_path / "remote"
    inventory = {
        "regions": {
            region: [server.inventory_entry(remote)]
            for region, server in zip(REGIONS[1::2], servers, strict=True)
        }
    }
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    proc = _cli(
        home,
        "cp",
        f"file://{src}",
        f"file://{dst}",
        *REGIONS,
        "--max-relays",
        "0",
        "--max-vms",
        "1",
        "--backend",
        "ssh",
        "--backend-options",
        str(path),
        "--json",
        "--no-progress",
    )
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["verification"]["status"] == "passed" and result["objects"] == 31
    assert read_tree(dst) == data
    # The gateways ran from the uploaded bundle under the inventory's remote root, and the
    # fleet's tear-down removed every file it uploaded there.
    assert remote.exists() and list(remote.rglob("*")) == []


def test_backend_options_reach_the_backend_and_bad_ones_are_one_line_errors(
    setup: tuple[Path, Path, Path, dict[str, bytes]], tmp_path: Path
) -> None:
    src, dst, home, _ = setup
    base = ["cp", f"file://{src}", f"file://{dst}", *REGIONS, "--no-progress"]
    # A per-backend TOML file: the local table is used (its interpreter cannot start).
    options = tmp_path / "backends.toml"
    options.write_text('[local]\npython = "/nonexistent/python3"\n[ssh]\ninventory = "x.json"\n')
    bad_json = '{"python": '
    for extra, message in (
        (["--backend-options", str(options)], "/nonexistent/python3"),
        (["--backend-options", bad_json], "backend options are not valid JSON"),
        (["--backend-options", '{"no_such": 1}'], "bad options for backend 'local'"),
        (["--backend", "ssh", "--backend-options", "{}"], "bad options for backend 'ssh'"),
    ):
        proc = _cli(home, *base, *extra)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        assert message in err and "Traceback" not in err, err
    assert agents_of(home) == [] and read_tree(dst) == {}


def test_a_region_outside_the_catalog_fails_before_any_listing(tmp_path: Path) -> None:
    """The source does not even exist: the region is what the one-line error is about."""
    home, dst = tmp_path / "home", tmp_path / "dst"
    for region, hint in (
        ("local", "region ids are provider:region from the catalog, e.g. aws:us-east-1"),
        ("aws:us-east1", "did you mean aws:us-east-1"),
    ):
        bad = ["--src-region", region, "--dst-region", "aws:us-west-2"]
        proc = _cli(home, "cp", "file:///nonexistent/dir", f"file://{dst}", *bad)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and f"unknown region {region!r}; {hint}" in err, err
        assert "nonexistent" not in err and not dst.exists()
