"""Human durations (``90s``, ``30m``, ``12h``, ``3d``, ``1w``) for freshness and staleness."""

from __future__ import annotations

import re

from skyplane_ops.profiler.errors import ProfilerError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``text``; a bare number means seconds."""
    if isinstance(text, int | float):
        if text < 0:
            raise ProfilerError(f"duration must not be negative: {text}")
        return float(text)
    match = _PATTERN.match(text)
    if not match:
        raise ProfilerError(f"cannot read duration {text!r}; use e.g. 90s, 30m, 12h, 3d or 1w")
    return float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]


def format_age(seconds: float) -> str:
    """A short age such as ``3.2h`` or ``2.0d`` for tables."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
