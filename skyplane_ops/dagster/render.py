"""A plan's route as Markdown (table) and Mermaid (diagram) for Dagster metadata.

The planner's own renderers are used when ``TransferPlan`` has them; the fallbacks here only
read the plan's public fields, so the metadata stays small (one row per hop, never per object).
"""

from __future__ import annotations

import re

from skyplane_ops.planner.plan import TransferPlan

_NODE = re.compile(r"[^A-Za-z0-9_]")


def _own_renderer(plan: TransferPlan, *names: str) -> str | None:
    for name in names:
        fn = getattr(plan, name, None)
        if callable(fn):
            try:
                out = fn()
            except Exception:  # a renderer bug must not fail a finished transfer
                continue
            if isinstance(out, str) and out.strip():
                return out
    return None


def route_markdown(plan: TransferPlan) -> str:
    """A Markdown table of the hops (flow, connections, VMs) plus the paths and their shares."""
    own = _own_renderer(plan, "to_markdown", "render_markdown")
    if own is not None:
        return own
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


def route_mermaid(plan: TransferPlan) -> str:
    """A Mermaid flowchart: one node per region (with its VM count), one edge per hop."""
    own = _own_renderer(plan, "to_mermaid", "render_mermaid")
    if own is not None:
        return own

    def node(region: str) -> str:
        return "r_" + _NODE.sub("_", region)

    lines = ["flowchart LR"]
    for region in plan.regions:
        vms = plan.vms.get(region, 0)
        role = "source" if region == plan.src else "dest" if region in plan.dsts else "relay"
        lines.append(f'  {node(region)}["{region}<br/>{role}, {vms} VM"]')
    for hop in plan.hops:
        lines.append(
            f'  {node(hop.src)} -->|"{hop.gbps:.2f} Gbit/s, {hop.connections} conns"| '
            f"{node(hop.dst)}"
        )
    return "\n".join(lines)


def mermaid_markdown(plan: TransferPlan) -> str:
    """The Mermaid diagram in a fenced block, as Dagster's Markdown metadata renders it."""
    body = route_mermaid(plan)
    if body.lstrip().startswith("```"):
        return body
    return "```mermaid\n" + body + "\n```"
