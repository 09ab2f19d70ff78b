"""A plan's route as a picture: regions laid out in layers by hop, edges as wide as their Gbit/s.

One layout (``layout``) with two outputs: SVG text drawn by hand (``route_svg``: no renderer
or browser needed, so the Dagster metadata and the Airflow extra link embed it as it is) and
PNG (or any matplotlib format) bytes through matplotlib (``route_image``). Pure: nothing here
writes a file; ``api.write_route`` does, for ``skyplane-ops plan --route``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from html import escape

from skyplane_ops.planner.plan import TransferPlan

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 190, 46, 120, 30, 20
ROLE_FILL = {"source": "#dafbe1", "dest": "#ddf4ff", "relay": "#fff8c5"}
EDGE = "#1f6feb"


@dataclass(frozen=True)
class Layout:
    """Top-left corner of each region's box, and the picture's size (pixels)."""

    pos: dict[str, tuple[int, int]]
    width: int
    height: int


def _columns(plan: TransferPlan) -> list[list[str]]:
    """Regions by column: the source, relays by hop distance, the destinations last."""
    depth: dict[str, int] = {plan.src: 0}
    for path in plan.paths:
        for i, region in enumerate(path.regions):
            if region not in plan.dsts:
                depth[region] = max(depth.get(region, 0), i)
    last = max(depth.values(), default=0) + 1
    for dst in plan.dsts:
        depth[dst] = last
    columns: list[list[str]] = [[] for _ in range(last + 1)]
    for region, col in depth.items():
        columns[col].append(region)
    return [c for c in columns if c]


def layout(plan: TransferPlan) -> Layout:
    columns = _columns(plan)
    rows = max(len(c) for c in columns)
    pos: dict[str, tuple[int, int]] = {}
    for ci, col in enumerate(columns):
        top = PAD + (rows - len(col)) * (BOX_H + GAP_Y) // 2
        for ri, region in enumerate(col):
            pos[region] = (PAD + ci * (BOX_W + GAP_X), top + ri * (BOX_H + GAP_Y))
    width = PAD * 2 + len(columns) * BOX_W + (len(columns) - 1) * GAP_X
    height = PAD * 2 + rows * BOX_H + (rows - 1) * GAP_Y + 24
    return Layout(pos, width, height)


def edge_width(plan: TransferPlan, gbps: float) -> float:
    """1..9 px, proportional to the hop's share of the busiest hop's Gbit/s."""
    top = max((h.gbps for h in plan.hops), default=0.0)
    return 1.0 + 8.0 * (gbps / top if top > 0 else 0.0)


def _role(plan: TransferPlan, region: str) -> str:
    return "source" if region == plan.src else "dest" if region in plan.dsts else "relay"


def caption(plan: TransferPlan) -> str:
    return (
        f"{plan.predicted_gbps:.2f} Gbit/s predicted, ${plan.total_cost_usd:.4f} "
        f"(egress ${plan.egress_cost_usd:.4f} + VMs ${plan.vm_cost_usd:.4f})"
    )


def route_svg(plan: TransferPlan) -> str:
    """The route as SVG text (regions as boxes with VM counts, hops as labelled arrows)."""
    lay = layout(plan)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width}" height="{lay.height}" '
        'font-family="sans-serif" font-size="12">',
        '<defs><marker id="a" markerWidth="6" markerHeight="5" refX="5" refY="2.5" '
        f'orient="auto"><path d="M0,0 L6,2.5 L0,5 z" fill="{EDGE}"/></marker></defs>',
    ]
    for hop in plan.hops:
        if hop.src not in lay.pos or hop.dst not in lay.pos:
            continue
        (x1, y1), (x2, y2) = lay.pos[hop.src], lay.pos[hop.dst]
        ax, ay, bx, by = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
        parts.append(
            f'<line x1="{ax}" y1="{ay}" x2="{bx}" y2="{by}" stroke="{EDGE}" '
            f'stroke-opacity="0.8" stroke-width="{edge_width(plan, hop.gbps):.1f}" '
            'marker-end="url(#a)"/>'
        )
        parts.append(
            f'<text x="{(ax + bx) // 2}" y="{(ay + by) // 2 - 8}" text-anchor="middle">'
            f"{hop.gbps:.2f} Gbit/s · {hop.connections} conns</text>"
        )
    for region, (x, y) in lay.pos.items():
        role = _role(plan, region)
        parts.append(
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" '
            f'fill="{ROLE_FILL[role]}" stroke="#57606a"/>'
        )
        parts.append(
            f'<text x="{x + BOX_W // 2}" y="{y + 19}" text-anchor="middle" '
            f'font-weight="bold">{escape(region)}</text>'
        )
        parts.append(
            f'<text x="{x + BOX_W // 2}" y="{y + 36}" text-anchor="middle">{role}, '
            f"{plan.vms.get(region, 0)} VM(s)</text>"
        )
    parts.append(f'<text x="{PAD}" y="{lay.height - 8}">{escape(caption(plan))}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def route_image(plan: TransferPlan, fmt: str = "png") -> bytes:
    """The route picture drawn by matplotlib in format ``fmt`` (PNG by default) on the same
    layout as ``route_svg``."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    lay = layout(plan)
    dpi = 100
    fig = plt.figure(figsize=(lay.width / dpi, lay.height / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, lay.width)
    ax.set_ylim(lay.height, 0)  # SVG-style: y grows downwards
    ax.axis("off")
    for hop in plan.hops:
        if hop.src not in lay.pos or hop.dst not in lay.pos:
            continue
        (x1, y1), (x2, y2) = lay.pos[hop.src], lay.pos[hop.dst]
        ax.annotate(
            "",
            xy=(x2, y2 + BOX_H / 2),
            xytext=(x1 + BOX_W, y1 + BOX_H / 2),
            arrowprops={
                "arrowstyle": "-|>",
                "color": EDGE,
                "alpha": 0.8,
                "lw": edge_width(plan, hop.gbps),
            },
        )
        ax.text(
            (x1 + BOX_W + x2) / 2,
            (y1 + y2) / 2 + BOX_H / 2 - 8,
            f"{hop.gbps:.2f} Gbit/s · {hop.connections} conns",
            ha="center",
            fontsize=8,
        )
    for region, (x, y) in lay.pos.items():
        role = _role(plan, region)
        ax.add_patch(
            FancyBboxPatch(
                (x, y),
                BOX_W,
                BOX_H,
                boxstyle="round,pad=0,rounding_size=6",
                fc=ROLE_FILL[role],
                ec="#57606a",
            )
        )
        ax.text(x + BOX_W / 2, y + 17, region, ha="center", fontsize=9, weight="bold")
        ax.text(
            x + BOX_W / 2,
            y + 34,
            f"{role}, {plan.vms.get(region, 0)} VM(s)",
            ha="center",
            fontsize=8,
        )
    ax.text(PAD, lay.height - 8, caption(plan), fontsize=8)
    out = io.BytesIO()
    fig.savefig(out, dpi=dpi, format=fmt)
    plt.close(fig)
    return out.getvalue()
