"""Measured grids: CSV/Parquet loading, scaling, merge order, export round trip, bad rows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles import (
    RegionCatalog,
    ThroughputGrid,
    load_default_profile,
    load_measured_grid,
    load_profile,
)

HEADER = "src,dst,gbps,connections,measured_at\n"


@pytest.fixture(scope="module")
def catalog() -> RegionCatalog:
    return load_default_profile().catalog


def write(tmp_path: Path, body: str, name: str = "grid.csv") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_csv_load_scales_connections_and_keeps_newest(
    tmp_path: Path, catalog: RegionCatalog
) -> None:
    path = write(
        tmp_path,
        "src,dst,gbps,connections,measured_at,probe_id\n"
        "aws:us-east-1,gcp:us-central1,2.0,32,2024-05-01T00:00:00Z,a\n"
        "aws:us-east-1,gcp:us-central1,3.0,64,2024-06-01T00:00:00+00:00,b\n"
        "aws:us-east-1,gcp:us-central1,9.0,64,2024-04-01T00:00:00Z,c\n"
        "us-west-2,eastus,1.5,16,2024-06-02 12:00:00,d\n",
    )
    grid = load_measured_grid(path, catalog)
    assert grid.connections == 64
    assert grid.gbps("aws:us-east-1", "gcp:us-central1") == 3.0  # newest of three rows
    assert grid.measured_at("aws:us-east-1", "gcp:us-central1") == datetime(2024, 6, 1, tzinfo=UTC)
    assert grid.gbps("aws:us-west-2", "azure:eastus") == pytest.approx(6.0)  # 1.5 * 64 / 16
    assert grid.measured_at("aws:us-west-2", "azure:eastus") == datetime(2024, 6, 2, 12, tzinfo=UTC)
    assert grid.source("us-west-2", "eastus") == "measured"
    assert grid.provenance["measured_connections"] == [16, 32, 64]
    with pytest.raises(ProfileError, match="no throughput"):
        grid.gbps("aws:us-east-1", "aws:us-east-2")


def test_parquet_load_with_typed_and_string_timestamps(
    tmp_path: Path, catalog: RegionCatalog
) -> None:
    typed = tmp_path / "typed.parquet"
    pq.write_table(
        pa.table(
            {
                "src": ["azure:eastus", "azure:eastus"],
                "dst": ["aws:ap-northeast-1", "aws:ap-northeast-1"],
                "gbps": [1.0, 2.2],
                "connections": pa.array([64, 128], pa.int64()),
                "measured_at": pa.array(
                    [datetime(2024, 1, 1), datetime(2024, 2, 1)], pa.timestamp("ms")
                ),
            }
        ),
        typed,
    )
    grid = load_measured_grid(typed, catalog)
    assert grid.gbps("azure:eastus", "aws:ap-northeast-1") == pytest.approx(1.1)
    assert grid.measured_at("azure:eastus", "aws:ap-northeast-1") == datetime(
        2024, 2, 1, tzinfo=UTC
    )
    strings = tmp_path / "strings.pq"
    pq.write_table(
        pa.table(
            {
                "src": ["gcp:us-east1"],
                "dst": ["gcp:europe-west1"],
                "gbps": ["4.5"],
                "connections": ["64"],
                "measured_at": ["2024-03-01T10:00:00+02:00"],
            }
        ),
        strings,
    )
    grid = load_measured_grid(strings, catalog)
    assert grid.gbps("gcp:us-east1", "gcp:europe-west1") == 4.5
    assert grid.measured_at("gcp:us-east1", "gcp:europe-west1") == datetime(
        2024, 3, 1, 8, tzinfo=UTC
    )


def test_merge_measured_wins_newest_wins_model_never_overrides(tmp_path: Path) -> None:
    base = load_default_profile().throughput
    old = write(
        tmp_path, HEADER + "aws:us-east-1,gcp:us-south1,1.0,64,2024-01-01T00:00:00Z\n", "o.csv"
    )
    new = write(
        tmp_path, HEADER + "aws:us-east-1,gcp:us-south1,2.0,64,2024-02-01T00:00:00Z\n", "n.csv"
    )
    catalog = base.catalog
    merged = base.merge(load_measured_grid(old, catalog))
    assert merged.gbps("aws:us-east-1", "gcp:us-south1") == 1.0  # measured beats modelled
    assert merged.source("aws:us-east-1", "gcp:us-south1") == "measured"
    assert merged.source("aws:us-east-1", "gcp:us-east5") == "modelled"
    assert merged.gbps("aws:us-east-1", "gcp:us-east5") == base.gbps(
        "aws:us-east-1", "gcp:us-east5"
    )
    newer = merged.merge(load_measured_grid(new, catalog))
    assert newer.gbps("aws:us-east-1", "gcp:us-south1") == 2.0  # newer wins
    back = newer.merge(load_measured_grid(old, catalog))
    assert back.gbps("aws:us-east-1", "gcp:us-south1") == 2.0  # older does not
    remodelled = newer.merge(base)
    assert remodelled.gbps("aws:us-east-1", "gcp:us-south1") == 2.0  # model never overrides
    assert remodelled.source("aws:us-east-1", "gcp:us-south1") == "measured"
    # inputs are untouched
    assert base.source("aws:us-east-1", "gcp:us-south1") == "modelled"
    assert len(merged.provenance["merged"]) == len(base.provenance["merged"]) + 1  # + published


def test_merge_scales_other_connection_counts(tmp_path: Path) -> None:
    base = load_default_profile().throughput
    path = write(tmp_path, HEADER + "aws:us-east-1,gcp:us-south1,1.0,32,2024-01-01T00:00:00Z\n")
    grid32 = load_measured_grid(path, base.catalog, connections=32)
    assert grid32.gbps("aws:us-east-1", "gcp:us-south1") == 1.0
    assert base.merge(grid32).gbps("aws:us-east-1", "gcp:us-south1") == 2.0


def test_load_profile_with_measured_grid(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "azure:eastus,aws:ap-northeast-1,3.5,64,2024-06-01T00:00:00Z\n")
    profile = load_profile(measured_grid=path)
    assert profile.throughput.gbps("azure:eastus", "aws:ap-northeast-1") == 3.5
    assert profile.throughput.source("azure:eastus", "aws:ap-northeast-1") == "measured"
    assert len(profile.throughput.as_dict()) == len(profile.catalog) * (len(profile.catalog) - 1)


@pytest.mark.parametrize("name", ["export.csv", "export.parquet"])
def test_export_round_trips(tmp_path: Path, name: str) -> None:
    base = load_default_profile().throughput
    measured = write(
        tmp_path, HEADER + "aws:us-east-1,gcp:us-south1,1.25,64,2024-01-01T00:00:00Z\n", "m.csv"
    )
    grid = base.merge(load_measured_grid(measured, base.catalog))
    out = tmp_path / name
    grid.write(str(out))
    again = load_measured_grid(out, base.catalog)
    assert again.as_dict() == grid.as_dict()
    assert again.source("aws:us-east-1", "gcp:us-south1") == "measured"
    assert again.measured_at("aws:us-east-1", "gcp:us-south1") == datetime(2024, 1, 1, tzinfo=UTC)
    assert again.source("aws:us-east-1", "gcp:us-east5") == "modelled"
    assert isinstance(again, ThroughputGrid)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("src,dst,gbps,measured_at\n", "missing column(s) connections"),
        (
            HEADER + "aws:us-east-1,gcp:us-central1,fast,64,2024-01-01\n",
            "row 1 (line 2): field 'gbps'",
        ),
        (
            HEADER + "aws:us-east-1,gcp:us-central1,-1,64,2024-01-01\n",
            "row 1 (line 2): field 'gbps': -1.0",
        ),
        (HEADER + "aws:us-east-1,gcp:us-central1,nan,64,2024-01-01\n", "field 'gbps': nan"),
        (
            HEADER
            + "aws:us-east-1,gcp:us-central1,1,64,2024-01-01\n"
            + "aws:us-east-1,gcp:us-centrl1,1,64,2024-01-01\n",
            "row 2 (line 3): field 'dst': unknown region 'gcp:us-centrl1'; "
            "did you mean gcp:us-central1",
        ),
        (HEADER + "aws:us-eest-1,gcp:us-central1,1,64,2024-01-01\n", "field 'src'"),
        (HEADER + "aws:us-east-1,gcp:us-central1,1,0,2024-01-01\n", "field 'connections'"),
        (HEADER + "aws:us-east-1,gcp:us-central1,1,6.5,2024-01-01\n", "field 'connections'"),
        (
            HEADER + "aws:us-east-1,gcp:us-central1,1,64,yesterday\n",
            "field 'measured_at': 'yesterday'",
        ),
        (HEADER + "aws:us-east-1,gcp:us-central1,1,64,\n", "field 'measured_at' is empty"),
        (HEADER, "the grid has no rows"),
    ],
)
def test_bad_csv_rows_are_named(
    tmp_path: Path, catalog: RegionCatalog, body: str, needle: str
) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ProfileError) as info:
        load_measured_grid(path, catalog)
    assert str(path) in str(info.value)
    assert needle in str(info.value)


def test_bad_parquet_row_is_named(tmp_path: Path, catalog: RegionCatalog) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table(
            {
                "src": ["aws:us-east-1", "aws:us-east-1"],
                "dst": ["gcp:us-central1", "gcp:us-east1"],
                "gbps": [1.0, -3.0],
                "connections": [64, 64],
                "measured_at": ["2024-01-01", "2024-01-01"],
            }
        ),
        path,
    )
    with pytest.raises(ProfileError, match=r"bad.parquet: row 2: field 'gbps'"):
        load_measured_grid(path, catalog)
    missing = tmp_path / "missing.parquet"
    pq.write_table(pa.table({"src": ["aws:us-east-1"], "dst": ["gcp:us-east1"]}), missing)
    with pytest.raises(ProfileError, match="missing column"):
        load_measured_grid(missing, catalog)


def test_unreadable_and_unknown_format(tmp_path: Path, catalog: RegionCatalog) -> None:
    with pytest.raises(ProfileError, match="unknown grid format"):
        load_measured_grid(tmp_path / "grid.xlsx", catalog)
    with pytest.raises(ProfileError, match="cannot read"):
        load_measured_grid(tmp_path / "absent.csv", catalog)
    garbage = write(tmp_path, "not parquet at all", "g.parquet")
    with pytest.raises(ProfileError, match="cannot read Parquet"):
        load_measured_grid(garbage, catalog)


def test_module_cli_exports_and_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from skyplane_ops.profiles.__main__ import main

    out = tmp_path / "grid.csv"
    assert main(["export", str(out)]) == 0
    catalog = load_default_profile().catalog
    assert len(load_measured_grid(out, catalog)) == len(catalog) ** 2
    assert main(["show", "canadacentral", "asia-northeast1"]) == 0
    shown = capsys.readouterr().out
    assert "4.18 Gbps (published 2022-01-29T00:00:00+00:00; 64 connections), $0.0875/GB" in shown
    assert main(["show", "canadacentral", "us-east5"]) == 0
    assert "Gbps (model; 64 connections)" in capsys.readouterr().out
    assert main(["show", "us-east-l", "us-west-2"]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_measured_grid_in_place_of_the_model(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER + "azure:eastus,aws:ap-northeast-1,3.5,64,2024-06-01T00:00:00Z\n")
    profile = load_profile(measured_grid=path, measured_only=True)
    assert profile.throughput.as_dict() == {("azure:eastus", "aws:ap-northeast-1"): 3.5}
    with pytest.raises(ProfileError, match="no throughput"):
        profile.throughput.gbps("aws:us-east-1", "aws:us-east-2")
    with pytest.raises(ProfileError, match="needs a measured_grid"):
        load_profile(measured_only=True)
