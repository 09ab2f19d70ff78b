"""Hand-made plans, datasets and local fleets for transfer tests and data-plane benchmarks."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.transfer import TransferResult, run_transfer

SRC, RELAY, DST = "test:src", "test:relay", "test:dst"


def make_plan(*paths: Sequence[str], shares: Sequence[float] | None = None) -> TransferPlan:
    """A plan over the given region paths (the planner is not under test here)."""
    shares = shares or [1.0 / len(paths)] * len(paths)
    hops = {}
    for path in paths:
        for u, v in itertools.pairwise(path):
            hops[(u, v)] = Hop(u, v, 1.0, 4)
    vms = {r: 1 for p in paths for r in p}
    return TransferPlan(
        src=paths[0][0],
        dsts=(paths[0][-1],),
        volume_gb=0.05,
        mode="min_cost",
        paths=[PlanPath(tuple(p), s, 1.0) for p, s in zip(paths, shares, strict=True)],
        hops=list(hops.values()),
        vms=vms,
        predicted_gbps=1.0,
        egress_cost_usd=0.01,
        vm_cost_usd=0.002,
    )


def direct_plan(src: str, dst: str, *, volume_gb: float, conns: int = 8) -> TransferPlan:
    """A one-hop plan at a nominal 10 Gbit/s with ``conns`` connections (benchmarks that
    measure the data plane, not the planner)."""
    return TransferPlan(
        src=src,
        dsts=(dst,),
        volume_gb=volume_gb,
        mode="min_cost",
        paths=[PlanPath((src, dst), 1.0, 10.0)],
        hops=[Hop(src, dst, 10.0, conns)],
        vms={src: 1, dst: 1},
        predicted_gbps=10.0,
        egress_cost_usd=0.0,
        vm_cost_usd=0.0,
    )


def write_dataset(root: Path, files: dict[str, int], seed: int = 1) -> dict[str, bytes]:
    """Random files of the given sizes; returns their contents."""
    data = {}
    for name, size in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = os.urandom(size)
        path.write_bytes(blob)
        data[name] = blob
    return data


def copy_dirs(
    plan: TransferPlan, fleet: GatewayFleet, dirs: tuple[Path, Path, Path], **kwargs: Any
) -> TransferResult:
    """``run_transfer`` from folder ``src`` to folder ``dst`` with its journal in ``journal``."""
    src, dst, journal = dirs
    return run_transfer(
        plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal, **kwargs
    )


def read_tree(root: Path) -> dict[str, bytes]:
    """Every visible file under ``root`` (staging folders excluded) by relative key."""
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(".%staging"):
            out[rel] = path.read_bytes()
    return out


@contextmanager
def local_fleet(
    plan: TransferPlan, *, hooks: bool = True, buffer_mib: int = 256
) -> Iterator[tuple[LocalProvisioner, GatewayFleet]]:
    prov = LocalProvisioner(
        idle_timeout=120,
        buffer_mib=buffer_mib,
        extra_args=["--enable-test-hooks"] if hooks else [],
    )
    fleet = prov.provision(plan.vms, transfer_id=f"t-{uuid.uuid4().hex[:10]}")
    try:
        yield prov, fleet
    finally:
        prov.deprovision(fleet)


def agents_of(home: Path) -> list[int]:
    """Pids of gateway agents whose command line points into ``home`` (a test's own)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if b"gateway_agent" in cmd and str(home).encode() in cmd:
                pids.append(int(d.name))
    return pids


def listings_without_versions(monkeypatch: Any) -> None:
    """This process's listings of local folders carry no version, as a store without versions
    would list: the reads are then not pinned and the engine must list the source again."""
    from gateway_agent.stores.base import ObjectInfo
    from gateway_agent.stores.local import LocalStore

    real = LocalStore.list

    def listing(self: LocalStore, prefix: str = "") -> Iterator[ObjectInfo]:
        for info in real(self, prefix):
            yield ObjectInfo(info.key, info.size, info.etag, info.checksums, info.modified)

    real_rows = LocalStore.list_rows

    def rows(self: LocalStore, prefix: str = "", *, versions: bool = True) -> Any:
        return real_rows(self, prefix, versions=False)  # the catalog's listing path

    real_share = LocalStore.list_share

    def share(self: LocalStore, i: int, n: int, prefix: str = "", *, versions: bool = True) -> Any:
        return real_share(self, i, n, prefix, versions=False)  # a listing in two processes

    monkeypatch.setattr(LocalStore, "list", listing)
    monkeypatch.setattr(LocalStore, "list_rows", rows)
    monkeypatch.setattr(LocalStore, "list_share", share)
