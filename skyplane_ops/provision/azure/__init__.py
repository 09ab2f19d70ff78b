"""The ``azure`` backend: ephemeral Azure VM gateways, bootstrapped over SSH, leak-proof.

``provisioner`` holds ``AzureProvisioner``; ``arm`` the ARM request bodies it sends and its
constants (``SELF_RELEASE_ACTIONS``/``self_release_role``: the one custom role a gateway VM's
own identity gets, to delete itself; ``VM_CONTRIBUTOR``: the built-in role it no longer gets).
"""

from __future__ import annotations

from skyplane_ops.provision.azure.arm import VM_CONTRIBUTOR
from skyplane_ops.provision.azure.provisioner import AzureProvisioner

__all__ = ["VM_CONTRIBUTOR", "AzureProvisioner"]
