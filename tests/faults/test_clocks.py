"""Sync does not trust clocks alone (issue 35, finding 2): a copy touched into the future, a
source dated in the future, a copy someone else rewrote at the same size. Through the real CLI
with real local gateways on real folders (and once to S3 on moto, where the ETag decides);
after each sync the destination is byte-identical to the source and the source untouched."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops.testing.transfer import read_tree, write_dataset
from tests.faults.engine_helpers import REGIONS, run_cli

Y2036 = 2082758400  # 2036-01-01T00:00:00Z
FILES = {"f1.bin": 4096, "f2.bin": 3000, "a/b/f3.bin": 2048}


def _sync(home: Path, src: Path, dst: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return run_cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, *more)


def _synced(home: Path, src: Path, dst: Path) -> dict[str, Any]:
    """A sync that succeeds, leaving the destination equal to the source; its JSON result."""
    before = read_tree(src)
    proc = _sync(home, src, dst, "--json")
    assert proc.returncode == 0, proc.stderr
    assert read_tree(src) == before, "the source changed"
    assert read_tree(dst) == before, "the destination is not the source"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _rewrite_same_size(path: Path) -> bytes:
    blob = os.urandom(path.stat().st_size)
    path.write_bytes(blob)
    return blob


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    write_dataset(src, FILES)
    dst.mkdir()
    return src, dst, home


def test_source_rewritten_after_the_copy_was_touched_into_the_future(
    trees: tuple[Path, Path, Path],
) -> None:
    """The finding: ``touch -d 2036 DST/f1.bin``, then rewrite ``SRC/f1.bin`` at the same size.
    The copy is newer than the source by its clock; the source is not what was copied."""
    src, dst, home = trees
    assert _synced(home, src, dst)["objects"] == 3
    for key in ("f1.bin", "a/b/f3.bin"):
        os.utime(dst / key, (Y2036, Y2036))
        _rewrite_same_size(src / key)
    result = _synced(home, src, dst)
    assert (result["objects"], result["objects_skipped"]) == (2, 1)
    assert _synced(home, src, dst)["objects"] == 0  # and then it is up to date


def test_source_dated_in_the_future_is_not_copied_again(trees: tuple[Path, Path, Path]) -> None:
    src, dst, home = trees
    os.utime(src / "f1.bin", (Y2036, Y2036))
    os.utime(src / "a/b/f3.bin", (Y2036, Y2036))
    assert _synced(home, src, dst)["objects"] == 3
    inodes = {k: (dst / k).stat().st_ino for k in FILES}
    for _ in range(2):
        result = _synced(home, src, dst)
        assert (result["objects"], result["objects_skipped"]) == (0, 3)
    assert {k: (dst / k).stat().st_ino for k in FILES} == inodes  # nothing rewritten


def test_copy_changed_by_someone_else_is_copied_again_and_the_dry_run_says_why(
    trees: tuple[Path, Path, Path],
) -> None:
    """Someone rewrites the copy at the same size (it is newer than its source by its clock):
    the source is the truth for sync, and the dry run names the reason."""
    src, dst, home = trees
    _synced(home, src, dst)
    _rewrite_same_size(dst / "f2.bin")
    proc = _sync(home, src, dst, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "f2.bin" in ln)
    assert line.startswith("would copy f2.bin") and "destination changed since the last sync" in (
        line
    )
    proc = _sync(home, src, dst, "--dry-run", "--json")
    assert json.loads(proc.stdout)["copy"] == [
        {"key": "f2.bin", "size": 3000, "why": "the destination changed since the last sync"}
    ]
    result = _synced(home, src, dst)
    assert (result["objects"], result["objects_skipped"]) == (1, 2)


def test_first_sync_over_an_existing_copy_records_it(trees: tuple[Path, Path, Path]) -> None:
    """No record (the copy was made by another tool): today's rule (same size, not older)
    skips it, and the pair is recorded, so a later rewrite behind a future-dated copy is
    caught."""
    src, dst, home = trees
    for key, blob in read_tree(src).items():
        (dst / key).parent.mkdir(parents=True, exist_ok=True)
        (dst / key).write_bytes(blob)
    result = _synced(home, src, dst)
    assert (result["objects"], result["objects_skipped"]) == (0, 3)
    os.utime(dst / "f1.bin", (Y2036, Y2036))
    _rewrite_same_size(src / "f1.bin")
    assert _synced(home, src, dst)["objects"] == 1


def test_s3_copy_rewritten_at_the_same_size_is_told_by_its_etag(
    tmp_path: Path, moto_s3: Any
) -> None:
    """To S3 (moto): another tool rewrites an object at the same size after the sync; its
    ``LastModified`` is newer than the source file, so the clocks say "up to date". The
    recorded ETag (an MD5) no longer matches: the object is copied again."""
    src, home = tmp_path / "src", tmp_path / "home"
    data = write_dataset(src, FILES)
    bucket, options = moto_s3.make_bucket("clocks"), json.dumps(moto_s3.options)
    argv = ["sync", f"file://{src}", bucket, *REGIONS, "--dst-options", options, "--json"]
    store = open_store(bucket, moto_s3.options)
    proc = run_cli(home, *argv)
    assert proc.returncode == 0, proc.stderr
    store.write("f2.bin", os.urandom(len(data["f2.bin"])))  # same size, a newer LastModified
    proc = run_cli(home, *argv)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["objects"], result["objects_skipped"]) == (1, 2)
    assert {k: store.read(k) for k in FILES} == data
    assert read_tree(src) == data
    proc = run_cli(home, *argv)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["objects"] == 0
