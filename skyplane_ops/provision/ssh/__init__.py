"""The ``ssh`` backend ("bring your own VMs"): gateway agents on hosts you have, over SSH.

``provisioner`` holds ``SSHProvisioner``; ``hosts`` the host records, the inventory, host-key
checking and remote commands; ``bootstrap`` the agent's lifecycle over SSH (upload, start,
health, stop), which the cloud backends reuse. The names their users import are importable
from here.
"""

from __future__ import annotations

from skyplane_ops.provision.ssh.bootstrap import (
    BootstrapOptions,
    InterruptedDuringBatch,
    bootstrap_gateway,
    bootstrap_gateways,
    teardown_gateway,
    teardown_gateways,
    wait_healthy,
)
from skyplane_ops.provision.ssh.hosts import (
    DEFAULT_REMOTE_ROOT,
    GatewayStartError,
    HostKeyError,
    HostUnreachableError,
    SSHAuthError,
    SSHHost,
    SSHInventory,
    connect,
    gateway_id,
    run,
)
from skyplane_ops.provision.ssh.provisioner import SSHProvisioner

__all__ = [
    "DEFAULT_REMOTE_ROOT",
    "BootstrapOptions",
    "GatewayStartError",
    "HostKeyError",
    "HostUnreachableError",
    "InterruptedDuringBatch",
    "SSHAuthError",
    "SSHHost",
    "SSHInventory",
    "SSHProvisioner",
    "bootstrap_gateway",
    "bootstrap_gateways",
    "connect",
    "gateway_id",
    "run",
    "teardown_gateway",
    "teardown_gateways",
    "wait_healthy",
]
