"""Dagster's transfer log: no lone "0.0%" line for a fast copy, and the last sample is
logged when the transfer ends (issue 41). The context is a stand-in that keeps log lines."""

from __future__ import annotations

from types import SimpleNamespace

from skyplane_ops.api import Progress
from skyplane_ops.dagster.steps import _LogEvents
from skyplane_ops.testing.transfer import DST, SRC, make_plan

MiB = 1024 * 1024


def _sample(done: int) -> Progress:
    return Progress(
        bytes_done=done,
        bytes_total=8 * MiB,
        chunks_done=done // MiB,
        chunks_total=8,
        elapsed_s=0.2,
        gbps=0.3,
        path_gbps={f"{SRC} -> {DST}": 0.3} if done else {},
    )


def test_fast_copy_logs_its_end_not_a_lone_zero() -> None:
    lines: list[str] = []
    context = SimpleNamespace(log=SimpleNamespace(info=lines.append))
    events = _LogEvents(context, "events_eu[2026-11-27]")
    events.planned(make_plan([SRC, DST]))
    with events.phase("transfer", "a -> b") as note:
        events.progress(_sample(0))  # the first sample, before any chunk landed
        events.progress(_sample(8 * MiB))  # within the log interval: not logged yet
        note["done"] = "verification passed"
    assert not any(": 0.0%" in line for line in lines), lines
    assert any(line.startswith("transfer events_eu[2026-11-27]: 100.0%") for line in lines)
    assert any(f"{SRC} -> {DST} (100% by plan): 8.0 MiB" in line for line in lines)
    assert lines[-1].endswith("transfer: verification passed")
