"""Progress of a transfer: ``report`` (the samples, and a bar on a terminal, JSON lines
otherwise, or any callable) and ``text`` (the human lines a task or run log wants). The names
the faces and users import are importable from here.
"""

from __future__ import annotations

from skyplane_ops.transfer.progress.report import (
    JsonProgress,
    Progress,
    ProgressCallback,
    TerminalProgress,
    default_progress,
    steady_rate_mbit,
)
from skyplane_ops.transfer.progress.text import ProgressLine, plan_paths, progress_text

__all__ = [
    "JsonProgress",
    "Progress",
    "ProgressCallback",
    "ProgressLine",
    "TerminalProgress",
    "default_progress",
    "plan_paths",
    "progress_text",
    "steady_rate_mbit",
]
