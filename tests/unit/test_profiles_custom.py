"""Custom regions: own sites next to the cloud catalog, their prices, caps and links."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles import CustomRegion, load_default_profile, load_profile

LAB_A = {"id": "site:lab-a", "hosts": 3}
LAB_B = CustomRegion(
    "site:lab-b",
    egress_usd_per_gb=0.01,
    vm_usd_per_hour=0.5,
    egress_cap_gbps=2.0,
    continent="europe",
)


def test_with_regions_adds_sites_with_defaults_and_leaves_the_original() -> None:
    base = load_default_profile()
    profile = base.with_regions([LAB_A, LAB_B])
    assert "site:lab-a" in profile.catalog and "site:lab-a" not in base.catalog
    assert profile.catalog.get("lab-a").id == "site:lab-a"  # bare names work too
    region = profile.catalog.get("site:lab-a")
    assert region.provider == "own" and region.custom
    vm = profile.prices.vm_for_region("site:lab-a")
    assert (vm.usd_per_hour, vm.max_per_region) == (0.0, 3)
    assert math.isinf(vm.egress_cap_gbps) and math.isinf(vm.ingress_cap_gbps)
    vm_b = profile.prices.vm_for_region("site:lab-b")
    assert (vm_b.usd_per_hour, vm_b.egress_cap_gbps, vm_b.max_per_region) == (0.5, 2.0, 1)
    # Cloud regions keep their provider's class.
    assert profile.prices.vm_for_region("aws:us-east-1") == base.prices.vm("aws")


def test_custom_prices_follow_the_site_and_the_cloud_internet_rate() -> None:
    profile = load_default_profile().with_regions([LAB_A, LAB_B])
    prices = profile.prices
    assert prices.egress_usd_per_gb("site:lab-a", "site:lab-b") == 0.0
    assert prices.egress_usd_per_gb("site:lab-b", "aws:us-east-1") == 0.01
    assert prices.egress_usd_per_gb("aws:us-east-1", "site:lab-a") == pytest.approx(
        prices.internet_usd_per_gb("aws:us-east-1")
    )
    # Cloud pairs are priced as before.
    base = load_default_profile().prices
    assert prices.egress_usd_per_gb("aws:us-east-1", "gcp:us-central1") == (
        base.egress_usd_per_gb("aws:us-east-1", "gcp:us-central1")
    )
    assert ("site:lab-a", "site:lab-b") in prices.as_dict()


def test_custom_links_exist_only_where_measured(tmp_path: Path) -> None:
    path = tmp_path / "lab.csv"
    path.write_text(
        "src,dst,gbps,connections,measured_at\n"
        "site:lab-a,site:lab-b,0.10,4,2026-11-01T00:00:00Z\n"
        "site:lab-a,site:lab-b,0.12,64,2026-11-01T00:00:02Z\n"
    )
    profile = load_profile(custom_regions=[LAB_A, LAB_B], measured_grid=path)
    links = profile.throughput.links()
    link = links[("site:lab-a", "site:lab-b")]
    assert (link.gbps, link.per_conn_gbps, link.sat_gbps) == (0.12, 0.025, 0.12)
    assert ("site:lab-b", "site:lab-a") not in links
    assert not any("site:lab-a" in pair and pair != ("site:lab-a", "site:lab-b") for pair in links)
    # The same through the method.
    again = load_default_profile().with_regions([LAB_A, LAB_B]).with_measured(path)
    assert again.throughput.links()[("site:lab-a", "site:lab-b")] == link


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"id": "lab-a"}, "prefix:name"),
        ({"id": "aws:lab"}, "may not be a cloud"),
        ({"id": "site:x", "hosts": 0}, "hosts"),
        ({"id": "site:x", "vm_usd_per_hour": -1}, "vm_usd_per_hour"),
        ({"id": "site:x", "egress_cap_gbps": 0}, "egress_cap_gbps"),
        ({"id": "site:x", "continent": "mars"}, "continent"),
        ({"id": "site:x", "colour": "red"}, "unknown field"),
        ({"hosts": 2}, "'id' is missing"),
    ],
)
def test_bad_specs_are_clear_errors(spec: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_default_profile().with_regions([spec])


def test_duplicate_and_clashing_ids_are_rejected() -> None:
    profile = load_default_profile()
    with pytest.raises(ProfileError, match="twice"):
        profile.with_regions([LAB_A, LAB_A])
    with pytest.raises(ProfileError, match="already in the catalog"):
        profile.with_regions([LAB_A]).with_regions([LAB_A])


def test_max_vms_and_inf_caps_from_an_inventory_file() -> None:
    region = CustomRegion.from_mapping(
        {"id": "site:lab-c", "max_vms": 2, "ingress_cap_gbps": "inf", "vm_usd_per_hour": None}
    )
    assert region.hosts == 2 and math.isinf(region.ingress_cap_gbps)
    assert region.vm_usd_per_hour == 0.0


def test_adding_regions_keeps_link_records_of_a_measured_profile(tmp_path: Path) -> None:
    path = tmp_path / "cloud.csv"
    path.write_text(
        "src,dst,gbps,connections,measured_at\n"
        "aws:us-east-1,aws:us-west-2,0.5,4,2026-11-01T00:00:00Z\n"
        "aws:us-east-1,aws:us-west-2,2.0,64,2026-11-01T00:00:03Z\n"
    )
    measured = load_default_profile().with_measured(path)
    profile = measured.with_regions([LAB_A])
    link = profile.throughput.link("aws:us-east-1", "aws:us-west-2")
    assert (link.per_conn_gbps, link.sat_gbps, link.source) == (0.125, 2.0, "profile")
    assert profile.throughput.links() == {
        **measured.throughput.links(),
        **{k: v for k, v in profile.throughput.links().items() if "site:lab-a" in k},
    }
