"""Nothing the user owns is deleted or left torn (issue 12, parts 1 and 3, engine side).

Real parts throughout: the real CLI as a subprocess, real local gateway processes on real
sockets, the S3 emulator (moto_server) for object-store prefixes. Each case ends by checking
that nothing was lost: the source is unchanged and every destination object is exactly its old
or its new version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops import api
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import (
    DST,
    RELAY,
    SRC,
    copy_dirs,
    listings_without_versions,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import PartialTransferError, SourceChangedError, run
from skyplane_ops.transfer.progress import Progress
from tests.faults.engine_helpers import (
    REGIONS,
    assert_nothing_lost,
    one_line_error,
    run_cli,
)

MiB = 1024 * 1024


# ---- same place, nested -----------------------------------------------------------------------


def test_cp_onto_itself_is_refused_and_keeps_every_byte(tmp_path: Path) -> None:
    src = tmp_path / "x"
    data = write_dataset(src, {f"f{i}": 1000 for i in range(5)})
    proc = run_cli(tmp_path / "home", "cp", f"file://{src}", f"file://{src}", *REGIONS)
    assert proc.returncode == 2
    assert "are the same place" in one_line_error(proc)
    assert read_tree(src) == data


@pytest.mark.parametrize("layout", ["symlink", "dst-inside", "src-inside", "symlink-inside"])
def test_overlapping_folders_are_refused_before_anything_starts(
    tmp_path: Path, layout: str
) -> None:
    src = tmp_path / "data"
    data = write_dataset(src, {"a": 100, "sub/b": 200})
    if layout == "symlink":
        (tmp_path / "link").symlink_to(src)
        a, b = src, tmp_path / "link"
    elif layout == "dst-inside":
        a, b = src, src / "sub" / "copy"
    elif layout == "src-inside":
        a, b = src / "sub", src
    else:  # a link elsewhere that points into the source
        (tmp_path / "elsewhere").symlink_to(src / "sub")
        a, b = src, tmp_path / "elsewhere" / "copy"
    home = tmp_path / "home"
    proc = run_cli(home, "cp", f"file://{a}", f"file://{b}", *REGIONS)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "same place" in line or "overlap" in line, line
    assert read_tree(src) == data  # nothing written into the source either
    assert not (home / "journal").exists()  # refused before a journal or a fleet existed


def test_sibling_folders_with_a_common_name_prefix_are_not_overlapping(tmp_path: Path) -> None:
    api.TransferRequest.build(f"file://{tmp_path}/data", f"file://{tmp_path}/data2")
    api.TransferRequest.build(f"file://{tmp_path}/data2", f"file://{tmp_path}/data")


def test_object_store_same_and_nested_prefixes_are_refused(moto_s3: Any) -> None:
    uri = moto_s3.make_bucket("overlap-bucket")
    store = open_store(uri, moto_s3.options)
    store.write("data/a", b"A" * 100)
    store.write("data/x/b", b"B" * 100)
    before = {o.key: store.read(o.key) for o in store.list()}
    opts = moto_s3.options
    cases = [
        (uri + "data/", uri + "data"),  # the same prefix, spelled two ways
        (uri + "data/", uri + "data/x/"),  # destination inside the source
        (uri + "data/x", uri + "data/"),  # source inside the destination
        (uri, uri + "data/"),  # the whole bucket contains every prefix
    ]
    for src_uri, dst_uri in cases:
        with pytest.raises(TransferError) as err:
            api.copy(
                src_uri,
                dst_uri,
                src_region=SRC,
                dst_region=DST,
                src_options=opts,
                dst_options=opts,
            )
        assert "same place" in str(err.value) or "overlap" in str(err.value)
        assert "\n" not in str(err.value)
    assert {o.key: store.read(o.key) for o in store.list()} == before
    # A sibling prefix, another bucket or another endpoint is a different place.
    api.TransferRequest.build(uri + "data/", uri + "data2/", src_options=opts, dst_options=opts)
    api.TransferRequest.build(
        uri + "data/", "s3://other-bucket/data/", src_options=opts, dst_options=opts
    )
    api.TransferRequest.build(
        uri + "data/", uri + "data/", src_options=opts, dst_options={"endpoint_url": "http://x:1"}
    )


# ---- a source that changes while it is copied ------------------------------------------------


@pytest.mark.parametrize("versions", [False, True], ids=["unversioned", "versioned"])
def test_rerun_while_the_source_is_rewritten_keeps_the_good_replica(
    dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, versions: bool
) -> None:
    """Run 1 copies v1; run 2 sees the source rewritten after its chunks finished and before
    the commit: the destination keeps v1 (it used to be deleted); run 3 copies v2.

    Listed without versions, only the source's second listing sees the rewrite: run 2 reports
    both objects changed. Listed with versions, every read was pinned to v1 and no listing is
    made again: run 2 lands v1 whole, a correct copy of the source as it was listed."""
    if not versions:
        listings_without_versions(monkeypatch)
    src, dst, _journal = dirs
    v1 = write_dataset(src, {"big.bin": 3 * MiB, "small.txt": 5000, "stable.txt": 300})
    plan = make_plan([SRC, RELAY, DST])
    with local_fleet(plan) as (_, fleet):
        assert copy_dirs(plan, fleet, dirs, part_size=MiB).verified
        assert read_tree(dst) == v1
        rewritten: list[bool] = []

        def rewrite(p: Progress) -> None:
            if p.chunks_total and p.chunks_done == p.chunks_total and not rewritten:
                (src / "small.txt").write_bytes(b"v2" * 4000)  # rewritten, another size
                (src / "big.bin").write_bytes(os.urandom(2 * MiB))
                rewritten.append(True)

        if versions:
            assert copy_dirs(plan, fleet, dirs, part_size=MiB, progress=rewrite).status == "ok"
            assert rewritten
        else:
            with pytest.raises(SourceChangedError) as err:
                copy_dirs(plan, fleet, dirs, part_size=MiB, progress=rewrite)
            assert rewritten and {"big.bin", "small.txt"} <= set(err.value.keys)
            assert err.value.result.status == "partial"
            assert err.value.result.objects_changed == 2
        v2 = read_tree(src)
        assert_nothing_lost(src, v2, dst, v1, v2)
        assert read_tree(dst) == v1  # the good replica, byte for byte
        result = copy_dirs(plan, fleet, dirs, part_size=MiB)
    assert result.verified and result.status == "ok"
    assert read_tree(dst) == v2


def test_object_grown_before_it_was_read_never_lands_as_a_prefix(
    dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source file grows between listing and reading (a rewrite in progress): the read of
    the listed length would be a prefix of the new version; the sink must never write it.

    The rewrite is injected at the step between listing and dispatch (a monkeypatched wrapper
    of the engine's upload preparation); gateways and stores are real.
    """
    src, dst, _journal = dirs
    v1 = write_dataset(src, {"small.txt": 4000, "other.txt": 100})
    plan = make_plan([SRC, DST])
    real_prepare = run.prepare_uploads

    def prepare_then_grow(*args: Any, **kwargs: Any) -> Any:
        (src / "small.txt").write_bytes(b"N" * 9000)
        return real_prepare(*args, **kwargs)

    with local_fleet(plan, hooks=False) as (_, fleet):
        assert copy_dirs(plan, fleet, dirs).verified
        monkeypatch.setattr(run, "prepare_uploads", prepare_then_grow)
        with pytest.raises(SourceChangedError) as err:
            copy_dirs(plan, fleet, dirs)
    assert err.value.keys == ["small.txt"]
    v2 = read_tree(src)
    assert_nothing_lost(src, v2, dst, v1, v2)
    assert read_tree(dst)["small.txt"] == v1["small.txt"]


