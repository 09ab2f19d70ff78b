"""Price grid: every rule of CLOUD-FACTS.md is hit at least once, plus tiers and VM classes."""

from __future__ import annotations

import pytest

from skyplane_ops.errors import ProfileError, UnknownRegionError
from skyplane_ops.profiles import PriceGrid, VmClass, load_default_profile, load_profile


@pytest.fixture(scope="module")
def premium() -> PriceGrid:
    return load_default_profile().prices


@pytest.fixture(scope="module")
def standard() -> PriceGrid:
    return load_default_profile(gcp_tier="standard").prices


def check(grid: PriceGrid, cases: list[tuple[str, str, float]]) -> None:
    for src, dst, usd in cases:
        assert grid.egress_usd_per_gb(src, dst) == pytest.approx(usd), (src, dst)


def test_versioned(premium: PriceGrid) -> None:
    assert premium.as_of.startswith("2024")
    assert any("aws.amazon.com" in s for s in premium.sources)
    assert any("cloud.google.com" in s for s in premium.sources)
    assert any("azure.microsoft.com" in s for s in premium.sources)
    assert premium.gcp_tier == "premium"


def test_same_region_is_free_and_gcp_zone_rate_recorded(premium: PriceGrid) -> None:
    for rid in ("aws:us-east-1", "azure:eastus", "gcp:us-central1"):
        assert premium.egress_usd_per_gb(rid, rid) == 0.0
    assert premium.gcp_same_region_other_zone == pytest.approx(0.01)


def test_aws_inter_region_by_source(premium: PriceGrid) -> None:
    check(
        premium,
        [
            ("aws:us-east-1", "aws:us-west-2", 0.02),
            ("aws:ca-central-1", "aws:eu-west-1", 0.02),
            ("aws:eu-central-1", "aws:ap-northeast-1", 0.02),
            ("aws:us-east-1", "aws:us-east-2", 0.01),
            ("aws:us-east-2", "aws:us-east-1", 0.01),
            ("aws:ap-northeast-2", "aws:us-east-1", 0.08),
            ("aws:ap-south-1", "aws:us-east-1", 0.086),
            ("aws:ap-east-1", "aws:us-east-1", 0.09),
            ("aws:ap-northeast-1", "aws:us-east-1", 0.09),
            ("aws:ap-northeast-3", "aws:us-east-1", 0.09),
            ("aws:ap-southeast-1", "aws:us-east-1", 0.09),
            ("aws:ap-southeast-2", "aws:us-east-1", 0.098),
            ("aws:ap-southeast-3", "aws:us-east-1", 0.10),
            ("aws:me-south-1", "aws:us-east-1", 0.1105),
            ("aws:me-central-1", "aws:us-east-1", 0.085),
            ("aws:sa-east-1", "aws:us-east-1", 0.138),
            ("aws:af-south-1", "aws:us-east-1", 0.147),
        ],
    )


def test_aws_internet_by_source(premium: PriceGrid) -> None:
    check(
        premium,
        [
            ("aws:us-east-1", "gcp:us-east4", 0.09),
            ("aws:eu-west-1", "azure:westeurope", 0.09),
            ("aws:ca-central-1", "gcp:us-central1", 0.09),
            ("aws:sa-east-1", "gcp:us-central1", 0.15),
            ("aws:af-south-1", "azure:eastus", 0.154),
        ],
    )
    ap = [r.id for r in load_default_profile().catalog.by_provider("aws") if r.name[:3] == "ap-"]
    for rid in ap:
        assert 0.114 <= premium.egress_usd_per_gb(rid, "gcp:us-central1") <= 0.132, rid


def test_aws_volume_tiers_recorded(premium: PriceGrid) -> None:
    tiers = premium.volume_tiers["internet_us_east"]
    assert [t["usd_per_gb"] for t in tiers] == [0.09, 0.085, 0.07, 0.05]
    assert [t["up_to_tb"] for t in tiers] == [10, 50, 150, None]


def test_gcp_inter_region_by_continent_class(premium: PriceGrid) -> None:
    check(
        premium,
        [
            ("gcp:us-central1", "gcp:us-east1", 0.01),
            ("gcp:europe-west1", "gcp:europe-west4", 0.02),
            ("gcp:asia-east1", "gcp:asia-northeast1", 0.05),
            ("gcp:southamerica-east1", "gcp:southamerica-west1", 0.08),
            ("gcp:australia-southeast1", "gcp:australia-southeast2", 0.08),
            ("gcp:us-central1", "gcp:europe-west1", 0.08),
            ("gcp:asia-northeast1", "gcp:us-west1", 0.08),
            ("gcp:us-central1", "gcp:australia-southeast1", 0.15),
            ("gcp:australia-southeast1", "gcp:europe-west1", 0.15),
            ("gcp:asia-southeast2", "gcp:us-central1", 0.15),
            ("gcp:europe-west1", "gcp:asia-southeast2", 0.15),
            ("gcp:asia-southeast2", "gcp:asia-northeast1", 0.05),
        ],
    )


