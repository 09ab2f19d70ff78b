"""Fill a scratch SQLite file in a forked child while this process does other work.

Listing a local folder is Python work per entry (a ``stat`` and a row each), so two listings
in two threads of one process take the sum of their times under the GIL; in two processes
they take the longer of the two. The child (forked, so it starts at once and needs nothing
pickled) writes its rows into its own SQLite file; the parent copies them into the catalog in
one statement and removes the file. The child opens its own database and leaves by
``os._exit``: nothing of the parent's state (its catalog connection, its cleanups) is used
twice.

``os.fork`` itself, not ``multiprocessing``: a daemonic worker (Celery prefork, Airflow's
executors) may not start ``multiprocessing`` children, and nothing needs pickling. Only a
single-threaded process forks (``forkable``): a child forked while another thread holds a
lock (logging, an SDK's connection pool) could wait on it forever.

The child says it finished by writing nothing to its pipe and exiting 0; anything else (a
message, a signal, another exit status) is a failure, so rows a child did not finish listing
are never taken for a whole listing.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from skyplane_ops.errors import TransferError

Fill = Callable[[sqlite3.Connection], None]
Explain = Callable[[BaseException], str]
# The returned call: wait (False) and raise TransferError if the fill failed, or stop (True).
Finish = Callable[[bool], None]


def forkable() -> bool:
    """Whether this process may fork a lister: it runs no other thread."""
    return threading.active_count() == 1


def _fill(path: Path, fill: Fill, explain: Explain) -> str:
    """Run ``fill`` on a fresh scratch database at ``path``: '' on success, else why not."""
    try:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        fill(db)
        db.close()
        return ""
    except BaseException as exc:
        return explain(exc) or f"{type(exc).__name__}: {exc}"


def start(path: Path, fill: Fill, explain: Explain, what: str) -> Finish:
    """Start ``fill(db)`` on a new SQLite file at ``path`` in a forked child, or in a thread
    when this process is not ``forkable``. ``explain`` words an exception of ``fill`` as the
    error the caller reports; ``what`` names the work in a message about a child that died.

    The returned call waits for it (``TransferError`` when it failed) or, given True, stops
    it. Either way the caller owns ``path`` afterwards (it reads and removes it)."""
    if not forkable():
        return _start_thread(path, fill, explain, what)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: fill, report, leave without running the parent's cleanups
        code = 1
        try:
            os.close(r)
            os.write(w, _fill(path, fill, explain)[:4000].encode())
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
                failure = f"{what} stopped (wait status {status})"
            if failure:
                raise TransferError(failure)
        finally:
            os.close(r)

    return finish


def _start_thread(path: Path, fill: Fill, explain: Explain, what: str) -> Finish:
    """``start`` for a process that already runs threads: the same work in a thread."""
    failure: list[str] = []
    thread = threading.Thread(
        target=lambda: failure.append(_fill(path, fill, explain)), name=what, daemon=True
    )
    thread.start()

    def finish(abort: bool = False) -> None:
        thread.join()  # an abort waits too: the work holds the file it writes
        if abort:
            return
        message = failure[0] if failure else f"{what} stopped"
        if message:
            raise TransferError(message)

    return finish
