"""List the destination of a sync in a child process, next to the source listing.

Listing is Python work per object (a local folder's walk builds an ``ObjectInfo`` per file),
so two listings in two threads of one process take the sum of their times under the GIL. A
re-sync of an unchanged tree is nothing but those two listings: the child (forked, so it
starts at once and needs nothing pickled) lists the destination into its own SQLite file
while the parent lists the source into the catalog, on the other core; the parent then copies
the rows in (sorted, one statement) and removes the file. The child opens its own store and
its own database and leaves by ``os._exit``: nothing of the parent's state is used twice.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gateway_agent.stores.errors import BucketNotFoundError
from gateway_agent.synthetic import open_any_store
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.listrows import insert_rows, listed, regrouped


def _list_into(path: Path, uri: str, options: dict[str, Any]) -> str:
    """The child's work: '' on success, else the message the parent raises."""
    try:
        store = open_any_store(uri, options)
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        # Keyed like the catalog's table: the parent copies it in key order without a sort.
        db.execute(
            "CREATE TABLE dst(key PRIMARY KEY, size INTEGER, mtime INTEGER, ck TEXT) WITHOUT ROWID"
        )
        for batch in regrouped(listed(store, versions=False)):
            insert_rows(db, "INSERT OR REPLACE INTO dst VALUES(?,?,?,?)", [r[:4] for r in batch])
        db.close()
        return ""
    except BucketNotFoundError as exc:
        return f"destination {uri} does not exist: {exc}"
    except BaseException as exc:
        return f"cannot access destination {uri}: {type(exc).__name__}: {exc}"


def start(catalog: Catalog, uri: str, options: Mapping[str, Any] | None) -> Callable[[bool], None]:
    """Start listing ``uri`` in a child; the returned call waits for it and loads the rows
    into ``catalog.dst`` (``TransferError`` naming the destination when it failed), or, given
    True, stops it (the source listing failed: its error is the one to report).

    ``os.fork`` itself, not ``multiprocessing``: a daemonic worker (Celery prefork, Airflow's
    executors) may not start ``multiprocessing`` children, and nothing needs pickling. Only a
    single-threaded process forks: a child forked while another thread holds a lock (logging,
    an SDK's connection pool) could wait on it forever; a threaded host lists the destination
    in a thread instead (slower under the GIL, never stuck).
    """
    path = catalog.path.with_name(catalog.path.stem + "-dst.sqlite")
    if threading.active_count() > 1:
        return _start_thread(catalog, path, uri, options)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: list, report, leave without running the parent's cleanups
        code = 1
        try:
            os.close(r)
            os.write(w, _list_into(path, uri, dict(options or {}))[:4000].encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)

    def finish(abort: bool = False) -> None:
        try:
            if abort:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            chunks = []
            while data := os.read(r, 65536):
                chunks.append(data)
            _, status = os.waitpid(pid, 0)
            failure = b"".join(chunks).decode(errors="replace")
            if not failure and status != 0:
                failure = f"listing destination {uri} stopped (wait status {status})"
            if failure:
                raise TransferError(failure)
            catalog.attach_destination(path)
        finally:
            os.close(r)
            path.unlink(missing_ok=True)

    return finish


def _start_thread(
    catalog: Catalog, path: Path, uri: str, options: Mapping[str, Any] | None
) -> Callable[[bool], None]:
    """``start`` for a process that already runs threads: the same listing in a thread."""
    failure: list[str] = []
    thread = threading.Thread(
        target=lambda: failure.append(_list_into(path, uri, dict(options or {}))),
        name="list-destination",
        daemon=True,
    )
    thread.start()

    def finish(abort: bool = False) -> None:
        try:
            thread.join()  # an abort waits too: the listing holds the file it writes
            if abort:
                return
            message = failure[0] if failure else f"listing destination {uri} stopped"
            if message:
                raise TransferError(message)
            catalog.attach_destination(path)
        finally:
            path.unlink(missing_ok=True)

    return finish
