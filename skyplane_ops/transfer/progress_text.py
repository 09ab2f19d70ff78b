"""Moved to :mod:`skyplane_ops.transfer.progress.text`; also importable from
:mod:`skyplane_ops.transfer.progress`.

Kept only because ``skyplane_ops/api.py`` still imports ``ProgressLine`` and ``plan_paths``
from here (that file is being rewritten on another branch). Remove this module once api.py
imports them from ``skyplane_ops.transfer.progress``.
"""

from __future__ import annotations

from skyplane_ops.transfer.progress.text import ProgressLine, plan_paths, progress_text

__all__ = ["ProgressLine", "plan_paths", "progress_text"]
