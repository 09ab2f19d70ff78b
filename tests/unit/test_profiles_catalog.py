"""Region catalog: size, uniqueness, lookups, suggestions and malformed-CSV errors."""

from __future__ import annotations

import json
from importlib.resources import files

import pytest

from skyplane_ops.errors import ProfileError, UnknownRegionError
from skyplane_ops.profiles import Region, RegionCatalog, load_catalog
from skyplane_ops.profiles.catalog import CONTINENTS, parse_regions_csv

HEADER = "id,provider,name,continent,city,lat,lon\n"


@pytest.fixture(scope="module")
def catalog() -> RegionCatalog:
    return load_catalog()


def test_size_and_uniqueness(catalog: RegionCatalog) -> None:
    assert len(catalog) >= 100
    ids = catalog.ids()
    assert len(ids) == len(set(ids))
    counts = {p: len(catalog.by_provider(p)) for p in ("aws", "azure", "gcp")}
    assert counts["aws"] >= 28 and counts["azure"] >= 45 and counts["gcp"] >= 38, counts
    assert sum(counts.values()) == len(catalog)


def test_every_region_is_well_formed(catalog: RegionCatalog) -> None:
    for region in catalog:
        assert isinstance(region, Region)
        assert region.id == f"{region.provider}:{region.name}"
        assert region.continent in CONTINENTS
        assert -90 <= region.lat <= 90 and -180 <= region.lon <= 180
        assert region.city


def test_regions_named_in_cloud_facts_are_present(catalog: RegionCatalog) -> None:
    names = [
        "aws:us-east-1", "aws:us-east-2", "aws:ap-northeast-2", "aws:ap-south-1",
        "aws:ap-east-1", "aws:ap-northeast-1", "aws:ap-northeast-3", "aws:ap-southeast-1",
        "aws:ap-southeast-2", "aws:ap-southeast-3", "aws:me-south-1", "aws:me-central-1",
        "aws:sa-east-1", "aws:af-south-1", "gcp:asia-northeast1", "gcp:asia-northeast2",
        "gcp:asia-northeast3", "gcp:asia-southeast1", "gcp:asia-southeast2",
        "azure:canadacentral", "azure:westus2", "azure:japaneast", "azure:eastus",
    ]  # fmt: skip
    for name in names:
        assert name in catalog


def test_continents_of_known_regions(catalog: RegionCatalog) -> None:
    expected = {
        "aws:ap-southeast-2": "oceania",
        "gcp:australia-southeast1": "oceania",
        "aws:sa-east-1": "south_america",
        "azure:uaenorth": "middle_east",
        "gcp:africa-south1": "africa",
        "azure:mexicocentral": "north_america",
        "gcp:europe-west4": "europe",
        "gcp:asia-southeast2": "asia",
    }
    for rid, continent in expected.items():
        assert catalog.get(rid).continent == continent


def test_bare_names_resolve_when_unambiguous(catalog: RegionCatalog) -> None:
    assert catalog.get("us-east-1").id == "aws:us-east-1"
    assert catalog.get("us-central1").id == "gcp:us-central1"
    assert catalog.get("eastus").id == "azure:eastus"
    assert "westus2" in catalog and "aws:westus2" not in catalog
    assert 42 not in catalog


def test_ambiguous_bare_name_lists_full_ids() -> None:
    text = HEADER + "aws:x,aws,x,europe,A,1,1\ngcp:x,gcp,x,europe,B,2,2\n"
    cat = parse_regions_csv(text, "t.csv")
    with pytest.raises(UnknownRegionError) as info:
        cat.get("x")
    assert info.value.suggestions == ["aws:x", "gcp:x"]
    assert cat.get("gcp:x").city == "B"


@pytest.mark.parametrize(
    ("typo", "expected"),
    [
        ("us-east-l", "aws:us-east-1"),
        ("aws:us-est-1", "aws:us-east-1"),
        ("eastus3", "azure:eastus"),
    ],
)
def test_unknown_region_suggests_closest(catalog: RegionCatalog, typo: str, expected: str) -> None:
    with pytest.raises(UnknownRegionError) as info:
        catalog.get(typo)
    assert expected in info.value.suggestions
    assert typo in str(info.value) and expected in str(info.value)


def test_provenance_file_records_as_of_and_sources() -> None:
    data = json.loads((files("skyplane_ops") / "default_profiles" / "provenance.json").read_text())
    assert data["regions"]["as_of"].startswith("2024")
    assert len(data["regions"]["sources"]) >= 3
    assert data["regions"]["count"] == len(load_catalog())


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("id,provider,name,continent,city,lat\naws:a,aws,a,europe,X,1\n", "missing column(s) lon"),
        (HEADER + "aws:a,aws,a,europe,X,north,1\n", "row 2: field 'lat': 'north' is not a number"),
        (HEADER + "aws:a,aws,a,europe,X,1,200\n", "row 2: field 'lon': 200.0 is outside"),
        (HEADER + "aws:a,aws,a,atlantis,X,1,1\n", "row 2: field 'continent'"),
        (HEADER + "ibm:a,ibm,a,europe,X,1,1\n", "row 2: field 'provider'"),
        (HEADER + "aws:a,aws,b,europe,X,1,1\n", "row 2: field 'id'"),
        (HEADER + "aws:a,aws,a,europe,X,1,1\naws:a,aws,a,europe,X,1,1\n", "row 3: field 'id'"),
        (HEADER + "aws:a,aws,,europe,X,1,1\n", "row 2: field 'name' is empty"),
        (HEADER, "no regions"),
    ],
)
def test_malformed_catalog_names_file_row_and_field(body: str, needle: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_regions_csv(body, "bad.csv")
    assert "bad.csv" in str(info.value)
    assert needle in str(info.value)


def test_missing_catalog_file_is_a_profile_error(tmp_path: object) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_catalog(f"{tmp_path}/nope.csv")
