"""Writing a batch of small files at once: each appears whole or not at all (as with
:func:`.atomic.create_file`), at a fraction of the calls per file.

A sink gateway writes the objects of a batched chunk together. Each file costs four system
calls (open an unnamed file in its folder, write, link it under its name, close): no stat and
no per-object bookkeeping. Made durable (the store option ``fsync``), the order is what keeps
the guarantee "written => on disk, never torn" without a flush per call: every file of a group
is filled first, then each one's data is flushed (``fdatasync``, while the others' writeback is
already under way), then all are named, then every folder that got a name is flushed once. A
crash at any point leaves each file either absent or whole under its name: a name is only made
after its bytes are on disk, and the batch is reported written only after its folders are.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from gateway_agent.stores.errors import StoreError
from gateway_agent.stores.local.atomic import _name, _open, sync_folder, write_all
from gateway_agent.stores.local.meta import apply_meta

# Per item: its metadata and its key (for the extension and errors), or None (bytes only).
Metas = Sequence[tuple[Mapping[str, Any], str] | None] | None

# Files open at once in a durable batch (one descriptor each until it is named).
GROUP = 64


def create_many(
    items: Sequence[tuple[str, bytes | memoryview]], *, fsync: bool = False, metas: Metas = None
) -> list[Exception | None]:
    """Create every ``(path, data)`` (with ``metas[i]`` written onto it first, when given);
    per item, None or the error that kept it from landing (the others land regardless)."""
    results: list[Exception | None] = [None] * len(items)
    if not fsync:
        for i, (dest, data) in enumerate(items):
            results[i] = _one(dest, data, metas[i] if metas else None)
        return results
    for start in range(0, len(items), GROUP):
        _durable_group(items, start, min(len(items), start + GROUP), results, metas)
    return results


def _one(
    dest: str, data: bytes | memoryview, meta: tuple[Mapping[str, Any], str] | None
) -> Exception | None:
    try:
        fd, tmp = _open(os.path.dirname(dest), True)
    except OSError as exc:
        return exc
    try:
        write_all(fd, data)
        if meta is not None:
            apply_meta(fd, meta[0], meta[1], f"write {meta[1]!r}")
        _name(fd, tmp, dest, True)
        tmp = None
        return None
    except (OSError, StoreError) as exc:  # StoreError: metadata the file system cannot hold
        return exc
    finally:
        os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _durable_group(
    items: Sequence[tuple[str, bytes | memoryview]],
    start: int,
    end: int,
    results: list[Exception | None],
    metas: Metas = None,
) -> None:
    """Fill, flush, name, then flush the folders of ``items[start:end]``."""
    opened: dict[int, tuple[int, str | None]] = {}  # index -> (fd, temporary name or None)
    try:
        for i in range(start, end):
            dest, data = items[i]
            try:
                opened[i] = _open(os.path.dirname(dest), True)
                write_all(opened[i][0], data)
                meta = metas[i] if metas else None
                if meta is not None:
                    apply_meta(opened[i][0], meta[0], meta[1], f"write {meta[1]!r}")
            except (OSError, StoreError) as exc:
                results[i] = exc
        for i, (fd, _tmp) in opened.items():
            if results[i] is None:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    results[i] = exc
        folders: dict[str, list[int]] = {}
        for i, (fd, tmp) in list(opened.items()):
            if results[i] is not None:
                continue
            dest = items[i][0]
            try:
                _name(fd, tmp, dest, True)
                opened[i] = (fd, None)  # named: nothing to clean up
                folders.setdefault(os.path.dirname(dest), []).append(i)
            except OSError as exc:
                results[i] = exc
        for folder, members in folders.items():
            try:
                sync_folder(folder)
            except OSError as exc:  # the names may not survive a crash: not written
                for i in members:
                    results[i] = exc
    finally:
        for fd, tmp in opened.values():
            os.close(fd)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
