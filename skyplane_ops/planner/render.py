"""Pictures of a ``TransferPlan``'s frontier: ``frontier_image`` draws it (PNG, SVG, ... bytes).

Pure: the image comes back as bytes and the caller writes it (``api.plot_frontier``). The text
forms (``render_text``, ``render_mermaid``) live with the data in ``plan`` and are re-exported
here under their old home.
"""

from __future__ import annotations

import io
from typing import Any

from skyplane_ops.planner.plan import TransferPlan, render_mermaid, render_text

__all__ = ["frontier_image", "render_mermaid", "render_text"]


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


def frontier_image(
    plan: TransferPlan, fmt: str = "png", *, max_vms_per_region: int | None = None
) -> bytes:
    """The plan's Pareto frontier (``details["frontier"]``) as an image in matplotlib format
    ``fmt`` (``png``, ``svg``, ...): the user's bound drawn, the chosen plan and the baselines
    labelled with Gbit/s and $, and the VM limit in the title."""
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
    out = io.BytesIO()
    fig.savefig(out, format=fmt)
    plt.close(fig)
    return out.getvalue()
