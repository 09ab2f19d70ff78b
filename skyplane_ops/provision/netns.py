"""The ``netns`` backend: an emulated multi-region WAN on one Linux host (root only).

Every region is a network namespace ``skyplane-ops.<transfer_id>.r<i>`` with one "region
address" ``10.77.<240+slot>.<i+1>`` on its loopback. Every pair of regions gets its own veth
link (a /30 in ``10.77.<30*slot + k//64>.0/24``) shaped with ``tc tbf`` on BOTH ends (tbf
shapes egress only): the end in region a sends at grid[a->b] * scale, the end in b at
grid[b->a] * scale. Host routes send each pair's traffic over its own link, so an overlay path
A->C->B really crosses two links. The control plane (root namespace) reaches every region over
an unshaped management veth (``10.77.<248+slot>.<4i>/30``). Up to 8 testbeds run side by side
(one address slot each, taken under a lock). The 10.77.0.0/16 addresses exist only inside these
namespaces and on the management veths, which are all deleted on tear-down.

Added delay (the kernel here has no netem) comes from ``wanrelay``, a userspace relay in the
sending namespace: the peer's region address is made local there and the relay, listening on
the peer gateway's data and probe ports, forwards over the pair's link with the delay added
(``delay_ms`` is the added round-trip time). Gateways are the real agent, started with
``ip netns exec``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.bundle import build_bundle, serve_args
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    private_dir,
    secret_bytes,
)

log = logging.getLogger(__name__)

NS_PREFIX = "skyplane-ops."
MAX_REGIONS = 60
_NS_NAME = re.compile(r"^skyplane-ops\.(?P<tid>[A-Za-z0-9_-]+)\.r(?P<idx>\d+)$")
_ROOT_VETH = re.compile(r"^sm(?P<h>[0-9a-f]{6})(?P<idx>\d+)$")

Grid = Mapping[tuple[str, str], float] | Mapping[str, float]


def require_root() -> None:
    if os.geteuid() != 0:
        raise ProvisionError("the netns backend needs root (network namespaces, veth and tc)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ProvisionError(f"the netns backend needs '{tool}' (apt-get install iproute2)")


def _short(transfer_id: str) -> str:
    return hashlib.sha1(transfer_id.encode()).hexdigest()[:6]


def _sh(*argv: str, ns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ProvisionError(f"'{' '.join(cmd)}' failed: {proc.stderr.strip()}")
    return proc.stdout


def _batch(tool: str, lines: Sequence[str], ns: str | None = None) -> None:
    """Run ``ip``/``tc`` commands from stdin in one process (in namespace ``ns``)."""
    if not lines:
        return
    cmd = [tool, *(["-n", ns] if ns else []), "-batch", "-"]
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ProvisionError(f"'{' '.join(cmd)}' failed: {proc.stderr.strip()}")


def _normalise_grid(grid: Grid) -> dict[tuple[str, str], float]:
    """Accept {(a, b): gbps} or {"a->b": gbps}."""
    out: dict[tuple[str, str], float] = {}
    for key, value in grid.items():
        if isinstance(key, str):
            a, sep, b = key.partition("->")
            if not sep:
                raise ProvisionError(f"grid key {key!r} is not 'SRC->DST'")
            out[(a.strip(), b.strip())] = float(value)
        else:
            out[(key[0], key[1])] = float(value)
    return out


@dataclass(frozen=True)
class Link:
    """A shaped veth link between regions a (index i) and b (index j), i < j."""

    a: str
    b: str
    index: int
    mbit_ab: float
    mbit_ba: float
    delay_ms: float = 0.0

    def addresses(self, slot: int) -> tuple[str, str]:
        """The a-side and b-side addresses of this link's /30 in address slot ``slot``."""
        base = f"10.77.{30 * slot + self.index // 64}.{4 * (self.index % 64)}"
        prefix, last = base.rsplit(".", 1)
        return f"{prefix}.{int(last) + 1}", f"{prefix}.{int(last) + 2}"


