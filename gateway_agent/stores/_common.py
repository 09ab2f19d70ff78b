"""What the backends share: argument checks, options, the retry policy, HTTP error verdicts,
pagination, and :class:`CloudStore`, the base of the SDK-backed stores."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

from tenacity import Retrying

from gateway_agent.stores.base import ListRow, ObjectInfo
from gateway_agent.stores.errors import (
    AccessDeniedError,
    InvalidURIError,
    KeyNotSupportedError,
    ObjectNotFoundError,
    SourceChangedError,
    StoreError,
    TransientStoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.retry import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_DELAY_S,
    call_with_retry,
    retrying,
)
from gateway_agent.stores.uri import StoreURI

T = TypeVar("T")

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
    check_common_options(opts, uri)
    return opts


# The retry options' ranges: (lowest allowed, highest allowed, whole number?).
_COMMON_RANGES = {
    "max_attempts": (1, 100, True),
    "max_retry_seconds": (0, 86400, False),
    "backoff_seconds": (0, 600, False),
}


def check_common_options(options: Mapping[str, Any], uri: str) -> None:
    """The retry options every store takes are numbers in range (``max_attempts`` -1, 0, NaN
    or ``"3"`` is a mistake, not "no retries")."""
    for name, (low, high, whole) in _COMMON_RANGES.items():
        if name not in options:
            continue
        value = options[name]
        ok_type = isinstance(value, int) if whole else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not math.isfinite(value):
            kind = "a whole number" if whole else "a number"
            raise InvalidURIError(f"store option {name} of {uri} must be {kind}, not {value!r}")
        if not low <= value <= high:
            raise InvalidURIError(
                f"store option {name} of {uri} must be {low}..{high}, got {value}"
            )


def retry_policy(opts: Mapping[str, Any]) -> Retrying:
    """The tenacity controller configured by the common options."""
    return retrying(
        max_attempts=int(opts.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
        max_delay=float(opts.get("max_retry_seconds", DEFAULT_MAX_DELAY_S)),
        backoff_s=float(opts.get("backoff_seconds", 0.2)),
    )


def check_key(key: str) -> str:
    """Keys are non-empty strings without NUL; everything else (unicode, spaces, ``//``, ``%``,
    line breaks, and on local disks non-UTF-8 bytes as surrogate escapes) is kept verbatim.
    What one store cannot hold is refused by that store (:func:`check_cloud_name`, the local
    store's segment rules) with :class:`KeyNotSupportedError`."""
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidURIError(f"invalid object key {key!r}")
    return key


def check_cloud_name(
    key: str, full: str, uri: str, *, line_breaks: bool = True, limit_in_chars: bool = False
) -> str:
    """The full object name of ``key`` (``full``) as a cloud can hold it: valid UTF-8 (a local
    file name with other bytes arrives as surrogate escapes), at most 1024 bytes (S3, GCS) or
    characters (``limit_in_chars``: Azure), and, where the cloud refuses them
    (``line_breaks=False``: GCS), without CR or LF."""
    check_key(key)
    try:
        size = len(full.encode("utf-8"))
    except UnicodeEncodeError:
        raise KeyNotSupportedError(
            f"{uri} cannot hold key {key!r}: the name is not valid UTF-8", code="InvalidUTF8"
        ) from None
    if limit_in_chars:
        size = len(full)
    if size > 1024:
        unit = "characters" if limit_in_chars else "bytes"
        raise KeyNotSupportedError(
            f"{uri} cannot hold key {key!r}: the object name is {size} {unit} (limit 1024)",
            code="KeyTooLong",
        )
    if not line_breaks and ("\n" in full or "\r" in full):
        raise KeyNotSupportedError(
            f"{uri} cannot hold key {key!r}: the name contains a line break", code="LineBreak"
        )
    return full


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


def require_parts(where: str, part_numbers: Sequence[int], present: Container[int]) -> list[int]:
    """The parts to join, in order; refuses an empty list or a part that was never uploaded."""
    wanted = sorted(set(part_numbers))
    missing = [n for n in wanted if n not in present]
    if missing or not wanted:
        raise UploadNotFoundError(f"{where}: upload misses parts {missing}")
    return wanted


def error_for_status(
    msg: str,
    code: str,
    status: int | None,
    denied: Container[str] = (),
    transient: Container[str] = (),
) -> StoreError:
    """The HTTP-level verdict every cloud shares, after its own service codes were checked."""
    if code in denied or status in (401, 403):
        return AccessDeniedError(msg, code=code, status=status)
    if code in transient or status in (408, 429) or (status or 0) >= 500:
        return TransientStoreError(msg, code=code, status=status)
    return StoreError(msg, code=code, status=status)


def info_row(info: ObjectInfo) -> ListRow:
    """``info`` as the ``ListRow`` a catalog stores (as ``skyplane_ops`` makes it from
    ``list``): for a store's ``list_level`` built on its ``list`` entries."""
    when = info.modified
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    us = (
        None
        if when is None
        else (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    )
    sums = json.dumps(info.checksums, sort_keys=True) if info.checksums else None
    return (info.key, info.size, us, sums, info.version, info.etag)


def paginate(
    fetch: Callable[[str | None], tuple[Iterable[T], str | None]],
) -> Iterator[T]:
    """Stream items page by page: ``fetch(token)`` returns a page and the next token (or None)."""
    token: str | None = None
    while True:
        items, token = fetch(token)
        yield from items
        if not token:
            return


class CloudStore:
    """What the SDK-backed stores share: URI, checked options, retry policy and ``_call``.

    A subclass lists its own option names in ``OPTIONS`` and maps SDK exceptions to typed
    errors in ``_classify``; ``_call`` runs an SDK call with retries and that mapping.
    """

    OPTIONS: ClassVar[frozenset[str]] = frozenset()
    LINE_BREAKS: ClassVar[bool] = True  # whether object names may contain CR/LF
    LIMIT_IN_CHARS: ClassVar[bool] = False  # name limit of 1024 characters, not bytes (Azure)

    def __init__(self, parsed: StoreURI, options: Mapping[str, Any] | None = None):
        self.uri = str(parsed)
        self._parsed = parsed
        self._opts = check_options(options, self.OPTIONS, self.uri)
        self._retry = retry_policy(self._opts)

    def _name(self, key: str) -> str:
        """The full object name of ``key``, refused (:class:`KeyNotSupportedError`) when this
        cloud cannot hold it."""
        full = self._parsed.key(key) if isinstance(key, str) else key
        return check_cloud_name(
            key,
            full,
            self.uri,
            line_breaks=self.LINE_BREAKS,
            limit_in_chars=self.LIMIT_IN_CHARS,
        )

    def check_name(self, key: str) -> None:
        """Raise :class:`KeyNotSupportedError` if this store cannot hold ``key``."""
        self._name(key)

    def _changed(
        self, key: str, version: str, found: str | None, why: str = "it changed"
    ) -> StoreError:
        """The pinned read of ``key`` found another version (or none)."""
        return SourceChangedError(
            f"read {self.uri}{key!r}: {why} after it was listed (version {version})",
            key=key,
            expected=version,
            found=found,
            status=412,
        )

    def head(self, key: str) -> ObjectInfo:
        """Every subclass answers this (the ObjectStore protocol)."""
        raise NotImplementedError

    def _check_version(self, key: str, version: str | None) -> None:
        """A read of no bytes still tells a missing or changed object (an SDK answers an
        empty range without checking the pinned version)."""
        try:
            info = self.head(key)
        except ObjectNotFoundError:
            if version is None:
                raise
            raise self._changed(key, version, "deleted", "it was deleted") from None
        if version is not None and info.version != version:
            raise self._changed(key, version, info.version)

    def _classify(self, exc: Exception, where: str, op: str) -> StoreError | None:
        """The typed error for an SDK exception, or None to let it through unchanged."""
        raise NotImplementedError

    def _call(self, op: str, key: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        where = f"{op} {self.uri}{key}"

        def translate(exc: Exception) -> Exception:
            if isinstance(exc, StoreError):
                return exc
            return self._classify(exc, where, op) or exc

        return call_with_retry(self._retry, translate, lambda: fn(*args, **kwargs))
