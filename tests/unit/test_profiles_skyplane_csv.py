"""Skyplane-format CSVs: zones -> regions, bit/s -> Gbit/s, duplicates, tiers, and
``skyplane-ops grid import`` into a grid file and into a real local grid store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from skyplane_ops.cli import main
from skyplane_ops.errors import ProfileError
from skyplane_ops.profiler import GridStore
from skyplane_ops.profiles import load_default_profile, load_measured_grid
from skyplane_ops.profiles.skyplane_csv import read_skyplane_csv, region_of

# Skyplane's own layout: bit/s, GCP zones, two zones of one region, a failed row, tiers.
RAW = (
    "src_region,dst_region,src_tier,dst_tier,throughput_sent,throughput_received,success\n"
    "aws:us-east-1,gcp:us-central1-a,PREMIUM,PREMIUM,4000000000,3000000000,True\n"
    "aws:us-east-1,gcp:us-central1-b,PREMIUM,PREMIUM,6000000000,5000000000,True\n"
    "aws:us-east-1,gcp:us-central1-a,PREMIUM,PREMIUM,9e9,9e9,False\n"
    "aws:us-east-1,gcp:us-central1-a,PREMIUM,STANDARD,2e9,1e9,True\n"
    "gcp:europe-west1-b,azure:eastus,PREMIUM,PREMIUM,7.5e9,6.5e9,True\n"
    "aws:us-east-1,aws:mars-north-1,PREMIUM,PREMIUM,1e9,1e9,True\n"
)


def write(tmp_path: Path, text: str, name: str = "throughput.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_zones_units_duplicates_failed_rows_and_tiers(tmp_path: Path) -> None:
    rates = {(r.src, r.dst): r for r in read_skyplane_csv(write(tmp_path, RAW))}
    pair = rates[("aws:us-east-1", "gcp:us-central1")]
    assert pair.gbps_received == pytest.approx(4.0)  # mean of 3 and 5; the failed row is out
    assert pair.gbps_sent == pytest.approx(5.0)
    assert pair.samples == 2 and pair.connections == 64
    assert rates[("gcp:europe-west1", "azure:eastus")].gbps_received == pytest.approx(6.5)
    standard = {(r.src, r.dst): r for r in read_skyplane_csv(write(tmp_path, RAW), tier="standard")}
    assert standard[("aws:us-east-1", "gcp:us-central1")].gbps_received == pytest.approx(1.0)
    assert ("gcp:europe-west1", "azure:eastus") not in standard  # its GCP end is PREMIUM


def test_compacted_layout_weights_by_samples(tmp_path: Path) -> None:
    text = (
        "src,src_tier,src_vm,dst,dst_tier,dst_vm,connections,seconds,gbit_s_sent,"
        "gbit_s_received,samples\n"
        "azure:eastus,PREMIUM,x,gcp:us-east1-b,PREMIUM,y,64,5,4.0,2.0,3\n"
        "azure:eastus,PREMIUM,x,gcp:us-east1-c,PREMIUM,y,64,5,8.0,6.0,1\n"
    )
    (rate,) = read_skyplane_csv(write(tmp_path, text))
    assert (rate.src, rate.dst) == ("azure:eastus", "gcp:us-east1")
    assert rate.gbps_received == pytest.approx(3.0) and rate.samples == 4


def test_region_of_and_bad_files(tmp_path: Path) -> None:
    assert region_of("gcp:us-central1-a") == "gcp:us-central1"
    assert region_of("gcp:us-central1") == "gcp:us-central1"
    assert region_of("aws:us-east-1") == "aws:us-east-1"
    with pytest.raises(ProfileError, match="not a Skyplane grid"):
        read_skyplane_csv(write(tmp_path, "src,dst,gbps\n"))
    bad = RAW.replace("4000000000", "fast")
    with pytest.raises(ProfileError, match=r"row 1 .*throughput_sent"):
        read_skyplane_csv(write(tmp_path, bad))
    with pytest.raises(ProfileError, match="cannot read"):
        read_skyplane_csv(tmp_path / "missing.csv")


@pytest.mark.parametrize("name", ["grid.csv", "grid.parquet"])
def test_grid_import_to_a_grid_file_loads_as_published(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    argv = ["grid", "import", str(write(tmp_path, RAW)), "--output", str(out)]
    assert main([*argv, "--measured-at", "2024-05-01T00:00:00Z"]) == 0
    said = capsys.readouterr().out
    assert "imported 2 pair(s)" in said and "aws:mars-north-1" in said  # skipped, and said so
    grid = load_measured_grid(out, load_default_profile().catalog)
    link = grid.link("aws:us-east-1", "gcp:us-central1")
    assert (link.gbps, link.source, link.connections) == (pytest.approx(4.0), "published", 64)
    assert grid.measured_at("aws:us-east-1", "gcp:us-central1") == datetime(2024, 5, 1, tzinfo=UTC)


def test_grid_import_into_a_store_publishes_a_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    argv = ["grid", "import", str(write(tmp_path, RAW)), "--store", str(store)]
    assert main([*argv, "--column", "sent", "--measured-at", "2024-05-01"]) == 0
    assert "(version v" in capsys.readouterr().out
    rows = {r.pair: r for r in GridStore(str(store)).read_version()}
    row = rows[("aws:us-east-1", "gcp:us-central1")]
    assert row.gbps == pytest.approx(5.0) and row.received_gbps == pytest.approx(4.0)
    assert row.source == "published" and row.measured_at == datetime(2024, 5, 1, tzinfo=UTC)
    assert len(rows) == 2
    assert main(["grid", "import", str(write(tmp_path, "src_region,dst_region\n"))]) == 2
    assert "not a Skyplane grid" in capsys.readouterr().err
