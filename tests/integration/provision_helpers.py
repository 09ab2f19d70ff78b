"""Helpers the cloud provisioning tests share (azure, gcp, mixed): a bootstrap stand-in,
the options that make loopback "VMs" bootstrap for real, and the checks every cloud's
end-to-end and firewall tests make."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from gateway_agent.client import GatewayClient
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.cloudhosts import InstanceHost
from skyplane_ops.provision.cloudvm import KeyPair, cloud_init, parse_cloud_init
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.secrets import secret_bytes
from tests.fakes.vm import LoopbackVM, console_host_keys
from tests.fixtures.ports import free_port

if TYPE_CHECKING:
    from tests.fakes.netvm import CloudNet


class Recording:
    """Stands in for the SSH bootstrap where a test is about the cloud resources only."""

    def __init__(self, fail: bool = False) -> None:
        self.hosts: list[InstanceHost] = []
        self.fail = fail

    def __call__(self, hosts: Sequence[InstanceHost], tid: str, ref: str) -> list[Gateway]:
        self.hosts = list(hosts)
        if self.fail:
            raise ProvisionError("injected bootstrap failure")
        return [Gateway(h.gateway_id, h.region, h.ssh.address, 8701, 8702) for h in hosts]


def loopback_boot_options(ssh_port: int) -> dict[str, Any]:
    """Provisioner options for fake VMs that run sshd on loopback: the real SSH bootstrap."""
    return {
        "bootstrap": None,
        "ssh_user": os.environ.get("USER") or "root",
        "ssh_port": ssh_port,
        "remote_python": sys.executable,
        "control_port": free_port(),
        "data_port": free_port(),
        "bind_host": "public",
        "poweroff_on_idle": False,  # these "VMs" are the test machine
        "idle_timeout": 120,
    }


def assert_healthy(fleet: GatewayFleet) -> None:
    """Every gateway of the fleet answers its control API with the fleet's secret."""
    for gw in fleet.gateways:
        client = GatewayClient(gw.host, gw.control_port, secret_bytes(fleet.secret_ref))
        assert client.health(), gw.gateway_id


def boot_with_a_foreign_host_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every later VM present a host key other than the one its user-data carries or its
    console shows (a machine in the middle)."""
    original = LoopbackVM.boot

    def impostor(address: str, port: int | None, user_data: str, *a: Any, **kw: Any) -> Any:
        config = parse_cloud_init(user_data)
        login = next(u for u in config["users"] if isinstance(u, dict))
        other = cloud_init(
            user=login["name"],
            authorized_key=login["ssh_authorized_keys"][0],
            host_key=KeyPair.generate(),
        )
        vm = original(address, port, other, *a, **kw)
        vm.console = console_host_keys(KeyPair.generate().public)  # not what sshd presents
        return vm

    monkeypatch.setattr(LoopbackVM, "boot", staticmethod(impostor))


def assert_firewall(net: CloudNet, fleet: GatewayFleet, netns: Mapping[str, str]) -> None:
    """Gateways reach each other's ports, SSH comes only from the control plane, and a host
    on the same network that is not in the fleet is refused on every port."""
    a, b = fleet.gateways
    for port in (8701, 8702):
        assert net.can_connect(netns[a.host], b.host, port), "fleet -> fleet admitted"
        assert net.can_connect(netns[b.host], a.host, port)
    stranger, _ = net.attach()
    for port in (22, 8701, 8702, 8703):
        assert not net.can_connect(stranger, a.host, port), f"stranger got in on {port}"
    assert not net.can_connect(netns[a.host], b.host, 22), "SSH only from the control plane"
    client = GatewayClient(a.host, a.control_port, secret_bytes(fleet.secret_ref))
    assert client.health()


def kill_mid_provision(script: str, args: Sequence[str], ready: bytes) -> None:
    """Run a control plane (``python -c script args``) until it prints ``ready``, then
    SIGKILL it: whatever it created is left for the sweeper."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert child.stdout and child.stdout.readline().strip() == ready
    child.send_signal(signal.SIGKILL)
    child.wait()


def assert_regions_in_parallel(prov: Any, regions: Mapping[str, int], transfer_id: str) -> None:
    """Every region's provisioning is running at the same moment (a barrier all must reach)."""
    barrier = threading.Barrier(len(regions), timeout=60)
    base = type(prov)

    class Gate(base):  # type: ignore[misc, valid-type]
        def _provision_region(self, *args: Any) -> None:
            barrier.wait()  # raises BrokenBarrierError unless all regions get here together
            super()._provision_region(*args)

    prov.__class__ = Gate
    prov.deprovision(prov.provision(regions, transfer_id=transfer_id))
