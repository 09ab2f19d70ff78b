"""Selection beyond globs: by modification time (``max_age``/``min_age`` durations,
``changed_since``/``changed_before`` timestamps) and by a list of keys (``files_from``).

A scheduled pipeline copies what landed since its last run, or the keys an upstream task
wrote; both are checked here once, when the request is built, and applied where the source
is read: time as a filter on each listing row (its modification time), a list by looking each
key up (``head_rows``) instead of listing, so 1,000 named keys in a 10-million-object bucket
cost 1,000 requests, not a listing.
"""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from gateway_agent.stores.base import ListRow, ObjectInfo, ObjectStore, SkippedEntry
from gateway_agent.stores.errors import BucketNotFoundError, ObjectNotFoundError, StoreError
from skyplane_ops.errors import SkyplaneOpsError, TransferError
from skyplane_ops.profiler.durations import parse_duration
from skyplane_ops.transfer.listrows import BATCH, checksums_json, micros
from skyplane_ops.transfer.manifest import matches

HEAD_THREADS = 64  # lookups in flight (as the S3 store's connection pool): each waits on a request
clock = time.time  # what ages count back from (a test may move it)


def age_seconds(name: str, value: Any) -> float | None:
    """A duration (``90s``, ``30m``, ``2h``, ``3d``, ``1w`` or seconds as a number), or None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TransferError(f"{name} must be a duration such as 30m, 2h or 3d, not {value!r}")
    try:
        seconds = parse_duration(value)
    except (SkyplaneOpsError, TypeError) as exc:
        raise TransferError(f"{name}: {exc}") from exc
    if seconds < 0:
        raise TransferError(f"{name} must not be negative, got {value!r}")
    return seconds


def timestamp(name: str, value: Any) -> str | None:
    """An ISO 8601 timestamp (a ``datetime``, or text such as Airflow's
    ``{{ data_interval_start }}``) as UTC ISO text; one without a zone is read as UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip().replace(" ", "T", 1))
        except ValueError:
            raise TransferError(
                f"{name} must be an ISO 8601 timestamp such as 2026-01-31T00:00:00Z, not {value!r}"
            ) from None
    else:
        raise TransferError(f"{name} must be a timestamp (ISO 8601 text), not {value!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat()


def key_list(value: Any) -> tuple[str, ...] | None:
    """``files_from`` as keys: a list, or text (one key per line, blank lines and ``#``
    comments skipped, or a JSON/Python list as an XCom renders it); duplicates dropped."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                try:
                    value = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    raise TransferError("files_from: cannot read the list of keys") from None
        else:
            value = [
                line.rstrip("\r")
                for line in value.splitlines()
                if line.strip() and not line.lstrip().startswith("#")
            ]
    if not isinstance(value, Iterable) or isinstance(value, bytes | dict):
        raise TransferError(f"files_from must be a list of keys, not {type(value).__name__}")
    keys: dict[str, None] = {}
    for key in value:
        if not isinstance(key, str) or not key:
            raise TransferError(f"files_from: every key must be a non-empty string, not {key!r}")
        keys[key] = None
    return tuple(keys)


@dataclass(frozen=True)
class Window:
    """The modification times selected, in microseconds since the epoch: ``lo <= t < hi``."""

    lo: int | None = None
    hi: int | None = None

    @property
    def open(self) -> bool:
        return self.lo is None and self.hi is None

    def keeps(self, mtime: int | None) -> bool:
        if self.open:
            return True
        if mtime is None:  # a store that tells no time: it cannot be shown inside the window
            return False
        return (self.lo is None or mtime >= self.lo) and (self.hi is None or mtime < self.hi)


def window(
    max_age: float | None,
    min_age: float | None,
    changed_since: str | None,
    changed_before: str | None,
    now: float | None = None,
) -> Window:
    """The window the four controls leave (ages counted back from ``now``: the listing's
    start); the narrowest of them where several bound the same side.

    The time is the one a versioned listing shows: an object store's Last-Modified, a local
    file's last change (the later of its mtime and ctime: a file copied in with an old mtime
    has landed now, and a pipeline that copies what landed must not miss it)."""
    now = clock() if now is None else now
    us = 1_000_000
    los = [int((now - max_age) * us)] if max_age is not None else []
    his = [int((now - min_age) * us)] if min_age is not None else []
    if changed_since:
        los.append(micros(datetime.fromisoformat(changed_since)) or 0)
    if changed_before:
        his.append(micros(datetime.fromisoformat(changed_before)) or 0)
    return Window(max(los) if los else None, min(his) if his else None)


def check_window(
    max_age: float | None,
    min_age: float | None,
    changed_since: str | None,
    changed_before: str | None,
) -> None:
    """Refuse controls that can select nothing (one line)."""
    if max_age is not None and min_age is not None and min_age >= max_age:
        raise TransferError(f"min_age ({min_age:g}s) must be less than max_age ({max_age:g}s)")
    if changed_since and changed_before and changed_since >= changed_before:
        raise TransferError(
            f"changed_since ({changed_since}) must be before changed_before ({changed_before})"
        )


def row_filter(
    include: Sequence[str], exclude: Sequence[str], win: Window
) -> Any:  # splitlist.Convert
    """The listing's filter: globs on the key, the window on its modification time."""
    globs = bool(include or exclude)

    def kept(batch: list[ListRow]) -> list[ListRow]:
        if win.open:
            return [r for r in batch if matches(r[0], include, exclude)] if globs else batch
        return [
            r for r in batch if win.keeps(r[2]) and (not globs or matches(r[0], include, exclude))
        ]

    return kept


