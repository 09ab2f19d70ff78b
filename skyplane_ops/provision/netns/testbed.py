"""The emulated multi-region WAN of the ``netns`` backend, on one Linux host (root only).

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
(``delay_ms`` is the added round-trip time). The gateways in it are ``netns``'s: the real
agent, started with ``ip netns exec``.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.netns.host import (
    batch,
    require_root,
    sh,
    short_id,
    teardown_namespaces,
)
from skyplane_ops.provision.secrets import check_transfer_id

NS_PREFIX = "skyplane-ops."
MAX_REGIONS = 60

Grid = Mapping[tuple[str, str], float] | Mapping[str, float]


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
        return f"sm{short_id(self.transfer_id)}{i}"

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
            while f":{port} " not in sh("ss", "-ltnH", ns=self.namespace(dst), check=False):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise ProvisionError(f"iperf3 server in {dst} did not start")
                time.sleep(0.05)
            out = sh(
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
        batch("ip", root)
        batch("ip", routes)
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
                batch("ip", lines, ns)
        for ns, lines in shaping.items():
            batch("tc", lines, ns)

    def add_delay(self, src: str, dst: str, port: int, delay_ms: float) -> None:
        """Add ``delay_ms`` of round-trip time to TCP connections from ``src`` to ``dst:port``.

        ``dst``'s region address becomes local inside ``src``'s namespace, where a ``wanrelay``
        listens on ``port`` and forwards over the pair's own link to ``dst``'s link address.
        Call it for every port of ``dst`` that ``src`` uses (the gateways' data ports).
        """
        ns, link = self.namespace(src), self.link(src, dst)
        addr_a, addr_b = link.addresses(self.slot)
        dst_link_addr = addr_b if link.b == dst else addr_a
        local = sh("ip", "-4", "-o", "addr", "show", "dev", "lo", ns=ns)
        if f" {self.address(dst)}/32" not in local:
            sh("ip", "addr", "add", f"{self.address(dst)}/32", "dev", "lo", ns=ns)
        subprocess.Popen(
            self.exec_argv(
                src,
                [
                    sys.executable,
                    "-m",
                    "skyplane_ops.provision.netns.wanrelay",
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
        while f"{self.address(dst)}:{port}" not in sh("ss", "-ltnH", ns=ns, check=False):
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
        if not sh("ip", "-4", "route", "show", "root", f"10.77.{240 + slot}.0/24").strip():
            return slot
    raise ProvisionError(
        f"{SLOTS} netns testbeds are already up; "
        "run 'skyplane-ops deprovision --backend netns --all' to remove leftovers"
    )
