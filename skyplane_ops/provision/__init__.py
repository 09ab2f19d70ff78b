"""Provisioning: turn a plan's VMs-per-region into a running ``GatewayFleet`` and back.

Backends are looked up by name so that the CLI, Airflow and Dagster faces can choose one from
configuration: ``get_provisioner("ssh", inventory="hosts.toml")``. Modules are imported lazily
so that e.g. boto3 is only needed for ``aws``.
"""

from __future__ import annotations

import importlib
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.base import Provisioner
from skyplane_ops.provision.fleet import Gateway, GatewayFleet

# backend name -> "module:class"
BACKENDS: dict[str, str] = {
    "local": "skyplane_ops.provision.local:LocalProvisioner",
    "ssh": "skyplane_ops.provision.ssh.provisioner:SSHProvisioner",
    "aws": "skyplane_ops.provision.aws.provisioner:AWSProvisioner",
    "netns": "skyplane_ops.provision.netns.provisioner:NetnsProvisioner",
    "azure": "skyplane_ops.provision.azure.provisioner:AzureProvisioner",
    "gcp": "skyplane_ops.provision.gcp.provisioner:GCPProvisioner",
    "mixed": "skyplane_ops.provision.mixed:MixedProvisioner",
}


class UnknownBackendError(ProvisionError):
    """The provisioning backend named by the user does not exist."""


def get_provisioner(name: str, **options: Any) -> Provisioner:
    """The provisioner called ``name``, built with backend-specific ``options``."""
    target = BACKENDS.get(name)
    if target is None:
        raise UnknownBackendError(
            f"unknown provisioning backend {name!r}; choose one of {', '.join(sorted(BACKENDS))}"
        )
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProvisionError(f"backend {name!r} is not available here: {exc}") from exc
    try:
        provisioner: Provisioner = getattr(module, class_name)(**options)
    except TypeError as exc:  # an unknown or missing option: the user's mistake, say which
        raise ProvisionError(f"bad options for backend {name!r}: {exc}") from exc
    return provisioner


__all__ = [
    "BACKENDS",
    "Gateway",
    "GatewayFleet",
    "Provisioner",
    "UnknownBackendError",
    "get_provisioner",
]
