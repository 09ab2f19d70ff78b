"""Paths that need no VM: the stores' own server-side copy, and the worker running the job.

Both carry bytes from t = 0, while the overlay's gateways boot (``schedule``). Their figures:

- **server-side copy** where the stores do it themselves: S3 -> S3 (CopyObject, UploadPartCopy),
  GCS -> GCS (rewrite), any -> Azure (Put Blob / Put Block From URL with a presigned S3 or a
  signed GCS URL as source). The bytes leave the source region on the provider's network, so
  its egress price to the destination applies. Its rate is modelled (``SERVER_SIDE_GBPS``,
  below the direct edge's VM rate): the stores copy at their own pace, several objects at once.
- **the worker**: the machine running the job (CLI host, Airflow worker, Dagster run) reads
  from the source and writes to the destination itself. Its region is configured (default: the
  source's, as an Airflow worker is usually placed beside its data), its rate is the smaller of
  its NIC limit and the grid's edges through it, and it pays egress on both legs.

Pure: figures in, paths out (the planner's rule: no I/O).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from skyplane_ops.errors import PlanningError

Edge = tuple[str, str]

#: A modelled rate for a store's own cross-region copy of many objects at once (Gbit/s).
SERVER_SIDE_GBPS = 2.0
#: A typical worker's NIC (an Airflow worker or a CLI host in the cloud), Gbit/s.
DEFAULT_WORKER_GBPS = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    """The machine running the job: its region (None: the source's) and NIC limit."""

    region: str | None = None
    nic_gbps: float = DEFAULT_WORKER_GBPS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.nic_gbps) and self.nic_gbps > 0):
            raise PlanningError(f"worker_gbps must be a positive number, not {self.nic_gbps!r}")


@dataclass(frozen=True)
class VmlessPath:
    """One VM-less path: ``kind`` (``worker`` or ``server_side``), the regions its bytes
    cross (a worker's: source, the worker's region, destination), its rate, its egress $/GB
    (all legs) and where the rate came from (``rate_from``)."""

    kind: str
    regions: tuple[str, ...]
    gbps: float
    egress_usd_per_gb: float
    rate_from: str
    how: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "regions": list(self.regions)}


def _provider(region: str) -> str:
    return region.split(":", 1)[0]


def server_side_how(src: str, dst: str) -> str | None:
    """How the destination's store copies from the source itself, or None where it cannot."""
    s, d = _provider(src), _provider(dst)
    if d == "azure":
        return "Put Blob/Block From URL" + ("" if s == "azure" else f" (signed {s} URL)")
    if s == d == "aws":
        return "CopyObject/UploadPartCopy"
    if s == d == "gcp":
        return "GCS rewrite"
    return None


def vmless_paths(
    src: str,
    dst: str,
    throughput: Mapping[Edge, float],
    egress_usd_per_gb: Mapping[Edge, float],
    *,
    worker: WorkerSpec | None = WorkerSpec(),
    server_side: bool = True,
) -> list[VmlessPath]:
    """The VM-less paths from ``src`` to ``dst`` on these figures (missing edges: none)."""
    paths: list[VmlessPath] = []
    how = server_side_how(src, dst) if server_side and src != dst else None
    direct = throughput.get((src, dst), 0.0)
    if how is not None and direct > 0:
        gbps = min(SERVER_SIDE_GBPS, direct)
        price = egress_usd_per_gb.get((src, dst), 0.0)
        paths.append(VmlessPath("server_side", (src, dst), gbps, price, "modelled store copy", how))
    if worker is not None:
        at = worker.region or src
        legs = [(u, v) for u, v in ((src, at), (at, dst)) if u != v]
        rates = [throughput.get(e, 0.0) for e in legs]
        if all(r > 0 for r in rates):
            gbps = min([worker.nic_gbps, *rates])
            price = sum(egress_usd_per_gb.get(e, 0.0) for e in legs)
            where = "configured" if worker.region else "source region (default)"
            how = f"worker in {at} ({where})"
            paths.append(VmlessPath("worker", (src, at, dst), gbps, price, "grid and NIC", how))
    return paths