def _row(info: ObjectInfo, versions: bool) -> ListRow:
    """An object as ``listrows.listed`` shows it."""
    when = info.modified if versions or info.written is None else info.written
    return (info.key, info.size, micros(when), checksums_json(info), info.version, info.etag)


def head_rows(
    store: ObjectStore,
    keys: Iterable[str],
    *,
    versions: bool,
    missing: list[SkippedEntry] | None = None,
    threads: int = HEAD_THREADS,
) -> Iterator[list[ListRow]]:
    """Each key looked up (a HEAD, or a ``stat``), ``threads`` at once, as listing rows in
    batches; a key that is not there gets no row (and, with ``missing``, an entry there)."""

    def look(key: str) -> ListRow | SkippedEntry:
        try:
            info = store.head(key)
        except ObjectNotFoundError:
            return SkippedEntry(key, "not found", True)
        return _row(info, versions)

    it = iter(keys)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while page := list(islice(it, BATCH)):
            rows: list[ListRow] = []
            for got in pool.map(look, page):
                if isinstance(got, SkippedEntry):
                    if missing is not None:
                        missing.append(got)
                else:
                    rows.append(got)
            yield rows


def check_bucket(store: ObjectStore, uri: str, key: str) -> None:
    """That ``uri`` exists, told by one lookup of ``key`` (no listing)."""
    try:
        store.head(key)
    except ObjectNotFoundError:
        return
    except BucketNotFoundError as exc:
        raise TransferError(f"destination {uri} does not exist: {exc}") from exc
    except StoreError as exc:
        raise TransferError(f"cannot access destination {uri}: {exc}") from exc


def read_files_from(spec: str, options: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The keys of ``--files-from``: ``-`` (standard input), a local file, or an object's URI
    (``s3://bucket/lists/today.txt``, opened with ``options``); one key per line."""
    import sys

    from gateway_agent.stores import open_store

    try:
        if spec == "-":
            text = sys.stdin.read()
        elif "://" in spec and not spec.startswith("file://"):
            folder, _, name = spec.rpartition("/")
            text = open_store(folder + "/", dict(options or {})).read(name).decode()
        else:
            path = spec[len("file://") :] if spec.startswith("file://") else spec
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, StoreError, UnicodeDecodeError, ValueError) as exc:
        raise TransferError(f"cannot read --files-from {spec}: {exc}") from exc
    keys = key_list(text)
    if not keys:
        raise TransferError(f"--files-from {spec} names no key")
    return keys
