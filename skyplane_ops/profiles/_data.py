"""Access to the data files shipped in ``skyplane_ops/default_profiles`` (a link to profiles/)."""

from __future__ import annotations

import json
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError


def default_file(name: str) -> Traversable:
    """Return a default-profile data file; read through importlib so it works from a wheel."""
    return files("skyplane_ops") / "default_profiles" / name


def read_text(source: str | Path | Traversable) -> str:
    """Read a text file, turning a missing/unreadable file into a ProfileError naming it."""
    try:
        if isinstance(source, str | Path):
            return Path(source).read_text(encoding="utf-8")
        return source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{source}: cannot read profile file: {exc}") from exc


def read_json(source: str | Path | Traversable) -> dict[str, Any]:
    """Parse a JSON object from a file; syntax errors name the file, line and column."""
    text = read_text(source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object at the top level")
    return data
