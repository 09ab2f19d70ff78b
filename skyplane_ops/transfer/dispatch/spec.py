"""The plan's routes, and the job spec each gateway on them is started with (routes, the
gateways of every region, per hop the connections, encryption and compression, and, sealed,
the store options and the store credentials it needs): what the gateways are told, kept apart
from how the dispatcher drives them.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import threading
from typing import Any

from gateway_agent.auth import credentials_context, seal
from gateway_agent.stores.credentials import StoreCredentials
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet, data_host
from skyplane_ops.transfer.dispatch.minting import Mint, Minted
from skyplane_ops.transfer.dispatch.options import DispatchOptions
from skyplane_ops.transfer.dispatch.ratewatch import hop_rates

# TCP connections per hop at most when the hop's receivers listen on a loopback address.
LOOPBACK_CONNECTIONS = 8

# Backends whose gateways run on hosts of the user's own network (this machine, the user's SSH
# hosts, namespaces of this machine): a hop between them over private addresses stays there.
# Gateways of a cloud backend in two regions talk over the provider's network or the Internet.
OWN_NETWORK_BACKENDS = frozenset({"local", "ssh", "netns"})


# Addresses not routed on the Internet, so only reached inside a network someone owns
# (``ipaddress``'s ``is_private`` is wider: it also counts documentation and reserved ranges).
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "fc00::/7",
              "fe80::/10")
)  # fmt: skip


def _is_loopback(host: str) -> bool:
    return _address_scope(host) == "loopback"


def _address_scope(host: str) -> str:
    """``loopback``, ``private`` (RFC 1918, ULA, link-local: not routed on the Internet) or
    ``public`` (a public address, or a name: what it resolves to is not known here)."""
    if host == "localhost":
        return "loopback"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "public"
    if ip.is_loopback:
        return "loopback"
    return "private" if any(ip in net for net in PRIVATE_NETWORKS) else "public"


def hop_kind(src: str, dst: str, addresses: list[str], backend: str) -> str:
    """Where hop ``src -> dst`` runs, from its regions, the addresses its senders dial and
    the fleet's backend: ``loopback`` (every receiver on this host), ``private`` (inside a
    network the user owns: the same region over private addresses, or hosts of an own-network
    backend over private addresses) or ``internet`` (anything else: between providers, between
    cloud regions, to a public address or a name)."""
    scopes = {_address_scope(a) for a in addresses}
    if not scopes or src.split(":", 1)[0] != dst.split(":", 1)[0]:
        return "internet"  # between clouds: always over networks the user does not own
    if scopes == {"loopback"}:
        return "loopback"
    if "public" in scopes:
        return "internet"
    if src == dst or backend in OWN_NETWORK_BACKENDS:
        return "private"
    return "internet"


def encrypt_hop(mode: object, src: str, dst: str, kind: str) -> bool:
    """Whether hop ``src -> dst`` (of ``kind``, see ``hop_kind``) is sealed with AES-GCM under
    ``mode``: ``auto`` seals every ``internet`` hop and leaves loopback and private hops clear
    (their chunks still carry an end-to-end tag); ``all``/True and ``none``/False are what
    they say; a collection of (src, dst) pairs seals those hops."""
    if isinstance(mode, bool):
        return mode
    if mode in ("auto", "cross-cloud"):
        return kind == "internet"
    if mode in ("all", "none"):
        return mode == "all"
    if isinstance(mode, str) or not isinstance(mode, set | frozenset | list | tuple):
        raise TransferError(f"encrypt must be 'auto', 'all', 'none' or a set of hops: {mode!r}")
    return (src, dst) in mode


def plan_routes(plan: TransferPlan) -> list[tuple[list[str], float]]:
    """(regions, share) per path; a plan without paths means the direct route."""
    routes = [(list(p.regions), float(p.share)) for p in plan.paths if p.share > 0]
    if not routes:
        routes = [([plan.src, plan.dsts[0]], 1.0)]
    total = sum(s for _, s in routes) or 1.0
    return [(r, s / total) for r, s in routes]


def check_fleet(plan: TransferPlan, fleet: GatewayFleet) -> None:
    """Every region on a route needs at least one gateway in the fleet."""
    needed = {r for route, _ in plan_routes(plan) for r in route}
    missing = sorted(r for r in needed if not fleet.in_region(r))
    if missing:
        raise TransferError(
            f"the plan routes through {', '.join(missing)} but the fleet has no gateway there "
            f"(fleet regions: {', '.join(fleet.regions) or 'none'})"
        )


def live_routes(
    routes: list[tuple[list[str], float]], waiting: set[int]
) -> list[tuple[list[str], float]]:
    """``routes`` without the paths that do not run (``waiting``: their gateways are not up
    yet, ``dispatch.join``), the others' shares renormalised: what the cap is split over now.
    Such a path keeps its place with share 0 (indices never change)."""
    total = sum(s for i, (_, s) in enumerate(routes) if i not in waiting) or 1.0
    return [(r, 0.0 if i in waiting else s / total) for i, (r, s) in enumerate(routes)]


def local_rate(
    routes: list[tuple[list[str], float]], region: str, cap: float | None, worker: float | None
) -> float | None:
    """Bytes/s the one-region routes of ``region`` (the worker's: no hop to pace) may move:
    the smaller of the worker's own cap and its paths' share of the transfer's ``cap``."""
    share = sum(s for route, s in routes if route == [region])
    if not share:
        return None
    rates = [r for r in (worker, cap * share if cap else None) if r]
    return min(rates) if rates else None


class JobSpecs:
    """The job spec part of ``Dispatcher``: what each gateway is told when its job starts."""

    plan: TransferPlan
    fleet: GatewayFleet
    options: DispatchOptions
    job_id: str
    routes: list[tuple[list[str], float]]
    _src_uri: str
    _dst_uri: str
    _sealed: str
    _secret: bytes
    _credentials: tuple[StoreCredentials | None, StoreCredentials | None]
    # Ends with minted (expiring) credentials: the newest set and how to mint the next; the
    # serial of the newest sets (0: those the jobs start with), under the lock.
    _minted: dict[str, tuple[Minted, Mint]]
    _credentials_serial: int
    _credentials_lock: threading.Lock
    bwlimit: float | None  # the transfer's cap now (bytes/s): ``ratewatch`` may change it
    _alive: list[bool]  # per path: False while it waits to join (``dispatch.join``) or dead

    def local_rate_of(self, region: str) -> float | None:
        """The pace of ``region``'s one-region route now: its share of the cap among the
        paths that run (the whole cap while the overlay's paths wait to join, or if they
        never do)."""
        routes = live_routes(self.routes, {p for p, up in enumerate(self._alive) if not up})
        return local_rate(routes, region, self.bwlimit, self.options.worker_rate)

    def _connections(self, src: str, dst: str) -> int:
        if self.options.connections:
            return self.options.connections
        pair = len(self.fleet.in_region(src)) * len(self.fleet.in_region(dst))
        n = 8
        for hop in self.plan.hops:
            if hop.src == src and hop.dst == dst and hop.connections > 0:
                n = max(1, min(64, -(-hop.connections // max(1, pair))))
                break
        if self._on_loopback(src, dst):
            # Parallel connections beat a WAN's per-flow limits; on one host there is none,
            # and each connection more is a sender and a receiver thread contending for the
            # gateways' interpreter (64 of them cost the source ~10 % of its CPU at 100k
            # small objects).
            n = min(n, LOOPBACK_CONNECTIONS)
        return n

    def _on_loopback(self, src: str, dst: str) -> bool:
        """Whether every gateway of hop ``src -> dst`` sends to a loopback address."""
        receivers = self.fleet.in_region(dst)
        return bool(receivers) and all(_is_loopback(data_host(g, src)) for g in receivers)

    def _hop_kind(self, src: str, dst: str) -> str:
        """``hop_kind`` of hop ``src -> dst`` with the addresses its senders dial."""
        addresses = [data_host(g, src) for g in self.fleet.in_region(dst)]
        return hop_kind(src, dst, addresses, self.fleet.backend)

    def _encrypt_hop(self, src: str, dst: str) -> bool:
        return encrypt_hop(self.options.encrypt, src, dst, self._hop_kind(src, dst))

    def _sealed_credentials(self, gateway: Gateway) -> dict[str, str]:
        """``sealed_credentials`` for ``gateway``: the source's credentials if it reads the
        source, the destination's if it writes the destination, none for a relay; sealed
        under the transfer secret for this job on this gateway only."""
        _, sealed = self.credentials_for(gateway)
        return {"sealed_credentials": sealed} if sealed else {}

    def credentials_for(self, gateway: Gateway) -> tuple[int, str | None]:
        """The serial of the newest credential sets and, sealed for ``gateway``, those it
        needs (None for a gateway that opens no store with credentials)."""
        with self._credentials_lock:
            src, dst = self._credentials
            serial = self._credentials_serial
        reads = any(route[0] == gateway.region for route, _ in self.routes)
        writes = any(route[-1] == gateway.region for route, _ in self.routes)
        wanted: dict[str, Any] = {
            "src": src.to_dict() if src is not None and reads else None,
            "dst": dst.to_dict() if dst is not None and writes else None,
        }
        if not any(wanted.values()):
            return serial, None
        wanted["serial"] = serial
        context = credentials_context(self.job_id, gateway.gateway_id)
        return serial, seal(self._secret, json.dumps(wanted).encode(), context)

    def minted_ends(self) -> dict[str, tuple[Minted, Mint]]:
        """The ends whose credentials expire: their newest set and how to mint the next."""
        with self._credentials_lock:
            return dict(self._minted)

    def replace_credentials(self, side: str, minted: Minted) -> None:
        """``minted`` is the newest set of end ``side`` ("src" or "dst"): the next job specs
        and ``credentials_for`` carry it, under a higher serial."""
        with self._credentials_lock:
            src, dst = self._credentials
            if side == "src":
                self._credentials = (minted.credentials, dst)
            else:
                self._credentials = (src, minted.credentials)
            self._minted[side] = (minted, self._minted[side][1])
            self._credentials_serial += 1

    def job_spec(self, gateway: Gateway) -> dict[str, Any]:
        hops: dict[str, dict[str, Any]] = {}
        for route, _ in self.routes:
            for u, v in itertools.pairwise(route):
                hops[f"{u}>{v}"] = {
                    "connections": self._connections(u, v),
                    "encrypt": self._encrypt_hop(u, v),
                    "compress_level": self.options.compress_level,
                }
        rates = hop_rates(self.routes, self.fleet, gateway.region, self.bwlimit)
        for hop, rate in rates.items():
            if rate:
                hops[hop]["rate"] = rate  # bytes/s this gateway may send on the hop
        local = self.local_rate_of(gateway.region)
        hooks = self.options.test_hooks.get(gateway.gateway_id) or self.options.test_hooks.get(
            gateway.region
        )
        return {
            "job_id": self.job_id,
            "routes": {str(i): route for i, (route, _) in enumerate(self.routes)},
            "gateways": {
                region: [
                    {
                        "id": g.gateway_id,
                        "host": data_host(g, gateway.region),
                        "data_port": g.data_port,
                    }
                    for g in self.fleet.in_region(region)
                ]
                for region in {r for route, _ in self.routes for r in route}
            },
            "hops": hops,
            "src_uri": self._src_uri,
            "dst_uri": self._dst_uri,
            "sealed_options": self._sealed,
            **self._sealed_credentials(gateway),
            "reader_threads": self.options.reader_threads,
            "writer_threads": self.options.writer_threads,
            "object_threads": self.options.object_threads,
            "max_chunk_bytes": self.options.max_chunk_bytes,
            "metadata": {"keep": self.options.metadata, "set": self.options.metadata_set},
            "test_hooks": hooks or {},
            # Paths whose chunks the stores copy themselves (``sequence.worker``).
            "server_side_paths": [str(i) for i in self.plan.details.get("server_side_paths", [])],
            **({"local_rate": local} if local else {}),
        }