# ---- one unreadable source entry -------------------------------------------------------------


def test_unreadable_entry_is_partial_and_the_next_run_copies_it(tmp_path: Path) -> None:
    """Through the real CLI, run without root's right to read any file: one file of mode 000."""
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {"ok/a": 3000, "ok/b": 2 * MiB, "secret.bin": 4000})
    (src / "secret.bin").chmod(0o000)
    args = ("cp", f"file://{src}", f"file://{dst}", *REGIONS, "--chunk-mib", "1", "--json")
    proc = run_cli(home, *args, "--no-progress", drop_dac=True)
    assert proc.returncode == 3, proc.stderr  # partial: a distinct, documented status
    result = json.loads(proc.stdout)
    assert result["status"] == "partial" and result["objects_failed"] == 1
    assert result["objects"] == 2 and result["verification"]["status"] == "passed"
    err = proc.stderr
    line = err.strip().splitlines()[-1]  # one line names the object, the side and the cause
    assert line.startswith("skyplane-ops cp: partial: 1 object(s) could not be copied"), err
    assert "'secret.bin': source: reading the source failed" in line and str(src) in line
    assert "permission denied" in line and "destination" not in line  # the source is to blame
    assert read_tree(dst) == {k: v for k, v in data.items() if k != "secret.bin"}
    assert read_tree(src) == data  # (this test process still reads every file)
    (src / "secret.bin").chmod(0o644)
    proc = run_cli(home, *args, "--no-progress", drop_dac=True)
    assert proc.returncode == 0, proc.stderr
    assert read_tree(dst) == data and read_tree(src) == data
    assert json.loads(proc.stdout)["chunks_resumed"] >= 2  # the rest came from the journal


# ---- sync --delete ---------------------------------------------------------------------------


def _sync(home: Path, src: Path, dst: Path, *extra: str) -> Any:
    uris = (f"file://{src}", f"file://{dst}")
    return run_cli(home, "sync", *uris, *REGIONS, "--no-progress", *extra, drop_dac=True)


