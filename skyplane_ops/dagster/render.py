"""A plan's route as Markdown (table) and Mermaid (diagram) for Dagster metadata.

The diagram is the planner's own (``TransferPlan.to_mermaid``); the table reads only the plan's
public fields, so the metadata stays small (one row per hop, never per object).
"""

from __future__ import annotations

from skyplane_ops.api import TransferPlan


def route_markdown(plan: TransferPlan) -> str:
    """A Markdown table of the hops (flow, connections, VMs) plus the paths and their shares."""
    lines = [
        f"**{plan.src} → {', '.join(plan.dsts)}**: {plan.predicted_gbps:.2f} Gbit/s predicted, "
        f"${plan.total_cost_usd:.4f} (egress ${plan.egress_cost_usd:.4f} + "
        f"VMs ${plan.vm_cost_usd:.4f}), solver {plan.solver_status}",
        "",
        "| hop | Gbit/s | TCP connections | VMs at source |",
        "|---|---:|---:|---:|",
    ]
    for hop in plan.hops:
        lines.append(
            f"| {hop.src} → {hop.dst} | {hop.gbps:.2f} | {hop.connections} | "
            f"{plan.vms.get(hop.src, 0)} |"
        )
    if plan.paths:
        lines += ["", "| path | share | Gbit/s |", "|---|---:|---:|"]
        for path in plan.paths:
            lines.append(f"| {' → '.join(path.regions)} | {path.share:.0%} | {path.gbps:.2f} |")
    return "\n".join(lines)


def mermaid_markdown(plan: TransferPlan) -> str:
    """The Mermaid diagram in a fenced block, as Dagster's Markdown metadata renders it."""
    return "```mermaid\n" + plan.to_mermaid().rstrip("\n") + "\n```"
