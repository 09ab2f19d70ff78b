"""A listing as rows for the catalog: batches of plain tuples, keys SQLite can hold, and the
insert that costs no Python per row (one ``ObjectInfo`` per file was most of a re-sync)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway_agent.stores.base import ListRow, ListsRows, ObjectInfo, ObjectStore

BATCH = 5000  # rows per executemany / per page read
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def enc(key: str) -> str | bytes:
    """A key as SQLite can store it: a local file name that is not UTF-8 (lone surrogates)
    becomes a BLOB of its surrogate-passed bytes; ``dec`` reverses it."""
    if key.isascii():
        return key
    try:
        key.encode()
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogatepass")
    return key


def dec(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "surrogatepass")


def micros(dt: datetime | None) -> int | None:
    """Exact microseconds since the epoch (a float would round at today's dates)."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _US


def checksums_json(info: ObjectInfo) -> str | None:
    return json.dumps(info.checksums, sort_keys=True) if info.checksums else None


def listed(
    store: ObjectStore, prefix: str = "", *, versions: bool = True
) -> Iterator[list[ListRow]]:
    """A store's listing as batches of ``ListRow`` tuples: the store's own ``list_rows`` where
    it has one (a local folder: no ``ObjectInfo`` per file), else made from ``list``.
    ``versions=False``: the caller uses no version (it may be None); the etag is there."""
    if isinstance(store, ListsRows):
        yield from store.list_rows(prefix, versions=versions)
        return
    batch: list[ListRow] = []
    for o in store.list(prefix):
        when = o.modified if versions or o.written is None else o.written
        batch.append((o.key, o.size, micros(when), checksums_json(o), o.version, o.etag))
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def regrouped(batches: Iterable[list[Any]]) -> Iterator[list[Any]]:
    """Batches of at least ``BATCH`` rows (the last one fewer): one transaction each."""
    pending: list[Any] = []
    for batch in batches:
        pending.extend(batch)
        if len(pending) >= BATCH:
            yield pending
            pending = []
    if pending:
        yield pending


def insert_rows(db: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """``executemany`` in one transaction. Keys (first column) go in as they are; only a
    batch holding a key SQLite cannot take as text (a local name that is not UTF-8) is done
    again with ``enc``, so an ordinary batch costs no Python per row."""
    try:
        db.execute("BEGIN")
        try:
            db.executemany(sql, rows)
        except UnicodeEncodeError:
            db.execute("ROLLBACK")
            db.execute("BEGIN")
            db.executemany(sql, [(enc(r[0]), *r[1:]) for r in rows])
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
