"""The planner's output: a JSON round-trippable description of an overlay transfer."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hop:
    """One directed edge of the overlay with its flow, TCP connections and provenance.

    ``connections`` is the hop's flow over the edge's per-connection rate, rounded up; a
    region's hops together stay within ``max_conns_per_vm * VMs``. ``source`` says where the
    edge's figures came from (``published``, ``profile``, ``passive`` or ``model``) and
    ``measured_at`` when (ISO-8601 UTC, None for the model).
    """

    src: str
    dst: str
    gbps: float
    connections: int
    source: str = "model"
    measured_at: str | None = None


@dataclass(frozen=True)
class PlanPath:
    """A source-to-destination path and the share of the total flow it carries."""

    regions: tuple[str, ...]
    share: float
    gbps: float


@dataclass
class TransferPlan:
    """What to provision and how to route: regions are ids such as ``aws:us-east-1``."""

    src: str
    dsts: tuple[str, ...]
    volume_gb: float
    mode: str
    paths: list[PlanPath]
    hops: list[Hop]
    vms: dict[str, int]
    predicted_gbps: float
    egress_cost_usd: float
    vm_cost_usd: float
    solver_status: str = "OPTIMAL"
    solve_seconds: float = 0.0
    baseline: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def total_cost_usd(self) -> float:
        return self.egress_cost_usd + self.vm_cost_usd

    @property
    def regions(self) -> list[str]:
        """Every region the plan uses (source, relays, destinations), source first."""
        seen: dict[str, None] = {self.src: None}
        for path in self.paths:
            for region in path.regions:
                seen.setdefault(region, None)
        for dst in self.dsts:
            seen.setdefault(dst, None)
        return list(seen)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["dsts"] = list(self.dsts)
        data["paths"] = [{**asdict(p), "regions": list(p.regions)} for p in self.paths]
        data["total_cost_usd"] = self.total_cost_usd
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransferPlan:
        data = dict(data)
        data.pop("total_cost_usd", None)
        data["dsts"] = tuple(data["dsts"])
        data["paths"] = [
            PlanPath(regions=tuple(p["regions"]), share=p["share"], gbps=p["gbps"])
            for p in data["paths"]
        ]
        data["hops"] = [Hop(**h) for h in data["hops"]]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> TransferPlan:
        return cls.from_dict(json.loads(text))

    def to_text(self) -> str:
        """The human report (paths, hops, VMs, cost split, baselines); see ``render``."""
        from skyplane_ops.planner.render import render_text

        return render_text(self)

    def to_mermaid(self) -> str:
        """A Mermaid flowchart of the overlay; see ``render``."""
        from skyplane_ops.planner.render import render_mermaid

        return render_mermaid(self)
