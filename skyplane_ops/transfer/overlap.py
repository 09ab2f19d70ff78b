"""Refuse a copy whose source and destination are the same place, or one inside the other.

Copying a folder into itself either never ends (the destination grows while it is listed) or,
worse, writes over the very objects being read. The check runs before anything is listed or
started. ``file://`` roots are compared after resolving symlinks (``os.path.realpath``), so a
link to the source is the source; object stores compare scheme, endpoint, account,
bucket/container and prefix (``s3://b/data/`` contains ``s3://b/data/x/`` but not
``s3://b/data2/``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gateway_agent.stores.errors import InvalidURIError
from gateway_agent.stores.uri import parse_uri
from skyplane_ops.errors import TransferError


def _place(uri: str, options: Mapping[str, Any] | None) -> tuple[tuple[str, ...], str] | None:
    """(store identity, folder path ending in "/") or None for URIs no store parser knows."""
    try:
        parsed = parse_uri(uri)
    except InvalidURIError:
        return None  # synthetic:// and null:// benchmark endpoints hold no user data
    if parsed.scheme == "file":
        real = os.path.realpath(parsed.bucket)
        return ("file",), real.rstrip("/") + "/"
    endpoint = str((options or {}).get("endpoint_url") or "").rstrip("/")
    return (parsed.scheme, endpoint, parsed.account or "", parsed.bucket), parsed.prefix


def check_disjoint(
    src_uri: str,
    dst_uri: str,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
) -> None:
    """Raise ``TransferError`` (one line) when source and destination overlap."""
    src = _place(src_uri, src_options)
    dst = _place(dst_uri, dst_options)
    if src is None or dst is None or src[0] != dst[0]:
        return
    (_, s), (_, d) = src, dst
    if s == d:
        why = "are the same place"
    elif d.startswith(s):
        why = "overlap: the destination is inside the source"
    elif s.startswith(d):
        why = "overlap: the source is inside the destination"
    else:
        return
    same_file = s == d and src[0] == ("file",)
    resolved = f" (both resolve to {s.rstrip('/') or '/'})" if same_file else ""
    raise TransferError(
        f"source {src_uri} and destination {dst_uri} {why}{resolved}; nothing was copied: "
        "choose a destination outside the source"
    )
