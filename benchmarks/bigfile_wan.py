"""The netns WANs of ``bigfile.py``, for both tools.

* ``wan``: two sites joined by one tbf-shaped link. The planner's universe is the two sites,
  so our plan is the direct path: both tools share one line.
* ``relays``: the emulated WAN of ``wan.py`` (``testbed.wan_grid``): the same direct link,
  plus two relay sites, each with its own links to both ends. The planner chooses the paths,
  as it would between cloud regions; this is the overlay's case.

Ours: ``cp --backend netns`` with the grid (the testbed shapes every link at the grid's rate).
rclone: a two-site testbed with the direct link, ``rclone serve webdav`` writing into the
destination folder from the destination's namespace and ``rclone copy`` reading the source in
the source's namespace, so its bytes cross the same shaped direct link. A point-to-point tool
has no relays to use.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from scale import REPO, timed

sys.path.insert(0, str(REPO))

from skyplane_ops.provision.netns.testbed import Testbed, wan_grid

SRC_SITE, WAN_DST = "site:src", "site:dst"
RELAYS = ["site:relay-1", "site:relay-2"]
PORT = 18080
CROSS_MBIT = 20.0  # relay to relay: slow, as in wan.py (no path is better through both)


def net_grid(net: str, direct_mbit: float, relay_mbit: float) -> dict[str, float]:
    """The grid (Gbps, shaped at Gbps * 1000 Mbit/s) of the ``wan`` or ``relays`` net."""
    if net == "wan":
        return wan_grid([SRC_SITE, WAN_DST], direct_mbit, 0.0, 0.0)
    if net == "relays":
        return wan_grid([SRC_SITE, WAN_DST, *RELAYS], direct_mbit, relay_mbit, CROSS_MBIT)
    raise ValueError(f"no WAN named {net!r}")


def _backend(grid: dict[str, float], buffer_mib: int) -> list[str]:
    options = {"grid": grid, "scale": 1.0, "buffer_mib": buffer_mib}
    return ["--backend", "netns", "--backend-options", json.dumps(options)]


def profile(grid: dict[str, float], store: Path, env: dict[str, str]) -> None:
    """``skyplane-ops profile`` of the two-site testbed into ``store`` (the planner plans only
    on measured links), as a user does before a first copy. One flow is probed too: the
    per-connection rate comes from the fewest flows probed, and one flow fills this link (on a
    tbf link more flows only collide: 16 gave 0.48-0.76 Gbit/s, 1 and 4 gave 0.76), so the
    plan uses one connection where a 4-flow probe would have it use four."""
    argv = [sys.executable, "-m", "skyplane_ops.cli", "profile", *_backend(grid, 64)]
    argv += ["--grid-store", str(store), "--probe-connections", "1,4,16"]
    argv += ["--probe-duration", "3"]
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)


def wan_backend(grid: dict[str, float], buffer_mib: int, store: Path) -> list[str]:
    """CLI arguments: the two ends, the netns backend, the links, the gateways' budget and
    the grid store ``profile`` filled."""
    regions = ["--src-region", SRC_SITE, "--dst-region", WAN_DST, "--grid-store", str(store)]
    return [*regions, *_backend(grid, buffer_mib)]


def _wait_server(testbed: Testbed, server: subprocess.Popen[bytes], env: dict[str, str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        probe = subprocess.run(
            testbed.exec_argv(SRC_SITE, ["rclone", "lsd", ":webdav:"]),
            env=env,
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError(f"rclone webdav server did not start: {probe.stderr!r}")
        time.sleep(0.2)


def rclone_over_link(mbit: float, src: Path, dst: Path, env: dict[str, str]) -> dict[str, Any]:
    """``rclone copy`` of ``src`` into ``dst`` across a link of ``mbit`` Mbit/s (timed, with
    the client's peak RSS; the server's is added as ``server_rss_mib``)."""
    name = f"bigrc-{uuid.uuid4().hex[:6]}"
    testbed = Testbed.plan(name, [SRC_SITE, WAN_DST], net_grid("wan", mbit, 0), scale=1.0)
    testbed.build()
    server = None
    try:
        addr = f"{testbed.address(WAN_DST)}:{PORT}"
        env = {**env, "RCLONE_WEBDAV_URL": f"http://{addr}", "RCLONE_CONFIG": "/dev/null"}
        server = subprocess.Popen(
            testbed.exec_argv(WAN_DST, ["rclone", "serve", "webdav", str(dst), "--addr", addr]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_server(testbed, server, env)
        argv = ["rclone", "copy", str(src), ":webdav:", "--transfers", "16", "--checkers", "16"]
        run = timed(testbed.exec_argv(SRC_SITE, argv), env)
        with open(f"/proc/{server.pid}/status") as fh:
            hwm = [line.split()[1] for line in fh if line.startswith("VmHWM:")]
        run["server_rss_mib"] = round(int(hwm[0]) / 1024, 1) if hwm else None
        return run
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        testbed.teardown()
