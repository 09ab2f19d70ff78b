"""Progress reporting: a bar on a terminal, JSON lines otherwise, or any callable."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TextIO


@dataclass
class Progress:
    """One progress sample, built from incremental gateway counters."""

    bytes_done: int
    bytes_total: int
    chunks_done: int
    chunks_total: int
    elapsed_s: float
    gbps: float
    resent: int = 0
    # Gbit/s delivered so far per path ("a -> r -> b"), averaged since the start.
    path_gbps: dict[str, float] = field(default_factory=dict)
    # Objects whose every byte has landed in this run, of those this run moves.
    objects_done: int = 0
    objects_total: int = 0
    # The driver's queue: chunks (and their bytes) submitted to gateways and not finished, of
    # the window it keeps submitted.
    chunks_in_flight: int = 0
    bytes_in_flight: int = 0
    window_chunks: int = 0


ProgressCallback = Callable[[Progress], None]


def steady_rate_mbit(samples: Sequence[Progress]) -> float:
    """Mbit/s a transfer sustained: least-squares slope of bytes done over time.

    Only samples taken while bytes were moving count (no ramp before the first chunk lands, no
    idle tail), plus the final one. Chunks complete whole, so this slope, not bytes/seconds,
    is the rate a shaped link sustains.
    """
    total = samples[-1].bytes_total
    points = [(s.elapsed_s, s.bytes_done) for s in samples if 0 < s.bytes_done < total]
    points.append((samples[-1].elapsed_s, samples[-1].bytes_done))
    if len(points) < 2:
        raise ValueError("a steady rate needs at least two samples with bytes moving")
    slope, _ = statistics.linear_regression([t for t, _ in points], [b for _, b in points])
    return slope * 8 / 1e6


class TerminalProgress:
    """Redraws one line with a bar; at most ``rate`` times per second."""

    def __init__(self, stream: TextIO = sys.stderr, rate: float = 5.0) -> None:
        self.stream = stream
        self._min_gap = 1.0 / rate
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.bytes_done >= p.bytes_total and p.chunks_done >= p.chunks_total
        if not final and now - self._last < self._min_gap:
            return
        self._last = now
        frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        self.stream.write(
            f"\r[{bar}] {frac * 100:5.1f}% {p.bytes_done / 2**20:,.1f}/"
            f"{p.bytes_total / 2**20:,.1f} MiB  {p.gbps:6.2f} Gbit/s  "
            f"chunks {p.chunks_done}/{p.chunks_total}"
        )
        if final:
            self.stream.write("\n")
        self.stream.flush()


class JsonProgress:
    """One JSON object per line, at most ``rate`` per second (for logs and pipelines)."""

    def __init__(self, stream: TextIO = sys.stderr, rate: float = 1.0) -> None:
        self.stream = stream
        self._min_gap = 1.0 / rate
        self._last = 0.0

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        final = p.chunks_done >= p.chunks_total
        if not final and now - self._last < self._min_gap:
            return
        self._last = now
        self.stream.write(json.dumps({"event": "progress", **asdict(p)}) + "\n")
        self.stream.flush()


def default_progress(stream: TextIO = sys.stderr) -> ProgressCallback:
    return TerminalProgress(stream) if stream.isatty() else JsonProgress(stream)
