"""List the destination of a sync in a child process, next to the source listing.

A re-sync of an unchanged tree is nothing but its two listings: the destination is listed in a
forked child (``forked``) into its own SQLite file while the parent lists the source into the
catalog, on the other core; the parent then copies the rows in (sorted, one statement) and
removes the file. The child opens its own store: nothing of the parent's state is used twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from gateway_agent.stores import open_store
from gateway_agent.stores.errors import BucketNotFoundError
from skyplane_ops.transfer import forked
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.listrows import insert_rows, listed, regrouped


def _list_into(uri: str, options: dict[str, Any], db: sqlite3.Connection) -> None:
    """The child's work: the destination's rows into ``db``'s table ``dst``."""
    store = open_store(uri, options)
    # Keyed like the catalog's table: the parent copies it in key order without a sort.
    db.execute(
        "CREATE TABLE dst(key PRIMARY KEY, size INTEGER, mtime INTEGER, ck TEXT, etag TEXT) "
        "WITHOUT ROWID"
    )
    sql = "INSERT OR REPLACE INTO dst VALUES(?,?,?,?,?)"
    for batch in regrouped(listed(store, versions=False)):
        insert_rows(db, sql, [(*r[:4], r[5]) for r in batch])


def _explain(uri: str, exc: BaseException) -> str:
    if isinstance(exc, BucketNotFoundError):
        return f"destination {uri} does not exist: {exc}"
    return f"cannot access destination {uri}: {type(exc).__name__}: {exc}"


def start(catalog: Catalog, uri: str, options: Mapping[str, Any] | None) -> Callable[[bool], None]:
    """Start listing ``uri`` in a child (a thread in a process that runs threads); the
    returned call waits for it and loads the rows into ``catalog.dst`` (``TransferError``
    naming the destination when it failed), or, given True, stops it (the source listing
    failed: its error is the one to report)."""
    path = catalog.path.with_name(catalog.path.stem + "-dst.sqlite")
    opts = dict(options or {})
    work = forked.start(
        path,
        lambda db: _list_into(uri, opts, db),
        lambda exc: _explain(uri, exc),
        f"listing destination {uri}",
    )

    def finish(abort: bool = False) -> None:
        try:
            work(abort)
            if not abort:
                catalog.attach_destination(path)
        finally:
            path.unlink(missing_ok=True)

    return finish
