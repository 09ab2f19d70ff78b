"""Re-sync of an unchanged tree skips the plan and the fleet; one listing serves a whole run.

The CLI cases run the real ``skyplane-ops`` in a subprocess on file:// folders; the engine
cases run real local gateway processes. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import SourceChangedError, run_transfer
from skyplane_ops.transfer.listing import list_request

REGIONS = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]


def _cli(home: Path, *args: str, python: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    cmd = [sys.executable, *python, "-m", "skyplane_ops.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture
def copied(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, object]]:
    """A source copied once by ``cp`` (a real run: plan, gateways); its JSON result."""
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    dst.mkdir()
    write_dataset(src, {f"d/{i}": 1500 for i in range(25)})
    proc = _cli(home, "cp", f"file://{src}", f"file://{dst}", *REGIONS, "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    return src, dst, home, json.loads(proc.stdout)


@pytest.mark.parametrize("verb", [["sync"], ["sync", "--delete"], ["cp", "--sync"]])
def test_unchanged_resync_starts_no_plan_and_no_gateway(
    copied: tuple[Path, Path, Path, dict[str, object]], verb: list[str]
) -> None:
    src, dst, home, first = copied
    before = read_tree(dst)
    proc = _cli(
        home,
        *verb,
        f"file://{src}",
        f"file://{dst}",
        *REGIONS,
        "--json",
        python=("-X", "importtime"),
    )
    assert proc.returncode == 0, proc.stderr
    # Nothing to plan: the planner's heavy libraries are never imported.
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    heavy = {m for m in imported if m.split(".")[0] in {"ortools", "numpy", "pandas", "pyarrow"}}
    assert not heavy, sorted(heavy)[:5]
    result = json.loads(proc.stdout)
    assert set(result) == set(first)  # the same JSON keys as a run that moved data
    assert result["objects"] == 0 and result["objects_skipped"] == 25
    assert result["objects_deleted"] == 0 and result["status"] == "ok"
    assert result["verification"]["status"] == "passed"
    # Only the listing ran: no plan, provision, transfer or teardown phase, on stdout or stderr.
    assert set(result["phases"]) == {"list"}
    assert '"phase": "plan"' not in proc.stderr and '"phase": "provision"' not in proc.stderr
    assert result["plan_summary"]["paths"] == [] and result["route"] == []
    assert read_tree(dst) == before
    assert not list((home / "journal").glob("*.jsonl"))  # removed, as after a clean run


def test_resync_with_work_still_runs_the_fleet_and_the_delete_rules(
    copied: tuple[Path, Path, Path, dict[str, object]],
) -> None:
    src, dst, home, _ = copied
    (dst / "extra").write_bytes(b"only at the destination")
    # --max-delete is still refused before anything is planned or copied.
    proc = _cli(
        home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--delete", "--max-delete", "0"
    )
    assert proc.returncode == 2 and "--max-delete 0" in proc.stderr, proc.stderr
    assert (dst / "extra").exists()
    # Without --delete the extra object is not work: still a no-op.
    proc = _cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--json")
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["phases"]) == {"list"}
    assert (dst / "extra").exists()
    # A deletion to do is work: the normal run (with its fleet) removes it.
    proc = _cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--delete", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["objects_deleted"] == 1 and "provision" in result["phases"]
    assert not (dst / "extra").exists()
    # A changed source object is work too: copied through the fleet.
    (src / "d" / "3").write_bytes(b"new content")
    proc = _cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["objects"] == 1 and result["objects_skipped"] == 24
    assert (dst / "d" / "3").read_bytes() == b"new content"


def _replace_keeping_old_mtime(path: Path) -> bytes:
    """Other bytes of the same size, the mtime put an hour before the old one (a tarball
    extracted over the file): only the ctime moves forward."""
    st = path.stat()
    blob = os.urandom(st.st_size)
    path.write_bytes(blob)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 3600 * 10**9))
    return blob


def test_resync_copies_a_file_replaced_with_its_old_mtime(
    copied: tuple[Path, Path, Path, dict[str, object]],
) -> None:
    """Between two folders (the walk, then the catalog when the walk hands over): the
    replaced file's ctime is newer than its copy, so it is copied, and only it."""
    src, dst, home, _ = copied
    blob = _replace_keeping_old_mtime(src / "d" / "7")
    proc = _cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["objects"], result["objects_skipped"]) == (1, 24)
    assert (dst / "d" / "7").read_bytes() == blob
    assert read_tree(dst) == read_tree(src)


