"""The ``netns`` backend: gateways in Linux network namespaces on this host, one per region,
joined by rate-limited veth links (root only): an emulated WAN for tests and benchmarks.

``provisioner`` holds ``NetnsProvisioner``; ``testbed`` builds the namespaces and links
(``Testbed``, ``wan_grid``); ``host`` runs ``ip``/``tc`` and lists, empties and deletes
namespaces; ``wanrelay`` is the userspace relay that adds delay to a link (``python -m
skyplane_ops.provision.netns.wanrelay``).

The names are imported on first use: the relay, started once per link and port, imports this
package and needs nothing of the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyplane_ops.provision.netns.provisioner import NetnsProvisioner
    from skyplane_ops.provision.netns.testbed import Testbed, wan_grid

_LAZY = {
    "NetnsProvisioner": "skyplane_ops.provision.netns.provisioner",
    "Testbed": "skyplane_ops.provision.netns.testbed",
    "wan_grid": "skyplane_ops.provision.netns.testbed",
}

__all__ = ["NetnsProvisioner", "Testbed", "wan_grid"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
