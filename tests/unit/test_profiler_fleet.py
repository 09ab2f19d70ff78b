"""The user's fleet is the planning universe: own region names, hosts as the VM limit, relays
only where hosts exist, throughput only from measurements of the fleet (real planner, real
grid store; no network needed)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.cli import main as cli_main
from skyplane_ops.errors import PlanningError, ProvisionError
from skyplane_ops.profiler import GridStore, Measurement
from skyplane_ops.profiler.universe import FleetUniverse
from skyplane_ops.provision.inventory import RegionAttrs
from skyplane_ops.provision.ssh import SSHInventory

A, B, C, D = "site:lab-a", "site:lab-b", "site:relay-c", "site:relay-d"


def _host(n: int) -> dict[str, object]:
    return {"address": f"10.0.0.{n}", "host_key": "ssh-ed25519 AAAA"}


def _inventory() -> dict[str, object]:
    return {
        "regions": {
            A: [_host(1)],
            B: {"hosts": [_host(2)], "vm_usd_per_hour": 0.5},
            C: {"hosts": [_host(3), _host(4)], "egress_usd_per_gb": 0.01, "provider": "colo"},
            "aws:us-east-1": {"hosts": []},  # no host: never a relay
        }
    }


def _store(tmp_path: Path, rates: dict[tuple[str, str], float]) -> str:
    store = GridStore(str(tmp_path / "grid"))
    now = datetime.now(UTC)
    for (s, d), gbps in rates.items():
        for conns, rate in ((4, gbps), (64, gbps)):  # full with a few connections
            store.append(Measurement(s, d, rate, rate, rate, 1.0, conns, 2.0, now, run_id="r1"))
    store.publish()
    return store.location


def test_inventory_regions_carry_their_attributes() -> None:
    inv = SSHInventory.from_dict(_inventory())
    assert inv.regions[A] == RegionAttrs(id=A, hosts=1)
    assert inv.regions[B].vm_usd_per_hour == 0.5
    assert inv.regions[C].provider == "colo" and inv.regions[C].hosts == 2
    universe = FleetUniverse.from_backend("ssh", {"inventory": _inventory()})
    assert universe is not None and universe.ids() == [A, B, C]  # hostless regions left out


@pytest.mark.parametrize(
    ("region", "message"),
    [
        ({"hosts": [], "color": "red"}, "unknown field"),
        ({"hosts": [], "egress_usd_per_gb": -1}, "must be a number >= 0"),
        ({"hosts": [{"port": 22}]}, "bad inventory entry"),
        ({"hosts": [{"address": "h", "peer_addresses": ["x"]}]}, "peer_addresses"),
    ],
)
def test_bad_inventory_regions_are_clear_errors(region: object, message: str) -> None:
    with pytest.raises(ProvisionError, match=message):
        SSHInventory.from_dict({"regions": {A: region}})


def test_a_host_lists_ssh_control_and_per_peer_data_addresses() -> None:
    inv = SSHInventory.from_dict(
        {
            "regions": {
                A: [
                    {
                        "address": "ssh.example",
                        "control_address": "10.0.0.1",
                        "data_address": "10.1.0.1",
                        "peer_addresses": {B: "192.168.0.1"},
                    }
                ]
            }
        }
    )
    host = inv.hosts[A][0]
    assert host.control_host == "10.0.0.1"
    assert host.data_addresses() == {"*": "10.1.0.1", B: "192.168.0.1"}


def test_plan_uses_only_fleet_regions_and_hosts(tmp_path: Path) -> None:
    # Direct A->B is slow; the relay C (two hosts) is fast; D is measured but not in the fleet.
    rates = {(A, B): 0.1, (A, C): 1.0, (C, B): 1.0, (A, D): 5.0, (D, B): 5.0}
    store = _store(tmp_path, rates)
    universe = FleetUniverse.from_backend("ssh", {"inventory": _inventory()})
    plan = api.plan(A, B, 10.0, grid_store=store, fleet=universe, provisioning_seconds=0)
    used = {r for p in plan.paths for r in p.regions}
    assert used <= {A, B, C} and C in used
    assert all(plan.vms.get(r, 0) <= {A: 1, B: 1, C: 2}[r] for r in plan.vms)
    # Own regions are free to leave unless priced: A's egress is 0, C's is the inventory's.
    via_c = sum(p.share for p in plan.paths if C in p.regions)
    assert plan.egress_cost_usd == pytest.approx(10.0 * 0.01 * via_c)


def test_a_running_fleet_is_a_universe_of_its_gateways(tmp_path: Path) -> None:
    """``cp --fleet``: a fleet with A and B only (C, a relay the inventory has, was not
    started) plans on the direct link; the inventory's prices stay with its regions."""
    from skyplane_ops.provision.fleet import Gateway, GatewayFleet

    fleet = GatewayFleet.create(
        "t1", "ssh", [Gateway(f"g{i}", r, "h", 1, 2) for i, r in enumerate([A, B, B])], "ref"
    )
    inventory = FleetUniverse.from_backend("ssh", {"inventory": _inventory()})
    universe = FleetUniverse.standing(fleet, inventory)
    assert universe.regions[B] == RegionAttrs(id=B, hosts=2, vm_usd_per_hour=0.5)
    assert universe.ids() == [A, B]
    store = _store(tmp_path, {(A, B): 0.1, (A, C): 1.0, (C, B): 1.0})
    plan = api.plan(A, B, 10.0, grid_store=store, fleet=universe, provisioning_seconds=0)
    assert [p.regions for p in plan.paths] == [(A, B)]
    bare = FleetUniverse.standing(fleet)  # no inventory: the fleet's regions and counts alone
    assert bare.regions == {A: RegionAttrs(id=A, hosts=1), B: RegionAttrs(id=B, hosts=2)}
    empty = GatewayFleet.create("t2", "ssh", [], "ref")
    with pytest.raises(ProvisionError, match="has no gateways"):
        FleetUniverse.standing(empty)


def test_plan_without_measurements_between_own_sites_is_infeasible(tmp_path: Path) -> None:
    store = _store(tmp_path, {(A, C): 1.0})
    universe = FleetUniverse.from_backend("ssh", {"inventory": _inventory()})
    with pytest.raises(PlanningError):
        api.plan(A, B, 1.0, grid_store=store, fleet=universe, provisioning_seconds=0)


def test_source_outside_the_fleet_is_refused() -> None:
    universe = FleetUniverse.from_backend("ssh", {"inventory": _inventory()})
    with pytest.raises(PlanningError, match="has no host"):
        api.plan("aws:us-east-1", B, 1.0, fleet=universe)


def test_plan_command_plans_on_the_inventory(tmp_path: Path, capsys) -> None:
    store = _store(tmp_path, {(A, B): 0.1, (A, C): 1.0, (C, B): 1.0})
    inv = tmp_path / "inventory.json"
    import json

    inv.write_text(json.dumps(_inventory()))
    argv = ["plan", "--src", A, "--dst", B, "--volume-gb", "10", "--grid-store", store]
    rc = cli_main(
        [
            *argv,
            "--backend",
            "ssh",
            "--backend-options",
            json.dumps({"inventory": str(inv)}),
            "--json",
        ]
    )
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert {r for p in plan["paths"] for r in p["regions"]} <= {A, B, C}


def test_netns_grid_is_a_universe_too() -> None:
    universe = FleetUniverse.from_backend("netns", {"grid": {f"{A}->{B}": 1.0, f"{A}->{C}": 1}})
    assert universe is not None and universe.ids() == [A, B, C]
    assert FleetUniverse.from_backend("local", {}) is None
