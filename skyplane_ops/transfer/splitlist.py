"""A listing streamed into a catalog table, in two processes where the store lists in shares.

A local folder's walk is Python work per file (a ``stat`` and a row), on one core: 100k files
take ~0.65 s to walk and insert, while the gateways wait for the listing or the end of the
run waits for the verification. A store that lists in shares (``ListsInShares``) is walked
in two halves at once: share 1 in a forked child (``forked``) into a scratch SQLite file,
share 0 here into the table; then the child's rows are copied in with one statement and the
entries it left out are added to the store's ``skipped``, so callers see one whole listing.

Only a single-threaded process forks; elsewhere (and for every other store) the listing is
streamed here, as before.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gateway_agent.stores.base import ListRow, ListsInShares, ObjectStore, SkippedEntry
from skyplane_ops.transfer import forked
from skyplane_ops.transfer.listrows import dec, enc, insert_rows, listed, regrouped
from skyplane_ops.transfer.prefixlist import insert_by_prefix, lists_by_prefix

# A listing batch made into the table's rows (and filtered).
Convert = Callable[[list[ListRow]], Sequence[Sequence[Any]]]
SHARES = 2


def splits(store: ObjectStore) -> bool:
    """Whether ``store``'s listing is walked in two processes here."""
    return (
        isinstance(store, ListsInShares)
        and bool(getattr(store.capabilities, "local_calls", False))
        and forked.forkable()
    )


def insert_listing(
    db: sqlite3.Connection,
    lock: threading.RLock,
    scratch: Path,
    store: ObjectStore,
    table: str,
    columns: str,
    convert: Convert,
    *,
    versions: bool,
    verb: str = "INSERT OR REPLACE",
    on_count: Callable[[int], None] | None = None,
    split: bool = True,
    explain: Callable[[BaseException], str] = lambda exc: f"{type(exc).__name__}: {exc}",
) -> int:
    """``verb`` (``INSERT OR REPLACE``/``OR IGNORE``) ``store``'s listing into ``table``'s
    ``columns`` (comma-separated, ``key`` first), each batch ``convert``-ed; the number of
    rows inserted. ``scratch``: the child's file (removed after). Store errors here propagate;
    the child's come back as a ``TransferError`` worded by ``explain``."""
    sql = _insert_sql(verb, table, columns)
    if lists_by_prefix(store):  # a bucket: its top-level prefixes at once (waits, not CPU)
        got = insert_by_prefix(db, lock, store, sql, convert, versions=versions, on_count=on_count)
        if got is not None:
            return got
    if not (split and splits(store)):
        whole = regrouped(listed(store, versions=versions))
        return _insert(db, lock, whole, sql, convert, on_count)
    shared: Any = store

    def child(side: sqlite3.Connection) -> None:
        side.execute(f"CREATE TABLE t({_keyed(columns)}) WITHOUT ROWID")
        side.execute("CREATE TABLE skipped(key, reason, error)")
        rows = regrouped(shared.list_share(1, SHARES, versions=versions))
        _insert(side, threading.RLock(), rows, _insert_sql(verb, "t", columns), convert, None)
        side.executemany(
            "INSERT INTO skipped VALUES(?,?,?)",
            [(enc(s.key), s.reason, int(s.error)) for s in getattr(shared, "skipped", [])],
        )

    finish = forked.start(scratch, child, explain, "listing the second share")
    try:
        try:
            mine = shared.list_share(0, SHARES, versions=versions)
            count = _insert(db, lock, regrouped(mine), sql, convert, on_count)
        except BaseException:
            finish(True)
            raise
        finish(False)
        count += _attach(db, lock, scratch, f"{verb} INTO {table}({columns})", columns, store)
    finally:
        scratch.unlink(missing_ok=True)
    if on_count is not None:
        on_count(count)
    return count


def _insert(
    db: sqlite3.Connection,
    lock: threading.RLock,
    batches: Iterator[list[ListRow]],
    sql: str,
    convert: Convert,
    on_count: Callable[[int], None] | None,
) -> int:
    count = 0
    for batch in batches:
        rows = convert(batch)
        with lock:
            insert_rows(db, sql, rows)
        count += len(rows)
        if on_count is not None:
            on_count(count)
    return count


def _attach(
    db: sqlite3.Connection,
    lock: threading.RLock,
    scratch: Path,
    into: str,
    columns: str,
    store: ObjectStore,
) -> int:
    """Copy the child's rows in (``into``: ``INSERT ... INTO table(columns)``; key order, one
    statement) and its left-out entries into ``store.skipped``; the number of rows."""
    with lock:
        db.execute("ATTACH DATABASE ? AS side", (str(scratch),))
        try:
            db.execute("BEGIN")
            db.execute(f"{into} SELECT {columns} FROM side.t ORDER BY key")
            db.execute("COMMIT")
            count = int(db.execute("SELECT count(*) FROM side.t").fetchone()[0])
            skipped = db.execute("SELECT key, reason, error FROM side.skipped").fetchall()
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.execute("DETACH DATABASE side")
    mine: list[SkippedEntry] | None = getattr(store, "skipped", None)
    if mine is not None:
        known = set(mine)  # the child's list began as a copy of this one
        mine.extend(
            e for k, r, x in skipped if (e := SkippedEntry(dec(k), r, bool(x))) not in known
        )
        mine.sort(key=lambda s: s.key)  # listing order, as one walk gives it
    return count


def _keyed(columns: str) -> str:
    """``key, size, ...`` as column definitions with ``key`` the primary key."""
    names = [c.strip() for c in columns.split(",")]
    return ", ".join(f"{n} PRIMARY KEY" if n == "key" else n for n in names)


def _insert_sql(verb: str, table: str, columns: str) -> str:
    marks = ",".join("?" * len(columns.split(",")))
    return f"{verb} INTO {table}({columns}) VALUES({marks})"
