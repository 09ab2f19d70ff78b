"""The ``gcp`` backend: ephemeral Compute Engine gateways, bootstrapped over SSH, leak-proof.

``provisioner`` holds ``GCPProvisioner``; ``api`` the Compute Engine API as it uses it (REST
clients, operations, errors).
"""

from __future__ import annotations

from skyplane_ops.provision.gcp.provisioner import UBUNTU_IMAGE, GCPProvisioner

__all__ = ["UBUNTU_IMAGE", "GCPProvisioner"]
