"""A big bucket listed in parallel by prefix, streaming into the catalog.

An object store lists 1,000 keys per request, one page after the other: a million objects
behind 20 ms of latency is a thousand round trips in a row. A store that tells one level of
its listing (``ListsLevels``: S3's delimiter listing) is listed here as its top-level objects
plus each top-level prefix, ``THREADS`` prefixes at once, each streamed into the table as it
comes (rows inserted under the catalog's lock, in any order: the table is keyed).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway_agent.stores.base import ListRow, ListsLevels, ObjectStore
from skyplane_ops.transfer.listrows import insert_rows, listed, regrouped

THREADS = 16  # prefixes listed at once: each waits on its pages' round trips
MIN_PREFIXES = 2  # fewer: one listing is as fast, and costs no discovery request

Convert = Callable[[list[ListRow]], Sequence[Sequence[Any]]]


def lists_by_prefix(store: ObjectStore) -> bool:
    """Whether ``store`` is listed here (its listing waits on a network, not on this CPU)."""
    local = bool(getattr(store.capabilities, "local_calls", False))
    return isinstance(store, ListsLevels) and not local


def insert_by_prefix(
    db: sqlite3.Connection,
    lock: threading.RLock,
    store: ObjectStore,
    sql: str,
    convert: Convert,
    *,
    versions: bool,
    on_count: Callable[[int], None] | None = None,
) -> int | None:
    """The listing inserted with ``sql`` (each batch ``convert``-ed), top-level prefixes in
    parallel; the number of rows, or None (nothing inserted) when the top level has fewer
    than ``MIN_PREFIXES`` prefixes: the caller lists it as one."""
    assert isinstance(store, ListsLevels)
    top, prefixes = store.list_level("")
    if len(prefixes) < MIN_PREFIXES:
        return None
    count = 0
    counted = threading.Lock()

    def put(batch: list[ListRow]) -> None:
        nonlocal count
        rows = convert(batch)
        with lock:
            insert_rows(db, sql, rows)
        with counted:
            count += len(rows)
            if on_count is not None:
                on_count(count)

    if top:
        put(top)

    def one(prefix: str) -> None:
        for batch in regrouped(listed(store, prefix, versions=versions)):
            put(batch)

    with ThreadPoolExecutor(max_workers=min(THREADS, len(prefixes))) as pool:
        list(pool.map(one, prefixes))  # the first error propagates
    return count
