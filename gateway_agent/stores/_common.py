"""Small helpers every backend shares: argument checks, options and the retry policy."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tenacity import Retrying

from gateway_agent.stores.errors import InvalidURIError, UploadNotFoundError
from gateway_agent.stores.retry import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELAY_S, retrying

# Options every backend accepts (besides its own); all are plain JSON values, never secrets.
COMMON_OPTIONS = frozenset({"max_attempts", "max_retry_seconds", "backoff_seconds"})
_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


def check_options(
    options: Mapping[str, Any] | None, allowed: frozenset[str], uri: str
) -> dict[str, Any]:
    """Reject unknown option names early: a typo must not silently fall back to a default."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - allowed - COMMON_OPTIONS)
    if unknown:
        raise InvalidURIError(f"unknown store option(s) {unknown} for {uri}")
    return opts


def retry_policy(opts: Mapping[str, Any]) -> Retrying:
    """The tenacity controller configured by the common options."""
    return retrying(
        max_attempts=int(opts.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
        max_delay=float(opts.get("max_retry_seconds", DEFAULT_MAX_DELAY_S)),
        backoff_s=float(opts.get("backoff_seconds", 0.2)),
    )


def check_key(key: str) -> str:
    """Keys are non-empty strings without NUL; everything else (unicode, spaces, //) is kept."""
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidURIError(f"invalid object key {key!r}")
    if len(key.encode("utf-8")) > 1024:
        raise InvalidURIError("object key longer than 1024 bytes")
    return key


def check_range(start: int, length: int | None) -> None:
    """Ranged reads take a non-negative start and an optional non-negative length."""
    if start < 0 or (length is not None and length < 0):
        raise ValueError(f"invalid byte range start={start} length={length}")


def check_part_number(part_number: int, max_parts: int = 10_000) -> None:
    """Part numbers are 1-based, like S3's."""
    if not 1 <= part_number <= max_parts:
        raise ValueError(f"part_number must be in 1..{max_parts}, got {part_number}")


def check_upload_id(upload_id: str) -> str:
    """Backends that mint their own ids use 32 hex chars; anything else cannot be ours."""
    if not isinstance(upload_id, str) or not _UPLOAD_ID.match(upload_id):
        raise UploadNotFoundError(f"unknown multipart upload id {upload_id!r}")
    return upload_id


def slice_range(size: int, start: int, length: int | None) -> tuple[int, int]:
    """Clamp [start, start+length) to the object: reads past the end return what exists."""
    end = size if length is None else min(size, start + length)
    return min(start, size), max(min(start, size), end)