def tbf_args(mbit: float) -> list[str]:
    """tbf parameters: burst above the MTU and ~4 ms of tokens; a queue of ~50 ms."""
    rate_bytes = mbit * 1e6 / 8
    burst = max(32 * 1024, int(rate_bytes / 250))
    limit = burst + int(rate_bytes * 0.05)
    return ["rate", f"{mbit:g}mbit", "burst", str(burst), "limit", str(limit)]


@dataclass
class Testbed:
    """Namespaces, links, shaping and routes of one emulated WAN; no gateways."""

    __test__ = False  # not a pytest test class despite its name

    transfer_id: str
    regions: list[str]
    links: list[Link]
    slot: int = -1  # address slot, chosen by build()

    # -------------------------------------------------------------- naming

    def index(self, region: str) -> int:
        return self.regions.index(region)

    def namespace(self, region: str) -> str:
        return f"{NS_PREFIX}{self.transfer_id}.r{self.index(region)}"

    def address(self, region: str) -> str:
        """The region's address, reachable from the root namespace and from every peer."""
        if self.slot < 0:
            raise ProvisionError("the testbed has no address slot until build()")
        return f"10.77.{240 + self.slot}.{self.index(region) + 1}"

    def _veth(self, link: Link, end: str) -> str:
        i, j = self.index(link.a), self.index(link.b)
        return f"sl{i}-{j}{end}"

    def _root_veth(self, i: int) -> str:
        return f"sm{_short(self.transfer_id)}{i}"

    def exec_argv(self, region: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(region), *argv]

    def link(self, a: str, b: str) -> Link:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise KeyError((a, b))

    def shaped_mbit(self, a: str, b: str) -> float:
        link = self.link(a, b)
        return link.mbit_ab if link.a == a else link.mbit_ba

    def iperf_mbit(self, src: str, dst: str, seconds: float = 1.5, port: int = 5299) -> float:
        """What ``iperf3`` achieves from ``src`` to ``dst`` (Mbit/s): checks the shaping."""
        server = subprocess.Popen(
            self.exec_argv(dst, ["iperf3", "-s", "-1", "-B", self.address(dst), "-p", str(port)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 5
            while f":{port} " not in _sh("ss", "-ltnH", ns=self.namespace(dst), check=False):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise ProvisionError(f"iperf3 server in {dst} did not start")
                time.sleep(0.05)
            out = _sh(
                "iperf3",
                "-c",
                self.address(dst),
                "-p",
                str(port),
                "-t",
                str(seconds),
                "-J",
                ns=self.namespace(src),
            )
            return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6
        finally:
            server.wait(timeout=10)

    # -------------------------------------------------------------- build / tear down

    @classmethod
    def plan(
        cls,
        transfer_id: str,
        regions: Sequence[str],
        grid: Grid,
        *,
        scale: float = 0.1,
        default_gbps: float | None = None,
        delay_ms: Mapping[tuple[str, str], float] | None = None,
    ) -> Testbed:
        """Decide links and rates (grid Gbps * scale -> Mbit/s) without touching the system."""
        check_transfer_id(transfer_id)
        regions = list(dict.fromkeys(regions))
        if not 1 <= len(regions) <= MAX_REGIONS:
            raise ProvisionError(f"the netns testbed needs 1..{MAX_REGIONS} regions")
        rates = _normalise_grid(grid)
        delays = {frozenset(k): v for k, v in (delay_ms or {}).items()}

        def mbit(a: str, b: str) -> float:
            gbps = rates.get((a, b), rates.get((b, a), default_gbps))
            if gbps is None or gbps <= 0:
                raise ProvisionError(f"the throughput grid has no rate for {a} -> {b}")
            return gbps * 1000 * scale

        links = [
            Link(a, b, k + 1, mbit(a, b), mbit(b, a), delays.get(frozenset((a, b)), 0.0))
            for k, (a, b) in enumerate(combinations(regions, 2))
        ]
        if len(links) >= 30 * 64:
            raise ProvisionError("too many region pairs for the 10.77.0.0/16 testbed plan")
        return cls(transfer_id, regions, links)

    def build(self) -> None:
        """Create everything; on failure remove what was created, then raise."""
        require_root()
        with open(_LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # slot choice + creation are atomic across processes
            try:
                self.slot = _free_slot()
                self._build()
            except BaseException:
                self.teardown()
                raise

    def _build(self) -> None:
        """Create it in a few ``ip -batch`` / ``tc -batch`` runs (one per step and namespace
        instead of one process per command: ~20 processes for 4 regions, not ~100)."""
        mgmt = f"10.77.{248 + self.slot}"
        root: list[str] = []
        inside: dict[str, list[str]] = {self.namespace(r): [] for r in self.regions}
        routes: list[str] = []
        for i, region in enumerate(self.regions):
            ns = self.namespace(region)
            # Management link to the root namespace (unshaped): the control plane's path.
            root_end = self._root_veth(i)
            root += [
                f"netns add {ns}",
                f"link add {root_end} type veth peer name smgmt netns {ns}",
                f"addr add {mgmt}.{4 * i + 1}/30 dev {root_end}",
                f"link set {root_end} up",
            ]
            inside[ns] += [
                "link set lo up",
                f"addr add {self.address(region)}/32 dev lo",
                f"addr add {mgmt}.{4 * i + 2}/30 dev smgmt",
                "link set smgmt up",
            ]
            routes.append(f"route add {self.address(region)}/32 via {mgmt}.{4 * i + 2}")
        _batch("ip", root)
        _batch("ip", routes)
        veths: dict[str, list[str]] = {ns: [] for ns in inside}
        ends: dict[str, list[str]] = {ns: [] for ns in inside}
        shaping: dict[str, list[str]] = {ns: [] for ns in inside}
        for link in self.links:
            ns_a, ns_b = self.namespace(link.a), self.namespace(link.b)
            va, vb = self._veth(link, "a"), self._veth(link, "b")
            addr_a, addr_b = link.addresses(self.slot)
            veths[ns_a].append(f"link add {va} type veth peer name {vb} netns {ns_b}")
            for ns, dev, addr, peer_region, via, mbit in (
                (ns_a, va, addr_a, link.b, addr_b, link.mbit_ab),
                (ns_b, vb, addr_b, link.a, addr_a, link.mbit_ba),
            ):
                ends[ns] += [
                    f"addr add {addr}/30 dev {dev}",
                    f"link set {dev} up",
                    f"route add {self.address(peer_region)}/32 via {via}",
                ]
                shaping[ns].append(f"qdisc add dev {dev} root tbf {' '.join(tbf_args(mbit))}")
        for step in (inside, veths, ends):
            for ns, lines in step.items():
                _batch("ip", lines, ns)
        for ns, lines in shaping.items():
            _batch("tc", lines, ns)

    def add_delay(self, src: str, dst: str, port: int, delay_ms: float) -> None:
        """Add ``delay_ms`` of round-trip time to TCP connections from ``src`` to ``dst:port``.

        ``dst``'s region address becomes local inside ``src``'s namespace, where a ``wanrelay``
        listens on ``port`` and forwards over the pair's own link to ``dst``'s link address.
        Call it for every port of ``dst`` that ``src`` uses (the gateways' data ports).
        """
        ns, link = self.namespace(src), self.link(src, dst)
        addr_a, addr_b = link.addresses(self.slot)
        dst_link_addr = addr_b if link.b == dst else addr_a
        local = _sh("ip", "-4", "-o", "addr", "show", "dev", "lo", ns=ns)
        if f" {self.address(dst)}/32" not in local:
            _sh("ip", "addr", "add", f"{self.address(dst)}/32", "dev", "lo", ns=ns)
        subprocess.Popen(
            self.exec_argv(
                src,
                [
                    sys.executable,
                    "-m",
                    "skyplane_ops.provision.wanrelay",
                    "--listen",
                    f"{self.address(dst)}:{port}",
                    "--connect",
                    f"{dst_link_addr}:{port}",
                    "--delay-ms",
                    str(delay_ms),
                ],
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while f"{self.address(dst)}:{port}" not in _sh("ss", "-ltnH", ns=ns, check=False):
            if time.monotonic() > deadline:
                raise ProvisionError(f"delay relay in {ns} for {dst}:{port} did not start")
            time.sleep(0.05)

    def teardown(self) -> list[str]:
        """Kill every process in our namespaces, delete them and the management veths."""
        return teardown_namespaces(
            [f"{NS_PREFIX}{self.transfer_id}.r{i}" for i in range(len(self.regions))],
            [self._root_veth(i) for i in range(len(self.regions))],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "regions": list(self.regions),
            "namespaces": {r: self.namespace(r) for r in self.regions},
            "links": [
                {
                    "a": ln.a,
                    "b": ln.b,
                    "mbit_ab": ln.mbit_ab,
                    "mbit_ba": ln.mbit_ba,
                    "delay_ms": ln.delay_ms,
                }
                for ln in self.links
            ],
        }


def wan_grid(
    sites: Sequence[str], direct_mbit: float, relay_mbit: float, cross_mbit: float
) -> dict[str, float]:
    """A WAN grid (Gbps; with ``scale=1`` the testbed shapes Gbps * 1000 Mbit/s) over
    ``sites`` = (source, destination, relay, ...): the direct link is ``direct_mbit`` each
    way, every relay has its own links of ``relay_mbit`` to both ends (independent of the
    other relays'), and links between relays carry ``cross_mbit``. tbf links fill with one
    or two connections."""
    src, dst, *relays = sites
    grid = {f"{src}->{dst}": direct_mbit / 1000, f"{dst}->{src}": direct_mbit / 1000}
    for relay in relays:
        for a, b in ((src, relay), (relay, dst)):
            grid[f"{a}->{b}"] = grid[f"{b}->{a}"] = relay_mbit / 1000
    for a, b in combinations(relays, 2):
        grid[f"{a}->{b}"] = grid[f"{b}->{a}"] = cross_mbit / 1000
    return grid


_LOCK_FILE = "/run/skyplane-ops-netns.lock"
SLOTS = 8


def _free_slot() -> int:
    """The first address slot no running testbed uses (its routes are in the root namespace)."""
    for slot in range(SLOTS):
        if not _sh("ip", "-4", "route", "show", "root", f"10.77.{240 + slot}.0/24").strip():
            return slot
    raise ProvisionError(
        f"{SLOTS} netns testbeds are already up; "
        "run 'skyplane-ops deprovision --backend netns --all' to remove leftovers"
    )


def list_namespaces() -> list[str]:
    out = _sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie -- an exited child nobody reaped -- does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _kill_namespace_processes(namespaces: Sequence[str]) -> None:
    """TERM every process of every namespace at once, wait for them all, KILL what is left.

    Waiting looks at the signalled pids in ``/proc`` (no process per poll: a loaded machine
    spent ~0.2 s per teardown in ``ip netns pids`` polls); the namespaces are asked again
    before returning, in case something started meanwhile.
    """

    def pids() -> list[int]:
        return [
            int(p) for ns in namespaces for p in _sh("ip", "netns", "pids", ns, check=False).split()
        ]

    alive = pids()
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0), (signal.SIGKILL, 2.0)):
        if not alive:
            return
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while any(_alive(pid) for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.01)
        alive = pids()


def teardown_namespaces(namespaces: Sequence[str], root_veths: Sequence[str]) -> list[str]:
    """Delete namespaces (after killing their processes) and root veths; idempotent."""
    existing = set(list_namespaces())
    ours = [ns for ns in namespaces if ns in existing]
    _kill_namespace_processes(ours)
    try:
        _batch("ip", [f"netns del {ns}" for ns in ours])  # one process for all of them
    except ProvisionError:
        left = set(list_namespaces())
        for ns in ours:
            if ns in left:
                _sh("ip", "netns", "del", ns)
    removed = [f"netns:{ns}" for ns in ours]
    links = _sh("ip", "-o", "link", "show", check=False)
    for veth in root_veths:
        if re.search(rf"^\d+: {re.escape(veth)}[@:]", links, re.M):
            _sh("ip", "link", "del", veth, check=False)
            removed.append(f"veth:{veth}")
    return removed


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
    ) -> None:
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
        self, vms: Mapping[str, int], *, transfer_id: str, tags: Mapping[str, str] | None = None
    ) -> GatewayFleet:
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
            testbed.build()
            bundle = build_bundle()
            # Agents start in parallel: each waits for its ready file and health check.
            slots = [(region, i) for region in testbed.regions for i in range(vms[region])]
            with ThreadPoolExecutor(max_workers=min(16, len(slots))) as pool:
                gateways = list(
                    pool.map(
                        lambda slot: self._start_agent(
                            testbed, slot[0], slot[1], workdir, bundle.path, secret_ref
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
    ) -> Gateway:
        slug = "".join(c if c.isalnum() else "-" for c in region).strip("-")
        gw_id = f"gw-{slug}-{index}"
        ready = workdir / f"{gw_id}.ready.json"
        log_path = workdir / f"{gw_id}.log"
        argv = testbed.exec_argv(
            region,
            [
                *self.python.split(),
                *serve_args(
                    host="0.0.0.0",
                    secret_file=secret_ref,
                    ready_file=str(ready),
                    gateway_id=gw_id,
                    region=region,
                    idle_timeout=self.idle_timeout,
                ),
                *([] if self.buffer_mib is None else ["--buffer-mib", str(self.buffer_mib)]),
            ],
        )
        env = {**os.environ, "PYTHONPATH": str(bundle_path)}
        with open(log_path, "wb") as log_fh:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.ready_timeout
        while not ready.exists():
            if proc.poll() is not None:
                raise ProvisionError(
                    f"agent {gw_id} in {testbed.namespace(region)} exited: "
                    f"{log_path.read_text()[-1500:]}"
                )
            if time.monotonic() > deadline:
                raise ProvisionError(f"agent {gw_id} wrote no ready file in {self.ready_timeout}s")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        gateway = Gateway(
            gateway_id=gw_id,
            region=region,
            host=testbed.address(region),
            control_port=int(info["control_port"]),
            data_port=int(info["data_port"]),
            resources={"namespace": testbed.namespace(region), "pid": int(info["pid"])},
        )
        from skyplane_ops.provision.ssh import wait_healthy

        wait_healthy(gateway.host, gateway.control_port, secret_bytes(secret_ref), timeout=10)
        return gateway

    def deprovision(self, fleet: GatewayFleet) -> None:
        testbed = fleet.resources.get("testbed", {})
        n = len(testbed.get("regions", []))
        teardown_namespaces(
            [f"{NS_PREFIX}{fleet.transfer_id}.r{i}" for i in range(n)],
            [f"sm{_short(fleet.transfer_id)}{i}" for i in range(n)],
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
        hashes = {_short(t) for t in victims}
        if transfer_id is not None:
            hashes.add(_short(transfer_id))
        root_veths = []
        for line in _sh("ip", "-o", "link", "show", check=False).splitlines():
            name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            m = _ROOT_VETH.match(name)
            # A root veth whose namespace peer is gone is an orphan whatever its transfer.
            if m and (m["h"] in hashes or "link-netns" not in line):
                root_veths.append(name)
        for _tid, namespaces in sorted(victims.items()):
            removed += teardown_namespaces(namespaces, [])
        removed += teardown_namespaces([], root_veths)
        return removed
