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


def _versus(this: Mapping[str, Any], other: Mapping[str, Any], what: str) -> str:
    """ "saves 12.0% of X's cost" or "costs 5.0% more than X", and the time against it."""
    ratio = this["total_cost_usd"] / other["total_cost_usd"]
    money = (
        f"saves {100 * (1 - ratio):.1f}% of {what}' cost"
        if ratio <= 1
        else f"costs {100 * (ratio - 1):.1f}% more than {what}"
    )
    time_x = this["completion_seconds"] / other["completion_seconds"]
    return f"{money}, done in {time_x:.2f}x their time"


def comparison_lines(details: Mapping[str, Any], volume_gb: float, table: Table) -> list[str]:
    """ "One copy per shared edge" against N unicasts and the star; empty for a unicast plan."""
    multicast = details.get("multicast")
    if not multicast or "this" not in multicast:
        return []
    rows = [["multicast vs", "Gbps/dst", "done in", "total", "source sends", "x dataset"]]
    for name, key in (
        ("this plan (multicast)", "this"),
        ("separate unicasts", "unicasts"),
        ("unicasts in one job", "joint"),
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
    this = multicast["this"]
    for key, what in (("unicasts", "the separate unicasts"), ("joint", "the unicasts in one job")):
        other = multicast.get(key)
        if other and other["total_cost_usd"] > 0:
            lines.append("  => " + _versus(this, other, what))
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
