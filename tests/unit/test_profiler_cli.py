"""``skyplane-ops grid show|diff|versions|export`` and ``profile --dry-run`` on a local store."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from skyplane_ops.cli import main
from skyplane_ops.profiler import GridStore, Measurement
from skyplane_ops.profiler.records import utcnow
from skyplane_ops.profiles import load_default_profile, load_measured_grid

A, B, C = "aws:us-east-1", "aws:us-west-2", "gcp:us-central1"


def _m(src: str, dst: str, gbps: float, age: timedelta) -> Measurement:
    return Measurement(src, dst, gbps, gbps, gbps, 10.0, 64, 5.0, utcnow() - age, run_id="t")


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str, str]:
    grid = GridStore(str(tmp_path / "grid"))
    grid.append(_m(A, B, 4.0, timedelta(days=5)))
    grid.append(_m(B, A, 2.0, timedelta(days=5)))
    v1 = grid.publish()
    grid.append(_m(A, B, 4.1, timedelta(hours=1)))  # +2.5%: below a 10% threshold
    grid.append(_m(A, C, 1.0, timedelta(hours=1)))  # new pair
    v2 = grid.publish()
    assert v1 and v2
    return grid.location, v1, v2


def test_grid_show_flags_stale_pairs(store, capsys) -> None:
    location, _, v2 = store
    assert main(["grid", "show", "--store", location, "--stale-after", "3d"]) == 0
    out = capsys.readouterr().out
    lines = {tuple(line.split()[:2]): line for line in out.splitlines() if line.startswith("aws")}
    assert "STALE" in lines[(B, A)] and "STALE" not in lines[(A, B)]
    assert f"3 pair(s) in version {v2}" in out and "1 older than 3d" in out
    assert main(["grid", "show", "--store", location, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stale"] == 1 and {p["src"] + p["dst"] for p in data["pairs"]} == {
        A + B,
        B + A,
        A + C,
    }


def test_grid_diff_lists_pairs_beyond_the_threshold(store, capsys) -> None:
    location, v1, v2 = store
    assert main(["grid", "diff", "--store", location, v1, v2, "--threshold", "10", "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)["moved"]
    assert [(c["src"], c["dst"]) for c in moved] == [(A, C)]
    assert main(["grid", "diff", "--store", location, v1, v2, "--threshold", "1"]) == 0
    out = capsys.readouterr().out
    assert "+2.5%" in out and "new" in out and "2 of 3 pair(s) moved" in out


def test_grid_versions_and_export(store, tmp_path: Path, capsys) -> None:
    location, v1, v2 = store
    assert main(["grid", "versions", "--store", location]) == 0
    assert capsys.readouterr().out.split() == [v1, v2, "(latest)"]
    out = tmp_path / "measured.csv"
    assert main(["grid", "export", "--store", location, str(out)]) == 0
    grid = load_measured_grid(out, load_default_profile().catalog)
    assert grid.gbps(A, B) == pytest.approx(4.1)


def test_bad_store_and_unknown_version_are_one_line_errors(store, capsys) -> None:
    location, _, _ = store
    assert main(["grid", "show", "--store", "ftp://nowhere/grid"]) == 2
    assert "cannot open grid store" in capsys.readouterr().err
    assert main(["grid", "diff", "--store", location, "v1", "v2"]) == 2
    err = capsys.readouterr().err
    assert "no readable version 'v1'" in err and "Traceback" not in err


def test_profile_dry_run_shows_rounds_and_estimate(tmp_path: Path, capsys) -> None:
    argv = ["profile", "--regions", f"{A},{B},{C}", "--store", str(tmp_path), "--dry-run"]
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["pairs"] == 6 and plan["rounds"] == 2 and plan["estimate_usd"] > 0
    assert main(argv) == 0
    assert "round 2:" in capsys.readouterr().out
