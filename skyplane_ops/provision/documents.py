"""Reading a user's JSON/TOML option document, bounded: size, nesting depth and numbers.

Options come from the command line, files and Airflow connections. A document nested 100,000
deep must not end in a ``RecursionError`` traceback, a 2 GB file must not be read whole, and
``NaN`` or ``Infinity`` (which Python's ``json`` accepts) is no option value. Every refusal is
a ``ValueError`` with one line, so the callers' existing handling names the document.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

MAX_DOCUMENT_BYTES = 1 << 20  # 1 MiB: an inventory of thousands of hosts fits
MAX_DEPTH = 32


def _scan_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text (outside strings), without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _value_depth(value: Any) -> int:
    """Nesting depth of a parsed value (iterative: no recursion limit to hit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number an option can have")


def parse_document(text: str, *, toml: bool = False) -> Any:
    """The JSON (or TOML) ``text`` as Python values, within the size and depth limits."""
    if len(text) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"too large ({len(text):,} characters; at most {MAX_DOCUMENT_BYTES:,})")
    if not toml and _scan_depth(text) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        data = tomllib.loads(text) if toml else json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    if _value_depth(data) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return data


def read_document(path: str | Path) -> Any:
    """A JSON or TOML file (by its extension), within the limits; ``OSError`` or
    ``ValueError`` (one line) otherwise."""
    path = Path(path)
    with open(path, "rb") as fh:
        raw = fh.read(MAX_DOCUMENT_BYTES + 1)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"too large (more than {MAX_DOCUMENT_BYTES:,} bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_document(text, toml=path.suffix == ".toml")
