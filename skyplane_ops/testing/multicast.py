"""Run a multicast (tree) job on a fleet's gateways directly, for tests and benchmarks.

This drives the gateways' tree paths as the tree pass does (``transfer.tree_pass``), without
its journals: one job spec per sending region, the chunks submitted at the root down the tree
that would land each first (``transfer.tree_feed``), and every sink's ``done`` events awaited
with long polls. It returns each gateway's counters and the wall time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway_agent.client import GatewayClient
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import Problem, RegionSpec
from skyplane_ops.provision.fleet import GatewayFleet, data_host
from skyplane_ops.provision.secrets import secret_bytes
from skyplane_ops.transfer.dispatch.ratewatch import tree_hop_rates
from skyplane_ops.transfer.tree_feed import TreeFeeder


@dataclass
class TreeRun:
    """What a tree job did: seconds from submit to the last sink's last chunk, and counters."""

    seconds: float
    counters: dict[str, dict[str, int]]
    done: dict[str, set[int]]


def folder_chunks(root: Path) -> list[dict[str, Any]]:
    """One chunk descriptor per file of ``root`` (no path yet)."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    out = []
    for i, p in enumerate(files):
        seg = {"key": str(p.relative_to(root)), "offset": 0, "length": p.stat().st_size}
        out.append({"chunk": i, "segs": [{**seg, "part": 1}]})
    return out


def run_trees(
    fleet: GatewayFleet,
    trees: Sequence[tuple[float, Mapping[str, Any]]],
    src_uri: str,
    dst_uris: Mapping[str, str],
    chunks: Sequence[dict[str, Any]],
    *,
    job_id: str = "j-multicast",
    connections: int = 8,
    timeout: float = 300.0,
    bwlimit: float | None = None,
) -> TreeRun:
    """Run ``chunks`` down ``trees`` ((share, job tree) pairs) and wait for every sink;
    ``bwlimit`` (bytes/s at the root) gives every hop its share (``tree_hop_rates``)."""
    secret = secret_bytes(fleet.secret_ref)
    gws = {g.region: g for g in fleet.gateways}
    clients = {r: GatewayClient(g.host, g.control_port, secret) for r, g in gws.items()}
    paths = {str(i): dict(tree) for i, (_, tree) in enumerate(trees)}
    edges = {(u, v) for t in paths.values() for u, vs in t["next"].items() for v in vs}
    used = {r for e in edges for r in e}
    sinks = sorted({s for t in paths.values() for s in t["sinks"]})
    root = next(iter(paths.values()))["next"]
    root_region = next(u for u in root if all(u not in vs for vs in root.values()))
    for region in sorted(used, key=lambda r: r == root_region):  # the root last
        rates = tree_hop_rates(trees, fleet, region, bwlimit)
        table = {
            r: [{"id": g.gateway_id, "host": data_host(g, region), "data_port": g.data_port}]
            for r, g in gws.items()
            if r in used
        }
        clients[region].start_job(
            {
                "job_id": job_id,
                "routes": {},
                "trees": paths,
                "gateways": table,
                "hops": {
                    f"{u}>{v}": {"connections": connections, "rate": rates.get(f"{u}>{v}")}
                    for u, v in edges
                },
                "src_uri": src_uri,
                "dst_uris": dict(dst_uris),
            }
        )
    chunk_list = list(chunks)
    start = time.monotonic()
    feeder = TreeFeeder(  # each chunk down the tree that would land it first, as the pass does
        shares=[share for share, _ in trees],
        items=[(c["chunk"], sum(int(s["length"]) for s in c["segs"]), c) for c in chunk_list],
        make=lambda chunk, k: {**chunk, "path": str(k)},
        submit=lambda batch: clients[root_region].submit_chunks(job_id, batch),
        largest=max((sum(int(s["length"]) for s in c["segs"]) for c in chunk_list), default=0),
    )
    feeder.top_up()
    want = {c["chunk"] for c in chunk_list}
    done: dict[str, set[int]] = {s: set() for s in sinks}
    cursors = dict.fromkeys(sinks, 0)
    seconds = 0.0
    while any(done[s] != want for s in sinks):
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"sinks still missing chunks after {timeout:g} s")
        for s in sinks:
            if done[s] == want:
                continue
            status = clients[s].status(job_id, cursors[s], wait=0.5)
            cursors[s] = status["cursor"]
            if status.get("error"):
                raise RuntimeError(f"{s}: {status['error']}")
            done[s] |= {e["chunk"] for e in status["events"] if e["t"] == "done"}
        for cid in [c for c in feeder.tree_of if all(c in done[s] for s in sinks)]:
            feeder.resolved(cid)
        feeder.top_up()
        seconds = time.monotonic() - start
    counters = {r: clients[r].status(job_id)["counters"] for r in used}
    for r in used:
        clients[r].stop_job(job_id)
    return TreeRun(seconds, counters, done)


# ---- the netns WAN of the multicast test and benchmark ---------------------------------------

#: A source, a relay and three destinations: the source's links to the destinations are slow
#: (0.25 Gbit/s) and every GB leaving the source costs $0.09; the relay's links and those
#: between destinations are fast (4 Gbit/s, $0.02), other pairs 1 Gbit/s. The testbed scales
#: rates by ``WAN_SCALE`` (to 25, 400 and 100 Mbit/s).
WAN_SRC, WAN_RELAY = "netns:S", "netns:R"
WAN_DSTS = ("netns:X", "netns:Y", "netns:Z")
WAN_FAST = {
    (WAN_SRC, WAN_RELAY),
    (WAN_RELAY, "netns:X"),
    (WAN_RELAY, "netns:Y"),
    (WAN_RELAY, "netns:Z"),
    ("netns:X", "netns:Z"),
    ("netns:Y", "netns:Z"),
}
WAN_SCALE = 0.1


def wan_grid() -> dict[str, float]:
    """The testbed's grid (Gbit/s before scaling), every ordered pair of the five regions."""
    regions = [WAN_SRC, WAN_RELAY, *WAN_DSTS]

    def rate(u: str, v: str) -> float:
        if (u, v) in WAN_FAST or (v, u) in WAN_FAST:
            return 4.0
        return 0.25 if WAN_SRC in (u, v) else 1.0

    return {f"{u}->{v}": rate(u, v) for u in regions for v in regions if u != v}


def wan_problem(volume_gb: float, floor_gbps: float) -> Problem:
    """The planner's view of the WAN: one VM per region, the grid's rates, the prices above."""
    regions = {
        r: RegionSpec(r, "netns", 0.0, 10.0, 10.0, 1) for r in (WAN_SRC, WAN_RELAY, *WAN_DSTS)
    }
    grid = {tuple(k.split("->")): g for k, g in wan_grid().items()}
    throughput = {(u, v): g for (u, v), g in grid.items() if v != WAN_SRC}
    prices = {e: 0.09 if e[0] == WAN_SRC else 0.02 for e in throughput}
    return Problem(
        WAN_SRC,
        WAN_DSTS,
        volume_gb,
        regions,
        throughput,
        prices,
        "min_cost",
        floor_gbps,
        max_conns_per_vm=256,
    )


def job_trees(plan: TransferPlan) -> list[tuple[float, dict[str, Any]]]:
    """A multicast plan's trees as ``run_trees`` takes them."""
    return [
        (t["share"], {"next": t["next_hops"], "sinks": list(plan.dsts)})
        for t in plan.details["multicast"]["trees"]
    ]