def test_sync_delete_dry_run_then_guard_then_mirror(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {"keep/a": 100, "keep/b": 200, "new": 50})
    old = write_dataset(dst, {"gone1": 10, "gone2": 20, "logs/x.log": 5}, seed=2)
    (dst / "keep" / "a").parent.mkdir()
    (dst / "keep" / "a").write_bytes(data["keep/a"])  # already up to date
    old["keep/a"] = data["keep/a"]
    # Dry run: lists, changes nothing, starts nothing.
    proc = _sync(home, src, dst, "--delete", "--dry-run", "--exclude", "logs/*")
    assert proc.returncode == 0, proc.stderr
    assert "would delete gone1" in proc.stdout and "would delete gone2" in proc.stdout
    assert "would copy new" in proc.stdout and "logs/x.log" not in proc.stdout
    assert read_tree(dst) == old
    # The guard: 2 deletes > --max-delete 1 refuses everything, before any copy.
    proc = _sync(home, src, dst, "--delete", "--max-delete", "1", "--exclude", "logs/*")
    assert proc.returncode == 2 and "--max-delete 1" in one_line_error(proc)
    assert read_tree(dst) == old
    # The mirror: copies, verifies, then deletes what the source lacks (excluded stays).
    proc = _sync(home, src, dst, "--delete", "--max-delete", "2", "--exclude", "logs/*", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["objects_deleted"] == 2
    assert read_tree(dst) == {**data, "logs/x.log": old["logs/x.log"]}
    assert read_tree(src) == data


def test_sync_delete_never_deletes_after_a_failure(dirs: tuple[Path, Path, Path]) -> None:
    """A source object changes during the copy: the run is partial and deletes nothing."""
    src, dst, _journal = dirs
    data = write_dataset(src, {"a": 2000, "b": 3000})
    old = write_dataset(dst, {"extra1": 10, "extra2": 10}, seed=3)
    plan = make_plan([SRC, DST])
    touched: list[bool] = []

    def rewrite(p: Progress) -> None:
        if p.chunks_total and p.chunks_done == p.chunks_total and not touched:
            (src / "b").write_bytes(b"changed")
            touched.append(True)

    with local_fleet(plan, hooks=False) as (_, fleet), pytest.raises(PartialTransferError) as err:
        copy_dirs(plan, fleet, dirs, sync=True, delete=True, progress=rewrite)
    assert err.value.result.objects_deleted == 0
    now = read_tree(dst)
    assert now["extra1"] == old["extra1"] and now["extra2"] == old["extra2"]
    assert now["a"] == data["a"]


def test_sync_delete_keeps_everything_when_a_source_folder_is_unreadable(tmp_path: Path) -> None:
    """A folder the run cannot list is not "absent from the source": the run is partial, its
    replica at the destination stays, and nothing else is deleted either (real CLI, run
    without root's right to read any file)."""
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {"a": 100, "locked/b": 200, "locked/c": 300})
    old = write_dataset(dst, {"locked/b": 200, "locked/c": 300, "stale": 10}, seed=4)
    (src / "locked").chmod(0o000)
    try:
        proc = _sync(home, src, dst, "--delete", "--json")
        assert proc.returncode == 3, proc.stdout + proc.stderr
        result = json.loads(proc.stdout)
        assert result["status"] == "partial" and result["objects_deleted"] == 0
        assert "'locked/': source: " in proc.stderr and "permission denied" in proc.stderr
        now = read_tree(dst)
        assert {k: now[k] for k in old} == old  # nothing deleted, not even "stale"
        assert now["a"] == data["a"]
    finally:
        (src / "locked").chmod(0o755)
    assert read_tree(src) == data


def test_journal_kept_after_a_partial_run_never_hides_a_missing_replica(
    dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a partial run the journal says 'done' for what was copied; if a replica vanishes
    from the destination before the next run, that run fails verification naming it, forgets
    it, and the run after copies it again. (The partial run: a change after every read, which
    only the second listing of a source listed without versions reports.)"""
    listings_without_versions(monkeypatch)
    src, dst, _journal = dirs
    data = write_dataset(src, {"keep.txt": 700, "moving.txt": 900})
    plan = make_plan([SRC, DST])
    touched: list[bool] = []

    def rewrite(p: Progress) -> None:
        if p.chunks_total and p.chunks_done == p.chunks_total and not touched:
            (src / "moving.txt").write_bytes(b"new version")
            touched.append(True)

    with local_fleet(plan, hooks=False) as (_, fleet):
        with pytest.raises(SourceChangedError):
            copy_dirs(plan, fleet, dirs, progress=rewrite)
        (dst / "keep.txt").unlink()  # someone removes a replica between runs
        with pytest.raises(TransferError) as err:
            copy_dirs(plan, fleet, dirs)
        assert "keep.txt" in str(err.value) and "re-run" in str(err.value)
        result = copy_dirs(plan, fleet, dirs)
    assert result.verified
    assert read_tree(dst) == {**data, "moving.txt": b"new version"} == read_tree(src)