def test_gcp_premium_internet(premium: PriceGrid) -> None:
    check(
        premium,
        [
            ("gcp:us-central1", "aws:us-east-1", 0.12),
            ("gcp:europe-west1", "azure:westeurope", 0.12),
            ("gcp:us-central1", "aws:ap-southeast-2", 0.19),
            ("gcp:us-central1", "azure:australiaeast", 0.19),
            ("gcp:asia-northeast1", "aws:us-east-1", 0.14),
            ("gcp:asia-northeast2", "aws:us-east-1", 0.14),
            ("gcp:asia-southeast2", "aws:us-east-1", 0.14),
            ("gcp:asia-northeast3", "aws:us-east-1", 0.147),
            ("gcp:asia-southeast1", "aws:us-east-1", 0.19),
            ("gcp:australia-southeast1", "azure:eastus", 0.19),
        ],
    )


def test_gcp_standard_tier_by_source_only(standard: PriceGrid, premium: PriceGrid) -> None:
    assert standard.gcp_tier == "standard"
    check(
        standard,
        [
            ("gcp:us-central1", "aws:us-east-1", 0.085),
            ("gcp:northamerica-northeast1", "aws:ap-southeast-2", 0.085),
            ("gcp:europe-west1", "azure:westeurope", 0.085),
            ("gcp:asia-east1", "aws:us-east-1", 0.11),
            ("gcp:asia-southeast1", "aws:us-east-1", 0.11),
            ("gcp:southamerica-east1", "aws:us-east-1", 0.12),
            ("gcp:australia-southeast1", "aws:us-east-1", 0.12),
        ],
    )
    # The tier changes only GCP internet egress: intra-GCP and other providers are unchanged.
    for src, dst in [
        ("gcp:us-central1", "gcp:europe-west1"),
        ("aws:us-east-1", "gcp:us-central1"),
        ("azure:eastus", "gcp:us-central1"),
    ]:
        assert standard.egress_usd_per_gb(src, dst) == premium.egress_usd_per_gb(src, dst)
    assert premium.egress_usd_per_gb("gcp:us-central1", "aws:us-east-1") > (
        standard.egress_usd_per_gb("gcp:us-central1", "aws:us-east-1")
    )


def test_azure_rules(premium: PriceGrid) -> None:
    check(
        premium,
        [
            # internet / other cloud, by source continent
            ("azure:eastus", "aws:us-east-1", 0.0875),
            ("azure:westeurope", "gcp:europe-west4", 0.0875),
            ("azure:japaneast", "gcp:asia-northeast1", 0.12),
            ("azure:australiaeast", "aws:ap-southeast-2", 0.12),
            ("azure:uaenorth", "aws:me-central-1", 0.12),
            ("azure:southafricanorth", "aws:af-south-1", 0.12),
            ("azure:brazilsouth", "aws:sa-east-1", 0.181),
            # within a continent
            ("azure:eastus", "azure:westus", 0.02),
            ("azure:westeurope", "azure:northeurope", 0.02),
            ("azure:japaneast", "azure:southeastasia", 0.08),
            ("azure:australiaeast", "azure:australiasoutheast", 0.08),
            ("azure:uaenorth", "azure:qatarcentral", 0.08),
            ("azure:southafricanorth", "azure:southafricawest", 0.08),
            ("azure:brazilsouth", "azure:brazilsoutheast", 0.16),
            # across continents, by source continent
            ("azure:eastus", "azure:westeurope", 0.05),
            ("azure:westeurope", "azure:eastus", 0.05),
            ("azure:japaneast", "azure:eastus", 0.08),
            ("azure:australiaeast", "azure:japaneast", 0.08),
            ("azure:brazilsouth", "azure:eastus", 0.16),
        ],
    )


def test_source_pays_ingress_free(premium: PriceGrid) -> None:
    # Same pair both ways: each direction costs the *source's* rate.
    assert premium.egress_usd_per_gb("aws:us-east-1", "azure:japaneast") == pytest.approx(0.09)
    assert premium.egress_usd_per_gb("azure:japaneast", "aws:us-east-1") == pytest.approx(0.12)


def test_vm_classes(premium: PriceGrid) -> None:
    assert premium.vm("aws") == VmClass("aws", "m5.8xlarge", 32, 128, 1.536, 5.0, 10.0, 8)
    assert premium.vm("azure").instance == "Standard_D32_v5"
    assert premium.vm("azure").egress_cap_gbps == 16.0
    gcp = premium.vm("gcp")
    assert (gcp.instance, gcp.usd_per_hour, gcp.egress_cap_gbps, gcp.ingress_cap_gbps) == (
        "n2-standard-32",
        1.554,
        7.0,
        16.0,
    )
    with pytest.raises(ProfileError, match="no VM class"):
        premium.vm("ibm")


def test_as_dict_covers_every_distinct_pair(premium: PriceGrid) -> None:
    n = len(load_default_profile().catalog)
    table = premium.as_dict()
    assert len(table) == n * (n - 1)
    assert table[("aws:us-east-1", "aws:us-east-2")] == 0.01
    assert all(0 < v < 0.2 for v in table.values())


def test_bare_names_and_unknown_regions(premium: PriceGrid) -> None:
    assert premium.egress_usd_per_gb("us-east-1", "us-east-2") == pytest.approx(0.01)
    with pytest.raises(UnknownRegionError) as info:
        premium.egress_usd_per_gb("aws:us-east-1", "gcp:us-centrall1")
    assert "gcp:us-central1" in info.value.suggestions


def test_bad_gcp_tier() -> None:
    with pytest.raises(ProfileError, match="gcp_tier"):
        load_profile(gcp_tier="gold")