def test_resync_to_s3_copies_a_file_replaced_with_its_old_mtime(
    tmp_path: Path, moto_s3: Any
) -> None:
    """To an object store the copy's time is its upload's (``LastModified``): the replaced
    file's old mtime is older than that, its ctime is not."""
    src, home = tmp_path / "src", tmp_path / "home"
    write_dataset(src, {f"d/{i}": 1500 for i in range(5)})
    bucket, options = moto_s3.make_bucket("replaced"), json.dumps(moto_s3.options)
    argv = ["sync", f"file://{src}", bucket, *REGIONS, "--dst-options", options, "--json"]
    proc = _cli(home, *argv)
    assert proc.returncode == 0, proc.stderr
    blob = _replace_keeping_old_mtime(src / "d" / "2")
    proc = _cli(home, *argv)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["objects"] >= 1
    assert open_store(bucket, moto_s3.options).read("d/2") == blob


def test_resync_keeps_the_overlap_refusal(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_dataset(src, {"a": 10})
    proc = _cli(tmp_path / "home", "sync", f"file://{src}", f"file://{src}/sub", *REGIONS)
    assert proc.returncode == 2 and "error:" in proc.stderr, proc.stderr


def test_engine_copies_from_the_listing_it_is_handed(tmp_path: Path) -> None:
    """A listing handed over is what the run copies: no second source listing."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {"a": 100, "b": 200})
    listing = list_request(f"file://{src}", f"file://{dst}")
    write_dataset(src, {"late": 50})  # appears after the listing: not this run's
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, fleet):
        result = run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=tmp_path / "j",
            listing=listing,
        )
    assert result.objects == 2 and read_tree(dst) == data


def test_handed_listing_keeps_the_versions_it_pinned(tmp_path: Path) -> None:
    """An object rewritten between the listing and the run is reported, never copied."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    write_dataset(src, {"a": 100, "b": 200})
    listing = list_request(f"file://{src}", f"file://{dst}", sync=True)
    (src / "b").write_bytes(b"rewritten, longer than before" * 10)
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, fleet), pytest.raises(SourceChangedError) as info:
        run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=tmp_path / "j",
            sync=True,
            listing=listing,
        )
    assert info.value.result.objects == 1
    assert (dst / "a").exists() and not (dst / "b").exists()


def test_api_copy_sync_with_nothing_to_do_starts_no_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``api.copy(sync=True)`` of an unchanged tree is answered from the listing: the real
    provisioner (counted, not replaced) is not called a second time."""
    from skyplane_ops import api
    from skyplane_ops.sequence import copy_run

    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"a.bin": 3000, **{f"d/{i}": 100 for i in range(5)}})
    started: list[str] = []
    real = copy_run.provision

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append("fleet")
        return real(*args, **kwargs)

    monkeypatch.setattr(copy_run, "provision", counted)  # where the run sequence calls it
    kwargs: dict[str, Any] = {
        "src_region": "aws:us-east-1",
        "dst_region": "aws:us-west-2",
        "sync": True,
        "journal_dir": str(tmp_path / "journal"),
    }
    first = api.copy(f"file://{src}", f"file://{dst}", **kwargs)
    assert first.objects == 6 and started == ["fleet"]
    again = api.copy(f"file://{src}", f"file://{dst}", **kwargs)
    assert (again.objects, again.objects_skipped) == (0, 6)
    assert started == ["fleet"]  # no second fleet
    assert read_tree(dst) == data
