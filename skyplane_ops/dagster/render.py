"""A plan's route for Dagster metadata: a ``MetadataValue.table`` and a rendered SVG image.

The table reads only the plan's public fields (one row per hop, never per object). The image
is the planner's route picture (``api.route_svg``, the one renderer the CLI's ``plan --route``
also uses: regions in layers by hop, edge widths by Gbit/s), embedded as a data-URI image in
Markdown so the UI shows a picture, not diagram source. No renderer or browser is needed.
"""

from __future__ import annotations

import base64

import dagster as dg

from skyplane_ops.api import TransferPlan, route_svg

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


def route_image_markdown(plan: TransferPlan) -> str:
    """The SVG as a Markdown image (data URI), which the Dagster UI renders as a picture."""
    data = base64.b64encode(route_svg(plan).encode()).decode()
    return f"![route](data:image/svg+xml;base64,{data})"
