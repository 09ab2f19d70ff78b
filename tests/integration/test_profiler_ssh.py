"""The profiler on the ssh backend: real agents bootstrapped over real sshd on loopback.

A remote backend cannot run probe processes itself, so this is the path where the probes go
through the agents' control API (``POST /v1/probe``) end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.profiler import GridStore, refresh_grid

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

REGIONS = ["ssh:a", "ssh:b", "ssh:c"]


def _entry(server: Any, remote_root: Path) -> dict[str, Any]:
    return dict(server.inventory_entry(remote_root))


def test_profile_over_an_ssh_fleet(sshd_factory, tmp_path: Path) -> None:
    servers = sshd_factory(3)
    root = tmp_path / "remote"
    inventory = {r: [_entry(s, root)] for r, s in zip(REGIONS, servers, strict=True)}
    store = str(tmp_path / "grid")
    result = refresh_grid(
        REGIONS,
        backend="ssh",
        backend_options={"inventory": inventory},
        connections=4,
        duration_s=0.8,
        store_uri=store,
    )
    assert result.measured == 6 and not result.failed
    latest = GridStore(store).latest()
    assert all(latest[(a, b)].gbps > 0.05 for a in REGIONS for b in REGIONS if a != b)
    assert all(m.backend == "ssh" and m.vm_class == "ssh" for m in latest.values())
    # Deprovisioned: nothing the bootstrap uploaded is left on the "remote" hosts.
    assert not root.exists() or not list(root.rglob("*"))
