"""Human-facing views of a ``TransferPlan``: a text report, a Mermaid graph, a frontier PNG."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # plan.py imports this module for to_text/to_mermaid
    from skyplane_ops.planner.plan import TransferPlan

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


def render_text(plan: TransferPlan) -> str:
    """A report: objective, paths, hops, VMs, cost split, and the baselines side by side."""
    dsts = ", ".join(plan.dsts)
    lines = [
        f"Plan: {plan.src} -> {dsts}, {plan.volume_gb:g} GB",
        f"Objective: {_describe_mode(plan)}",
        f"Solver: {plan.details.get('solver', '-')} {plan.solver_status} in "
        f"{plan.solve_seconds * 1e3:.0f} ms",
    ]
    if "completion_seconds" in plan.details:
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
    lines += ["", "Gateway VMs:"]
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


def _bound_line(ax: Any, plan: TransferPlan) -> None:
    """Draw the user's bound: a throughput floor (or a deadline's floor) or a cost ceiling."""
    bound = plan.details.get("bound")
    deadline = plan.details.get("deadline_seconds")
    if plan.details.get("default_bound"):
        return
    if deadline:
        t0 = float(plan.details.get("provisioning_seconds") or 0.0)
        if deadline > t0:
            floor = plan.volume_gb * 8 / (deadline - t0)
            ax.axvline(
                floor,
                ls="--",
                color="tab:orange",
                lw=1.2,
                label=f"deadline {deadline:g} s = floor {floor:.2f} Gbit/s",
            )
    elif bound is not None and plan.mode == "max_throughput":
        ax.axhline(bound, ls="--", color="tab:orange", lw=1.2, label=f"cost ceiling ${bound:g}")
    elif bound is not None:
        ax.axvline(
            bound, ls="--", color="tab:orange", lw=1.2, label=f"throughput floor {bound:g} Gbit/s"
        )


def _point(ax: Any, gbps: float, usd: float, style: str, color: str, name: str, size: int) -> None:
    ax.plot([gbps], [usd], style, color=color, ms=size, label=name, zorder=5)
    ax.annotate(
        f"{name}: {gbps:.2f} Gbit/s, ${usd:.2f}",
        (gbps, usd),
        textcoords="offset points",
        xytext=(6, 6),
        fontsize=7,
        color=color,
    )


def plot_frontier(
    plan: TransferPlan, path: str | Path, *, max_vms_per_region: int | None = None
) -> Path:
    """Write the plan's Pareto frontier (``details["frontier"]``) as PNG or SVG (by suffix):
    the user's bound drawn, the chosen plan and the baselines labelled with Gbit/s and $, and
    the VM limit in the title."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, selectable)
    import matplotlib.pyplot as plt

    frontier = plan.details.get("frontier") or []
    if not frontier:
        raise ValueError("the plan has no frontier; plan with frontier_points > 0")
    good = [p for p in frontier if p["pareto"]]
    bad = [p for p in frontier if not p["pareto"]]
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    ax.plot(
        [p["gbps"] for p in good],
        [p["cost_usd"] for p in good],
        "-o",
        ms=3,
        label="Pareto frontier",
    )
    if bad:
        ax.plot(
            [p["gbps"] for p in bad],
            [p["cost_usd"] for p in bad],
            "x",
            color="grey",
            ms=4,
            label="dominated",
        )
    _bound_line(ax, plan)
    _point(ax, plan.predicted_gbps, plan.total_cost_usd, "*", "red", "chosen plan", 14)
    if plan.baseline:
        b = plan.baseline
        _point(ax, b["predicted_gbps"], b["total_cost_usd"], "s", "black", "direct", 7)
    ron = plan.details.get("ron")
    if ron:
        _point(ax, ron["predicted_gbps"], ron["total_cost_usd"], "^", "green", "RON", 7)
    ax.set_xlabel("throughput (Gbit/s)")
    ax.set_ylabel(f"total cost for {plan.volume_gb:g} GB (US$, egress + VMs, modelled)")
    limit = (
        f"at most {max_vms_per_region} VM(s) per region"
        if max_vms_per_region is not None
        else "VMs per region: provider limit"
    )
    ax.set_title(f"{plan.src} -> {', '.join(plan.dsts)}  ({limit})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
