"""The multicast lines of a plan's text report (pure: reads the plan's details only)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Table = Callable[[Sequence[Sequence[str]], set[int]], list[str]]


def _seconds(value: float) -> str:
    if not math.isfinite(value):
        return "never"
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def comparison_lines(details: Mapping[str, Any], volume_gb: float, table: Table) -> list[str]:
    """ "One copy per shared edge" against N unicasts and the star; empty for a unicast plan."""
    multicast = details.get("multicast")
    if not multicast or "this" not in multicast:
        return []
    rows = [["multicast vs", "Gbps/dst", "done in", "total", "source sends", "x dataset"]]
    for name, key in (
        ("this plan (multicast)", "this"),
        ("separate unicasts", "unicasts"),
        ("direct star", "star"),
    ):
        r = multicast.get(key)
        if not r:
            continue
        rows.append(
            [
                name,
                f"{r['predicted_gbps']:.2f}",
                _seconds(r["completion_seconds"]),
                f"${r['total_cost_usd']:.2f}",
                f"{r['source_egress_gb']:.4g} GB",
                f"{r['source_egress_gb'] / volume_gb:.2f}",
            ]
        )
    lines = ["", "One copy per shared edge (multicast), compared with:"]
    lines += table(rows, {1, 2, 3, 4, 5})
    this, uni = multicast["this"], multicast.get("unicasts")
    if uni and uni["total_cost_usd"] > 0:
        saving = 1 - this["total_cost_usd"] / uni["total_cost_usd"]
        lines.append(f"  => saves {100 * saving:.1f}% of the separate unicasts' cost")
    trees = multicast.get("trees") or []
    if trees:
        lines += ["", "Trees (each slice of the data goes down one; region -> next hops):"]
        rows = [["share", "tree"]]
        for tree in trees:
            hops = "; ".join(f"{u} -> {', '.join(vs)}" for u, vs in tree["next_hops"].items())
            rows.append([f"{100 * tree['share']:.1f}%", hops])
        lines += table(rows, {0})
        if multicast.get("tree_excess", 0.0) > 1e-6:
            lines.append(
                f"  (the trees load some edge {100 * multicast['tree_excess']:.1f}% over the plan)"
            )
    return lines
