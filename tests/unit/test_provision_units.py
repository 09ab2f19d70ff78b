"""Pure parts of provisioning: durations, options files, secrets, bundle, grid and tbf maths."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import UnknownBackendError, get_provisioner
from skyplane_ops.provision.bundle import build_bundle, bundle_bytes
from skyplane_ops.provision.netns import Testbed, tbf_args
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    secret_bytes,
)
from skyplane_ops.provision.sweeper import (
    backend_options_for,
    load_backend_options,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration_is_explained() -> None:
    with pytest.raises(ProvisionError, match=r"use e\.g\. 90s"):
        parse_duration("two hours")


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(
        UnknownBackendError, match="choose one of aws, azure, gcp, local, mixed, netns, ssh"
    ):
        get_provisioner("azure-vm")


def test_backend_options_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "opts.toml"
    path.write_text('[aws]\nsweep_regions = ["us-east-1"]\n[ssh]\ninventory = "h.json"\n')
    assert load_backend_options(path) == {
        "aws": {"sweep_regions": ["us-east-1"]},
        "ssh": {"inventory": "h.json"},
    }
    path.write_text('aws = "nope"\n')
    with pytest.raises(ProvisionError, match="option tables"):
        load_backend_options(path)


def test_backend_options_for_inline_flat_per_backend_and_inventory(tmp_path: Path) -> None:
    assert backend_options_for(None, "local") == {}
    assert backend_options_for(' {"idle_timeout": 5} ', "local") == {"idle_timeout": 5}
    flat = tmp_path / "flat.json"
    flat.write_text('{"inventory": "hosts.toml"}')
    assert backend_options_for(str(flat), "ssh") == {"inventory": "hosts.toml"}
    tables = tmp_path / "all.toml"
    tables.write_text('[ssh]\ninventory = "h.json"\n[netns]\nscale = 0.5\n')
    assert backend_options_for(str(tables), "netns") == {"scale": 0.5}
    assert backend_options_for(str(tables), "local") == {}  # no table for it: defaults
    inventory = tmp_path / "inventory.json"
    inventory.write_text('{"regions": {"aws:us-east-1": [{"address": "10.0.0.1"}]}}')
    assert backend_options_for(str(inventory), "ssh") == {
        "inventory": {"regions": {"aws:us-east-1": [{"address": "10.0.0.1"}]}}
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"idle_timeout": ', "not valid JSON"),
        ("/no/such/options.json", "neither a JSON object nor an existing file"),
        ('{"ssh": {"inventory": "h"}, "scale": 1}', "mixes per-backend tables"),
    ],
)
def test_bad_backend_options_are_explained(value: str, message: str) -> None:
    with pytest.raises(ProvisionError, match=message):
        backend_options_for(value, "ssh")


def test_unknown_backend_option_is_a_provision_error() -> None:
    with pytest.raises(ProvisionError, match=r"bad options for backend 'local'.*no_such_option"):
        get_provisioner("local", no_such_option=1)


def test_secret_file_is_private_and_referenced_not_embedded() -> None:
    ref = create_secret("unit-secret")
    try:
        assert stat.S_IMODE(os.stat(ref).st_mode) == 0o600
        assert len(secret_bytes(ref)) == 32
        assert create_secret("unit-secret") == ref  # stable per transfer
    finally:
        delete_secret(ref)
    assert not Path(ref).exists()


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "x" * 64, "a b", "-lead"])
def test_transfer_ids_are_checked(bad: str) -> None:
    with pytest.raises(ProvisionError, match="invalid transfer id"):
        check_transfer_id(bad)


def test_bundle_is_deterministic_and_holds_only_the_agent(tmp_path: Path) -> None:
    assert bundle_bytes() == bundle_bytes()
    bundle = build_bundle(out_dir=tmp_path)
    names = zipfile.ZipFile(bundle.path).namelist()
    assert "gateway_agent/__main__.py" in names
    assert all(n.startswith("gateway_agent/") and n.endswith(".py") for n in names)
    assert not any("skyplane_ops" in n or "__pycache__" in n for n in names)
    assert bundle.remote_name == f"gateway_agent-{bundle.digest[:12]}.zip"


def test_testbed_plan_scales_the_grid_per_direction() -> None:
    tb = Testbed.plan("unit", ["A", "B", "C"], {"A->B": 1.0, "B->A": 2.0}, default_gbps=4.0)
    assert tb.shaped_mbit("A", "B") == 100 and tb.shaped_mbit("B", "A") == 200
    assert tb.shaped_mbit("A", "C") == tb.shaped_mbit("C", "B") == 400
    with pytest.raises(ProvisionError, match="no address slot"):
        tb.address("A")
    tb.slot = 2
    assert [tb.address(r) for r in "ABC"] == ["10.77.242.1", "10.77.242.2", "10.77.242.3"]
    assert tb.link("A", "C").addresses(2) == ("10.77.60.9", "10.77.60.10")
    assert tb.namespace("C") == "skyplane-ops.unit.r2"
    with pytest.raises(ProvisionError, match="no rate for A -> C"):
        Testbed.plan("unit", ["A", "B", "C"], {"A->B": 1.0})


def test_tbf_burst_exceeds_the_mtu() -> None:
    args = tbf_args(100.0)
    burst = int(args[args.index("burst") + 1])
    assert burst > 1500 and args[1] == "100mbit"
    big = tbf_args(4000.0)
    assert int(big[big.index("burst") + 1]) >= 4000e6 / 8 / 250


def test_ctrl_c_during_parallel_bootstrap_keeps_the_finished_results() -> None:
    """A real SIGINT while waiting: the running calls finish and are handed back for undo."""
    import signal
    import time

    from skyplane_ops.provision.ssh import InterruptedDuringBatch, _parallel

    def slow(i: int) -> int:
        time.sleep(0.3)
        return i

    signal.setitimer(signal.ITIMER_REAL, 0.1)
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        with pytest.raises(InterruptedDuringBatch) as info:
            _parallel(slow, [(1,), (2,), (3,)])
    finally:
        signal.signal(signal.SIGALRM, old)
    assert [res for _, res, exc in info.value.results if exc is None] == [1, 2, 3]
    assert isinstance(info.value, KeyboardInterrupt)
