"""Progress as the human lines a task or run log wants: %, MiB, Gbit/s, ETA, and the split per path.

The engine's progress samples are counters (bytes and chunks done, elapsed seconds, rate);
this turns a stream of them into one line each time something moved, e.g.::

    transfer t-1: 42.0% 403.0/960.0 MiB at 1.84 Gbit/s, ETA 2.4 s, 31/72 chunks
      aws:us-east-1 -> gcp:europe-west4 (100%): 403.0 MiB

Per-path bytes split the total by the plan's shares (the dispatcher assigns chunks to paths
by share) and are labelled as such; a sample that carries the Gbit/s each path delivered
(``path_gbps``, as the Airflow driver's status does) adds it, labelled measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

MIB = 1024 * 1024


def _counters(update: Any) -> dict[str, Any]:
    if update is None:
        return {}
    if dataclasses.is_dataclass(update) and not isinstance(update, type):
        return dataclasses.asdict(update)
    return dict(update) if isinstance(update, Mapping) else dict(vars(update))


def _eta(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def progress_text(label: str, update: Any, paths: Sequence[tuple[str, float]] = ()) -> str | None:
    """One human line (plus one per path) for a progress sample; None without byte counters."""
    c = _counters(update)
    done, total = c.get("bytes_done"), c.get("bytes_total")
    if not isinstance(done, int | float) or not isinstance(total, int | float):
        return None
    pct = 100.0 * done / total if total else 100.0
    gbps = float(c.get("gbps") or 0.0)
    elapsed = float(c.get("elapsed_s") or 0.0)
    if not gbps and elapsed > 0:
        gbps = done * 8 / elapsed / 1e9
    text = f"{label}: {pct:.1f}% {done / MIB:.1f}/{total / MIB:.1f} MiB at {gbps:.2f} Gbit/s"
    if gbps > 0 and total > done:
        text += f", ETA {_eta((total - done) * 8 / (gbps * 1e9))}"
    if c.get("chunks_total"):
        text += f", {c.get('chunks_done', 0)}/{c['chunks_total']} chunks"
    if c.get("resent"):
        text += f", {c['resent']} re-sent"
    given = c.get("path_gbps")
    measured: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    shares = dict(paths)
    for route in [*shares, *(r for r in measured if r not in shares)]:
        line = f"\n  {route}"
        if route in shares:
            line += f" ({shares[route]:.0%} by plan): {done * shares[route] / MIB:.1f} MiB"
        if route in measured:
            line += (
                f"{',' if route in shares else ':'} {float(measured[route]):.2f} Gbit/s measured"
            )
        text += line
    return text


class ProgressLine:
    """Remembers the last sample so that a log gets a line only when something moved."""

    def __init__(self, label: str, paths: Sequence[tuple[str, float]] = ()) -> None:
        self.label = label
        self.paths = list(paths)
        self._last: tuple[Any, ...] | None = None

    def update(self, update: Any) -> str | None:
        c = _counters(update)
        key = (c.get("bytes_done"), c.get("chunks_done"))
        if not c or key == self._last:
            return None
        self._last = key
        return progress_text(self.label, c, self.paths)


def plan_paths(plan: Any) -> list[tuple[str, float]]:
    """(route text, share) of every path of a ``TransferPlan``, largest share first."""
    return [
        (" -> ".join(p.regions), float(p.share)) for p in sorted(plan.paths, key=lambda p: -p.share)
    ]
