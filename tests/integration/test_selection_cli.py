"""``skyplane-ops cp`` with the selection and overwrite options, as a user runs it (issue 39)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset

REGIONS = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]


def _cli(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def test_files_from_stdin_with_ignore_existing_copies_only_the_named_missing_keys(
    tmp_path: Path,
) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {f"d/{i}": 1000 + i for i in range(20)})
    write_dataset(dst, {"d/3": 5}, seed=9)
    theirs = (dst / "d" / "3").read_bytes()
    ends = [f"file://{src}", f"file://{dst}", *REGIONS]

    dry = _cli(home, "cp", *ends, "--files-from", "-", "--ignore-existing", "--dry-run",
               stdin="d/3\nd/7\n# d/8\n")  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == "selected: 2 key(s) of --files-from, looked up by key"
    assert "would keep d/3: exists at the destination (--ignore-existing)" in lines
    assert lines[-1].startswith("dry run: 1 to copy")

    run = _cli(home, "cp", *ends, "--files-from", "-", "--ignore-existing", "--json",
               "--no-progress", stdin="d/3\nd/7\n# d/8\n")  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["objects"] == 1 and result["objects_skipped"] == 1
    assert read_tree(dst) == {"d/3": theirs, "d/7": data["d/7"]}
    assert agents_of(home) == []


def test_bad_selection_options_are_one_line_errors_before_any_work(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_dataset(src, {"a": 10})
    ends = [f"file://{src}", f"file://{tmp_path / 'dst'}", *REGIONS]
    for extra, message in (
        (["--max-age", "soon"], "cannot read duration 'soon'"),
        (["--changed-since", "yesterday"], "must be an ISO 8601 timestamp"),
        (["--ignore-existing", "--update"], "not both"),
        (["--files-from", str(tmp_path / "none.txt")], "cannot read --files-from"),
        (["--bwlimit", "200"], "must be a rate with its unit"),
    ):
        proc = _cli(tmp_path / "home", "cp", *ends, *extra)
        assert proc.returncode == 2, (extra, proc.stderr)
        assert message in proc.stderr, (extra, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) <= 3, proc.stderr  # click adds usage
    assert not (tmp_path / "dst").exists()


def test_bwlimit_writes_the_new_cap_where_the_running_transfer_reads_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = _cli(home, "bwlimit", "cp-123", "40Mbit")
    assert proc.returncode == 0, proc.stderr
    assert "cap 5.0 MB/s (40.0 Mbit/s)" in proc.stdout
    assert (home / "bwlimit" / "cp-123").read_text() == "40Mbit"
    bad = _cli(home, "bwlimit", "cp-123", "40")
    assert bad.returncode == 2 and "must be a rate with its unit" in bad.stderr
    assert (home / "bwlimit" / "cp-123").read_text() == "40Mbit"  # unchanged
