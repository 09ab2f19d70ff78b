"""The ``azure`` backend: ephemeral Azure VM gateways, bootstrapped over SSH, leak-proof.

``provisioner`` holds ``AzureProvisioner``; ``arm`` the ARM request bodies it sends and its
constants (``VM_CONTRIBUTOR``: the role a gateway VM's own identity gets, to deallocate itself).
"""

from __future__ import annotations

from skyplane_ops.provision.azure.arm import VM_CONTRIBUTOR
from skyplane_ops.provision.azure.provisioner import AzureProvisioner

__all__ = ["VM_CONTRIBUTOR", "AzureProvisioner"]
