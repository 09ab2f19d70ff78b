"""A plan's route for Dagster metadata: a ``MetadataValue.table`` and a rendered SVG image.

The table reads only the plan's public fields (one row per hop, never per object). The image
is a small hand-laid SVG (regions in columns by their position on the paths, hops as arrows
labelled with Gbit/s and connections), embedded as a data-URI image in Markdown so the UI
shows a picture, not diagram source. No renderer or browser is needed to produce it.
"""

from __future__ import annotations

import base64
from html import escape

import dagster as dg

from skyplane_ops.api import TransferPlan

_HOP_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("from", "string"),
        dg.TableColumn("to", "string"),
        dg.TableColumn("gbps", "float"),
        dg.TableColumn("connections", "int"),
        dg.TableColumn("vms_at_source", "int"),
    ]
)
_PATH_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("path", "string"),
        dg.TableColumn("share", "float"),
        dg.TableColumn("gbps", "float"),
    ]
)


def route_table(plan: TransferPlan) -> dg.TableMetadataValue:
    """The hops as a table: from, to, Gbit/s, TCP connections, VMs at the hop's source."""
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord(
                {
                    "from": hop.src,
                    "to": hop.dst,
                    "gbps": round(hop.gbps, 3),
                    "connections": int(hop.connections),
                    "vms_at_source": int(plan.vms.get(hop.src, 0)),
                }
            )
            for hop in plan.hops
        ],
        schema=_HOP_SCHEMA,
    )


def paths_table(plan: TransferPlan) -> dg.TableMetadataValue:
    """The paths with their share of the flow."""
    return dg.MetadataValue.table(
        records=[
            dg.TableRecord(
                {
                    "path": " -> ".join(p.regions),
                    "share": round(p.share, 4),
                    "gbps": round(p.gbps, 3),
                }
            )
            for p in sorted(plan.paths, key=lambda p: -p.share)
        ],
        schema=_PATH_SCHEMA,
    )


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


def route_svg(plan: TransferPlan) -> str:
    """The route as an SVG picture (regions as boxes with VM counts, hops as labelled arrows)."""
    box_w, box_h, gap_x, gap_y, pad = 190, 46, 120, 30, 20
    columns = _columns(plan)
    pos: dict[str, tuple[int, int]] = {}
    rows = max(len(c) for c in columns)
    for ci, col in enumerate(columns):
        top = pad + (rows - len(col)) * (box_h + gap_y) // 2
        for ri, region in enumerate(col):
            pos[region] = (pad + ci * (box_w + gap_x), top + ri * (box_h + gap_y))
    width = pad * 2 + len(columns) * box_w + (len(columns) - 1) * gap_x
    height = pad * 2 + rows * box_h + (rows - 1) * gap_y + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<defs><marker id="a" markerWidth="10" markerHeight="8" refX="9" refY="4" '
        'orient="auto"><path d="M0,0 L10,4 L0,8 z" fill="#1f6feb"/></marker></defs>',
    ]
    for hop in plan.hops:
        if hop.src not in pos or hop.dst not in pos:
            continue
        (x1, y1), (x2, y2) = pos[hop.src], pos[hop.dst]
        ax, ay, bx, by = x1 + box_w, y1 + box_h // 2, x2, y2 + box_h // 2
        parts.append(
            f'<line x1="{ax}" y1="{ay}" x2="{bx}" y2="{by}" stroke="#1f6feb" '
            f'stroke-width="{1 + min(6.0, hop.gbps / 5):.1f}" marker-end="url(#a)"/>'
        )
        parts.append(
            f'<text x="{(ax + bx) // 2}" y="{(ay + by) // 2 - 6}" text-anchor="middle">'
            f"{hop.gbps:.2f} Gbit/s · {hop.connections} conns</text>"
        )
    for region, (x, y) in pos.items():
        role = "source" if region == plan.src else "dest" if region in plan.dsts else "relay"
        fill = {"source": "#dafbe1", "dest": "#ddf4ff", "relay": "#fff8c5"}[role]
        parts.append(
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" fill="{fill}" '
            'stroke="#57606a"/>'
        )
        parts.append(
            f'<text x="{x + box_w // 2}" y="{y + 19}" text-anchor="middle" '
            f'font-weight="bold">{escape(region)}</text>'
        )
        parts.append(
            f'<text x="{x + box_w // 2}" y="{y + 36}" text-anchor="middle">{role}, '
            f"{plan.vms.get(region, 0)} VM(s)</text>"
        )
    parts.append(
        f'<text x="{pad}" y="{height - 8}">{plan.predicted_gbps:.2f} Gbit/s predicted, '
        f"${plan.total_cost_usd:.4f} (egress ${plan.egress_cost_usd:.4f} + VMs "
        f"${plan.vm_cost_usd:.4f})</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts)


def route_image_markdown(plan: TransferPlan) -> str:
    """The SVG as a Markdown image (data URI), which the Dagster UI renders as a picture."""
    data = base64.b64encode(route_svg(plan).encode()).decode()
    return f"![route](data:image/svg+xml;base64,{data})"
