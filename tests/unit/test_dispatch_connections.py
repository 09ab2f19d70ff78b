"""TCP connections per hop: the plan's count split over the hop's gateway pairs, at most
``LOOPBACK_CONNECTIONS`` when the hop's receivers listen on a loopback address (parallel
connections beat a WAN's per-flow limits; on one host they only add threads), and a count the
user gave wins over both."""

from __future__ import annotations

from typing import Any

from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.dispatch import LOOPBACK_CONNECTIONS, Dispatcher, DispatchOptions

SRC, DST = "aws:us-east-1", "aws:us-west-2"


def _dispatcher(
    src_host: str,
    dst_host: str,
    options: DispatchOptions | None = None,
    resources: dict[str, Any] | None = None,
) -> Dispatcher:
    plan = TransferPlan(
        src=SRC, dsts=(DST,), volume_gb=1, mode="min_cost", paths=[PlanPath((SRC, DST), 1, 1)],
        hops=[Hop(SRC, DST, 1, 64)], vms={SRC: 1, DST: 1}, predicted_gbps=1, egress_cost_usd=0,
        vm_cost_usd=0,
    )  # fmt: skip
    gateways = [
        Gateway("g0", SRC, src_host, 1, 2),
        Gateway("g1", DST, dst_host, 3, 4, resources=dict(resources or {})),
    ]
    fleet = GatewayFleet("t", "local", gateways, "x")
    return Dispatcher(plan, fleet, b"s" * 32, src_uri="mem://a/", dst_uri="mem://b/",
                      options=options)  # fmt: skip


def test_a_wan_hop_gets_the_plans_connections() -> None:
    assert _dispatcher("10.0.0.1", "10.0.1.1")._connections(SRC, DST) == 64


def test_a_hop_on_one_host_gets_a_few() -> None:
    assert LOOPBACK_CONNECTIONS < 64
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert _dispatcher(host, host)._connections(SRC, DST) == LOOPBACK_CONNECTIONS


def test_the_address_the_sender_dials_decides() -> None:
    """A receiver on several networks: what counts is the address this hop's sender dials."""
    wan = {"data_addresses": {SRC: "10.0.1.1"}}
    assert _dispatcher("127.0.0.1", "127.0.0.1", resources=wan)._connections(SRC, DST) == 64
    here = {"data_addresses": {"*": "127.0.0.1"}}
    assert _dispatcher("10.0.0.1", "10.0.1.1", resources=here)._connections(SRC, DST) == 8


def test_the_users_count_wins() -> None:
    options = DispatchOptions(connections=32)
    assert _dispatcher("127.0.0.1", "127.0.0.1", options)._connections(SRC, DST) == 32
