"""The planner's output: a JSON round-trippable description of an overlay transfer, and its
text forms (``render_text``: the human report, ``render_mermaid``: a flowchart).

The text forms live here, next to the data, so that ``TransferPlan.to_text()`` needs no other
module: ``render`` and ``route`` (the pictures) import this module, never the other way round.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from skyplane_ops.planner.multicast.text import comparison_lines


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
        """The human report (paths, hops, VMs, cost split, baselines): ``render_text``."""
        return render_text(self)

    def to_mermaid(self) -> str:
        """A Mermaid flowchart of the overlay: ``render_mermaid``."""
        return render_mermaid(self)


# ---- text forms ----------------------------------------------------------------------------

_MODES = {
    "min_cost": "min cost s.t. throughput >= {bound:.4g} Gbps",
    "max_throughput": "max throughput s.t. cost <= ${bound:.4g}",
    "direct": "direct path",
    "ron": "RON best single relay",
}


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "never"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells).rstrip())
        if n == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return out


def _describe_mode(plan: TransferPlan) -> str:
    bound = plan.details.get("bound")
    template = _MODES.get(plan.mode, plan.mode)
    text = template.format(bound=bound) if bound is not None else plan.mode.replace("_", " ")
    if plan.details.get("default_bound"):
        text = "fastest completion (provisioning + transfer)"
    tolerance = plan.details.get("completion_tolerance")
    if plan.mode == "max_throughput" and tolerance:
        text += f", then the cheapest plan finishing within {100 * tolerance:g}% of the fastest"
    if plan.details.get("exact_floor"):
        text += " (exactly the floor)"
    if plan.details.get("deadline_seconds"):
        text += f" (deadline {plan.details['deadline_seconds']:g} s)"
    return text


def _summary_row(
    name: str, data: Mapping[str, Any], volume_gb: float, t0: float = 0.0
) -> list[str]:
    gbps = float(data["predicted_gbps"])
    seconds = t0 + 8 * volume_gb / gbps if gbps > 0 else math.inf
    vms = data["vms"]
    return [
        name,
        f"{gbps:.2f}",
        _duration(seconds),
        f"${data['egress_cost_usd']:.2f}",
        f"${data['vm_cost_usd']:.2f}",
        f"${data['total_cost_usd']:.2f}",
        str(sum(vms.values())),
    ]


def _schedule_lines(sched: Mapping[str, Any]) -> list[str]:
    """The schedule (``planner.schedule``): VM-less rows beside the overlay, and the choice."""
    t0 = float(sched["t0"])
    if sched["start_vms"]:
        how = f"VM-less paths from 0 s, the overlay from {t0:g} s (its VMs' start-up)"
        if not sched["without_vms"]:
            how = f"{t0:g} s provisioning + transfer"
    elif sched["force"] == "none":
        how = "no VM (--no-vms): VM-less paths only"
    elif sched["cancel_vms"]:
        how = f"no VM: the VM-less paths are done before a VM would be up ({t0:g} s)"
    else:
        how = "no VM: the VM-less paths are as fast (within tolerance) and cheaper"
    lines = [f"Done in: {_duration(sched['completion_seconds'])} ({how})", "", "Schedule:"]
    rows = [["from t=0 (no VM)", "Gbps", "egress $/GB", "how"]]
    for p in sched["vmless"]:
        price = f"${p['egress_usd_per_gb']:.3f}"
        rows.append([p["kind"].replace("_", "-"), f"{p['gbps']:.2f}", price, p["how"]])
    if len(rows) == 1:
        rows.append(["(none)", "-", "-", "no server-side copy between these stores, no worker"])
    lines += _table(rows, {1, 2})
    lines.append("")
    rows = [["option", "done in", "egress", "VM", "total", "VMs"]]
    for name, key in (
        ("without VMs", "without_vms"),
        ("VM-less + overlay", "with_vms"),
        ("overlay only", "overlay_only"),
    ):
        o = sched.get(key)
        if o and not (key == "with_vms" and (not sched["without_vms"] or sched["cancel_vms"])):
            usd = [f"${o[k]:.3f}" for k in ("egress_usd", "vm_usd", "total_usd")]
            rows.append([name, _duration(o["seconds"]), *usd, str(o["vms"])])
    lines += _table(rows, {1, 2, 3, 4, 5})
    even = float(sched["break_even_gb"])
    if sched["without_vms"]:
        lines.append(
            "  => VMs pay above "
            + (f"{even:.3g} GB" if math.isfinite(even) else "no volume (the overlay is no faster)")
            + f" (break-even volume at t0 = {t0:g} s, {100 * sched['tolerance']:g}% tolerance)"
        )
    return lines


def render_text(plan: TransferPlan) -> str:
    """A report: objective, paths, hops, VMs, cost split, and the baselines side by side."""
    dsts = ", ".join(plan.dsts)
    lines = [
        f"Plan: {plan.src} -> {dsts}, {plan.volume_gb:g} GB",
        f"Objective: {_describe_mode(plan)}",
        f"Solver: {plan.details.get('solver', '-')} {plan.solver_status} in "
        f"{plan.solve_seconds * 1e3:.0f} ms",
    ]
    sched = plan.details.get("schedule")
    if sched:
        lines += _schedule_lines(sched)
    elif "completion_seconds" in plan.details:
        lines.append(
            f"Done in: {_duration(plan.details['completion_seconds'])} "
            f"({plan.details.get('provisioning_seconds', 0):g} s provisioning + transfer)"
        )
    lines += [
        "",
        "Paths:",
    ]
    rows = [["share", "Gbps", "route"]]
    for path in plan.paths:
        rows.append([f"{100 * path.share:.1f}%", f"{path.gbps:.2f}", " -> ".join(path.regions)])
    lines += _table(rows, {0, 1})
    lines += ["", "Hops (where each edge's figures came from, and when):"]
    rows = [["from", "to", "Gbps", "TCP conns", "source", "measured"]]
    for hop in plan.hops:
        rows.append(
            [
                hop.src,
                hop.dst,
                f"{hop.gbps:.2f}",
                str(hop.connections),
                hop.source,
                hop.measured_at or "-",
            ]
        )
    lines += _table(rows, {2, 3})
    started = not sched or sched["start_vms"]
    lines += ["", "Gateway VMs:" if started else "Gateway VMs (the overlay's; not started):"]
    rows = [["region", "VMs"]] + [[u, str(n)] for u, n in plan.vms.items()]
    lines += _table(rows, {1})
    lines += ["", "Compared with:"]
    t0 = float(plan.details.get("provisioning_seconds", 0.0))
    rows = [["plan", "Gbps", "done in", "egress", "VM", "total", "VMs"]]
    own = {
        "predicted_gbps": plan.predicted_gbps,
        "egress_cost_usd": plan.egress_cost_usd,
        "vm_cost_usd": plan.vm_cost_usd,
        "total_cost_usd": plan.total_cost_usd,
        "vms": plan.vms,
    }
    rows.append(_summary_row("this plan", own, plan.volume_gb, t0))
    fastest = plan.details.get("fastest")
    if fastest and abs(fastest["predicted_gbps"] - plan.predicted_gbps) > 1e-9:
        rows.append(_summary_row("fastest", fastest, plan.volume_gb, t0))
    if plan.baseline:
        n = max(plan.baseline["vms"].values(), default=0)
        rows.append(_summary_row(f"direct ({n} VM/region)", plan.baseline, plan.volume_gb, t0))
    ron = plan.details.get("ron")
    if ron:
        via = [r for path in ron["paths"] for r in path[1:-1]]
        label = "RON (" + (", ".join(via) if via else "direct") + ")"
        rows.append(_summary_row(label, ron, plan.volume_gb, t0))
    lines += _table(rows, {1, 2, 3, 4, 5, 6})
    if plan.baseline and plan.baseline["predicted_gbps"] > 0:
        speed = plan.predicted_gbps / plan.baseline["predicted_gbps"]
        price = plan.total_cost_usd / plan.baseline["total_cost_usd"]
        lines.append(f"  => {speed:.2f}x the direct path's throughput at {price:.2f}x its cost")
    lines += comparison_lines(plan.details, plan.volume_gb, _table)
    if "gap_to_lp_bound" in plan.details:
        lines.append("")
        lines.append(
            f"LP relaxation rounded {plan.details['rounding']}: gap to LP bound "
            f"{100 * plan.details['gap_to_lp_bound']:.2f}%"
            + (
                f", gap to MILP {100 * plan.details['gap_to_milp']:.2f}%"
                if "gap_to_milp" in plan.details
                else ""
            )
        )
    frontier = plan.details.get("frontier")
    if frontier:
        lines += [
            "",
            f"Pareto frontier ({sum(p['pareto'] for p in frontier)} of {len(frontier)} "
            "points non-dominated):",
        ]
        rows = [["Gbps", "total", "VMs", "relays"]]
        step = max(1, len(frontier) // 10)
        shown = [
            p
            for i, p in enumerate(frontier)
            if p["pareto"] and (i % step == 0 or i == len(frontier) - 1)
        ]
        for p in shown:
            rows.append(
                [
                    f"{p['gbps']:.2f}",
                    f"${p['cost_usd']:.2f}",
                    str(p["vms"]),
                    ", ".join(p["relays"]) or "-",
                ]
            )
        lines += _table(rows, {0, 1, 2})
    return "\n".join(lines) + "\n"


def _node(region: str) -> str:
    return "r_" + "".join(ch if ch.isalnum() else "_" for ch in region)


def render_mermaid(plan: TransferPlan) -> str:
    """A Mermaid flowchart: one node per region (with its VMs), one edge per hop."""
    lines = ["graph LR"]
    for region in plan.regions:
        n = plan.vms.get(region, 0)
        role = "source" if region == plan.src else "destination" if region in plan.dsts else "relay"
        lines.append(f'  {_node(region)}["{region}<br/>{role}, {n} VM{"s" if n != 1 else ""}"]')
    for hop in plan.hops:
        label = f"{hop.gbps:.2f} Gbps, {hop.connections} conns"
        lines.append(f'  {_node(hop.src)} -->|"{label}"| {_node(hop.dst)}')
    return "\n".join(lines) + "\n"
