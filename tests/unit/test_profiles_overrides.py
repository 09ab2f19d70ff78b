"""User overrides of prices and VM classes, by JSON file and keyword arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles import default_prices_document, load_default_profile, load_profile


def write(tmp_path: Path, data: Any, name: str = "overrides.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_file_overrides_one_rule_and_leaves_the_rest(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "as_of": "2025-01-01",
            "aws": {"inter_region": {"default": 0.03, "by_source": {"ca-west-1": 0.04}}},
            "gcp": {"internet": {"premium": {"by_source": {"us-east4": 0.2}}}},
            "vm_classes": {"aws": {"usd_per_hour": 2.0, "max_per_region": 4}},
            "pair_overrides": {"aws:us-east-1->gcp:us-central1": 0.0},
        },
    )
    prices = load_profile(overrides=path).prices
    assert prices.as_of == "2025-01-01"
    assert prices.egress_usd_per_gb("aws:us-east-1", "aws:us-west-2") == 0.03
    assert prices.egress_usd_per_gb("aws:us-east-1", "aws:us-east-2") == 0.01  # exception kept
    assert prices.egress_usd_per_gb("aws:ca-west-1", "aws:us-west-2") == 0.04
    assert prices.egress_usd_per_gb("aws:ap-northeast-1", "aws:us-west-2") == 0.09  # untouched
    assert prices.egress_usd_per_gb("gcp:us-east4", "aws:us-east-1") == 0.2
    assert prices.egress_usd_per_gb("aws:us-east-1", "gcp:us-central1") == 0.0
    assert prices.egress_usd_per_gb("gcp:us-central1", "aws:us-east-1") == 0.12  # one direction
    vm = prices.vm("aws")
    assert (vm.usd_per_hour, vm.max_per_region, vm.instance) == (2.0, 4, "m5.8xlarge")
    assert prices.applied_overrides == [f"file:{path}"]
    # the shipped defaults are unchanged for the next caller
    assert load_default_profile().prices.vm("aws").usd_per_hour == 1.536
    assert default_prices_document()["aws"]["inter_region"]["default"] == 0.02


def test_kwargs_apply_after_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"azure": {"internet": {"north_america": 0.07}}})
    prices = load_profile(
        overrides=path,
        azure={"internet": {"north_america": 0.06}},
        pair_overrides={("us-east-1", "us-central1"): 0.05},
        vm_classes={"gcp": {"instance": "n2-standard-16", "egress_cap_gbps": 7.0}},
        gcp_tier="standard",
    ).prices
    assert prices.egress_usd_per_gb("azure:eastus", "aws:us-east-1") == 0.06
    assert prices.egress_usd_per_gb("aws:us-east-1", "gcp:us-central1") == 0.05
    assert prices.vm("gcp").instance == "n2-standard-16"
    assert prices.gcp_tier == "standard"
    assert prices.applied_overrides == [
        f"file:{path}",
        "kwarg:azure",
        "kwarg:pair_overrides",
        "kwarg:vm_classes",
    ]


def test_replacing_a_vm_class_entirely(tmp_path: Path) -> None:
    vm = {
        "instance": "m5.4xlarge",
        "vcpus": 16,
        "mem_gib": 64,
        "usd_per_hour": 0.768,
        "egress_cap_gbps": 2.5,
        "ingress_cap_gbps": 5.0,
        "max_per_region": 2,
    }
    prices = load_profile(vm_classes={"aws": vm}).prices
    assert prices.vm("aws").vcpus == 16 and prices.vm("aws").egress_cap_gbps == 2.5


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"vm_class": {}}, "unknown key 'vm_class'"),
        ({"aws": {"inter_regoin": {}}}, "unknown key 'aws.inter_regoin'"),
        ({"aws": {"inter_region": {"default": "cheap"}}}, "field 'aws.inter_region.default'"),
        ({"aws": {"internet": {"by_source": {"us-east-1": -0.1}}}}, "is negative"),
        ({"azure": {"internet": []}}, "'azure.internet' must be an object"),
        ({"vm_classes": {"aws": {"vcpus": 0}}}, "'vm_classes.aws.vcpus'"),
        ({"vm_classes": {"gcp": {"egress_cap_gbps": 0}}}, "network caps must be > 0"),
        ({"pair_overrides": {"aws:us-east-1": 0.1}}, "key must be 'src->dst'"),
        (
            {"pair_overrides": {"aws:us-east-1->gcp:us-centrl1": 0.1}},
            "field 'pair_overrides.aws:us-east-1->gcp:us-centrl1': unknown region",
        ),
        ({"azure": {"intra_continent": {"europe": None}}}, "'azure.intra_continent.europe'"),
        ('{"aws": {"inter_region": ', "invalid JSON at line 1"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_override_file_names_the_field(tmp_path: Path, data: Any, needle: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ProfileError) as info:
        load_profile(overrides=path)
    assert str(path) in str(info.value)
    assert needle in str(info.value)


def test_bad_kwargs_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="keyword arguments: unknown key 'aws_price'"):
        load_profile(aws_price=0.1)
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(overrides=tmp_path / "absent.json")
