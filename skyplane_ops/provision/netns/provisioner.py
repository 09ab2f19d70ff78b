"""The ``netns`` backend: gateways (the real agent, started with ``ip netns exec``) in the
namespaces of an emulated WAN on one Linux host (root only; the WAN itself: ``testbed``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.boot_delay import check_boot_delay, delayed
from skyplane_ops.provision.bundle import agent_env, build_bundle, serve_args
from skyplane_ops.provision.cancel import check as check_cancel
from skyplane_ops.provision.cancel import pause
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.netns.host import (
    list_namespaces,
    require_root,
    sh,
    short_id,
    teardown_namespaces,
)
from skyplane_ops.provision.netns.testbed import NS_PREFIX, Grid, Testbed
from skyplane_ops.provision.secrets import (
    create_secret,
    delete_secret,
    private_dir,
    secret_bytes,
)

# The package's name, as when this was the module skyplane_ops.provision.netns.
log = logging.getLogger("skyplane_ops.provision.netns")

_NS_NAME = re.compile(r"^skyplane-ops\.(?P<tid>[A-Za-z0-9_-]+)\.r(?P<idx>\d+)$")
_ROOT_VETH = re.compile(r"^sm(?P<h>[0-9a-f]{6})(?P<idx>\d+)$")


def _open_probe_server(gateway: Gateway, secret_ref: str) -> Gateway:
    """Have the agent open its probe server now, so delayed links can relay its port too.

    A relay can only forward ports known when the link is built, and a fixed port would clash
    with the relays in the gateway's own namespace; the profiler later asks the agent to
    listen again, which returns this already open server (``gateway_agent.probe``).
    """
    from gateway_agent.client import GatewayClient

    port = GatewayClient(
        gateway.host, gateway.control_port, secret_bytes(secret_ref)
    ).probe_listen()
    return dataclasses.replace(gateway, resources={**gateway.resources, "probe_port": port})


# ------------------------------------------------------------------------ the backend


class NetnsProvisioner:
    """Gateways (real agents) inside the namespaces of an emulated WAN testbed."""

    name = "netns"

    def __init__(
        self,
        grid: Grid | None = None,
        *,
        scale: float = 0.1,
        default_gbps: float | None = None,
        delay_ms: Mapping[tuple[str, str], float] | None = None,
        python: str = sys.executable,
        idle_timeout: float = 900.0,
        ready_timeout: float = 30.0,
        hosts_per_region: int = 1,
        buffer_mib: int | None = None,
        boot_delay: float = 0.0,
    ) -> None:
        self.boot_delay = check_boot_delay(boot_delay, "netns")  # emulated VM start-up
        if hosts_per_region < 1:
            raise ProvisionError(f"hosts_per_region must be at least 1, got {hosts_per_region}")
        self.hosts_per_region = hosts_per_region
        self.buffer_mib = buffer_mib  # each agent's byte budget (None: the agent's default)
        self.grid: Grid = grid or {}
        self.scale = scale
        self.default_gbps = default_gbps
        self.delay_ms = delay_ms
        self.python = python
        self.idle_timeout = idle_timeout
        self.ready_timeout = ready_timeout

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Build the testbed and start the agents. ``cancel`` set (``provision.cancel``): the
        waits end and the namespaces, with every agent in them, are torn down."""
        require_root()
        crowded = {r: n for r, n in vms.items() if n > self.hosts_per_region}
        if crowded:
            raise ProvisionError(
                f"the netns testbed has {self.hosts_per_region} host(s) per region; the plan "
                f"asks for {crowded} (set hosts_per_region)"
            )
        testbed = Testbed.plan(
            transfer_id,
            [r for r, n in vms.items() if n > 0],
            self.grid,
            scale=self.scale,
            default_gbps=self.default_gbps,
            delay_ms=self.delay_ms,
        )
        secret_ref = create_secret(transfer_id)
        workdir = private_dir("netns", transfer_id)
        try:
            check_cancel(cancel, transfer_id)
            testbed.build()
            bundle = build_bundle()
            # Agents start in parallel: each waits for its ready file and health check.
            slots = [(region, i) for region in testbed.regions for i in range(vms[region])]
            with ThreadPoolExecutor(max_workers=min(16, len(slots))) as pool:
                gateways = list(
                    pool.map(
                        lambda slot: self._start_agent(
                            testbed, slot[0], slot[1], workdir, bundle.path, secret_ref, cancel
                        ),
                        slots,
                    )
                )
            if any(link.delay_ms > 0 for link in testbed.links):
                gateways = [_open_probe_server(g, secret_ref) for g in gateways]
            for link in testbed.links:
                if link.delay_ms > 0:
                    for src, dst in ((link.a, link.b), (link.b, link.a)):
                        for gw in (g for g in gateways if g.region == dst):
                            for port in (gw.data_port, gw.resources["probe_port"]):
                                testbed.add_delay(src, dst, port, link.delay_ms)
        except BaseException:
            testbed.teardown()
            shutil.rmtree(workdir, ignore_errors=True)
            delete_secret(secret_ref)
            raise
        fleet = GatewayFleet.create(
            transfer_id,
            self.name,
            gateways,
            secret_ref,
            tags,
            resources={"testbed": testbed.to_dict(), "workdir": str(workdir)},
        )
        records.save_fleet(fleet)
        return fleet

    def _start_agent(
        self,
        testbed: Testbed,
        region: str,
        index: int,
        workdir: Path,
        bundle_path: Path,
        secret_ref: str,
        cancel: threading.Event | None = None,
    ) -> Gateway:
        slug = "".join(c if c.isalnum() else "-" for c in region).strip("-")
        gw_id = f"gw-{slug}-{index}"
        ready = workdir / f"{gw_id}.ready.json"
        log_path = workdir / f"{gw_id}.log"
        python = self.python.split()
        agent = [
            *python,
            *serve_args(
                host="0.0.0.0",
                secret_file=secret_ref,
                ready_file=str(ready),
                gateway_id=gw_id,
                region=region,
                idle_timeout=self.idle_timeout,
            ),
            *([] if self.buffer_mib is None else ["--buffer-mib", str(self.buffer_mib)]),
        ]
        argv = testbed.exec_argv(region, delayed(agent, self.boot_delay, python[0]))
        # An allow-list environment: the agent inherits none of this process's credentials.
        env = agent_env(home=str(workdir), pythonpath=str(bundle_path))
        with open(log_path, "wb") as log_fh:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.ready_timeout + self.boot_delay
        while not ready.exists():
            if proc.poll() is not None:
                raise ProvisionError(
                    f"agent {gw_id} in {testbed.namespace(region)} exited: "
                    f"{log_path.read_text()[-1500:]}"
                )
            if time.monotonic() > deadline:
                raise ProvisionError(f"agent {gw_id} wrote no ready file in {self.ready_timeout}s")
            pause(cancel, 0.05, f"agent {gw_id}")
        info = json.loads(ready.read_text())
        gateway = Gateway(
            gateway_id=gw_id,
            region=region,
            host=testbed.address(region),
            control_port=int(info["control_port"]),
            data_port=int(info["data_port"]),
            resources={"namespace": testbed.namespace(region), "pid": int(info["pid"])},
        )
        from skyplane_ops.provision.ssh.bootstrap import wait_healthy

        check_cancel(cancel, f"agent {gw_id}")
        wait_healthy(gateway.host, gateway.control_port, secret_bytes(secret_ref), timeout=10)
        return gateway

    def deprovision(self, fleet: GatewayFleet) -> None:
        testbed = fleet.resources.get("testbed", {})
        n = len(testbed.get("regions", []))
        teardown_namespaces(
            [f"{NS_PREFIX}{fleet.transfer_id}.r{i}" for i in range(n)],
            [f"sm{short_id(fleet.transfer_id)}{i}" for i in range(n)],
        )
        if fleet.resources.get("workdir"):
            shutil.rmtree(fleet.resources["workdir"], ignore_errors=True)
        delete_secret(fleet.secret_ref)
        records.forget_fleet(fleet)

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Delete our namespaces (by name prefix + transfer id) and orphaned root veths."""
        if os.geteuid() != 0:
            return []
        victims: dict[str, list[str]] = {}
        for ns in list_namespaces():
            m = _NS_NAME.match(ns)
            if not m or (transfer_id is not None and m["tid"] != transfer_id):
                continue
            if older_than_seconds is not None:
                try:
                    age = time.time() - os.stat(f"/run/netns/{ns}").st_mtime
                except OSError:
                    age = float("inf")
                if age < older_than_seconds:
                    continue
            victims.setdefault(m["tid"], []).append(ns)
        removed: list[str] = []
        hashes = {short_id(t) for t in victims}
        if transfer_id is not None:
            hashes.add(short_id(transfer_id))
        root_veths = []
        for line in sh("ip", "-o", "link", "show", check=False).splitlines():
            name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            m = _ROOT_VETH.match(name)
            # A root veth whose namespace peer is gone is an orphan whatever its transfer.
            if m and (m["h"] in hashes or "link-netns" not in line):
                root_veths.append(name)
        for _tid, namespaces in sorted(victims.items()):
            removed += teardown_namespaces(namespaces, [])
        removed += teardown_namespaces([], root_veths)
        return removed
