"""The run's catalog: every per-object fact of one run in a scratch SQLite file, not in Python.

A run over a million objects cannot hold a million ``ObjectInfo``s, segment lists, CRCs and
fingerprints in the control plane (that cost ~3.5 KiB per object). The catalog keeps them on
disk, in tables made for it, and the engine streams over them in key order:

- ``src``: the source listing (streamed in from ``store.list()``, filtered), with each object's
  fingerprint (what must not change before commit) and state (see the ``TODO``... constants);
- ``dst``: the destination listing when syncing, with ``extra`` set on mirror-delete candidates;
- ``seg``: CRC32C per finished segment (``part`` 0: a whole object), from the gateways or the
  journal, and ``v`` = 1 when this run's write of it was vouched for; ``exp``: the whole-object
  (size, CRC32C) verification expects;
- ``way``: the plan paths (a bit per path index) this run's segments of each object finished
  on, when the last one did (epoch microseconds) and the destination version the write's
  (or the upload completion's) answer named: the transfer report's path, time and version;
- ``vouch``: multipart objects all of whose parts' writes this run vouched for (whole objects:
  ``seg.v`` of part 0), so ``--verify full`` reads nothing back for them;
- ``outcome``: objects that failed or changed, with why (few, unless something is badly wrong);
- ``now``: the source listed again after the move (changed-check and mirror delete);
- ``got``: the destination listed for verification (size, native CRC32C if it reports one;
  mtime, checksums and ETag as its listing shows them, for the sync record: ``syncstate``);
- ``j_upload``/``j_done``/``j_commit``: the resume journal, indexed (see ``load_journal``).

The file lives under the journal folder (a disk the user chose for state, not ``/tmp``, which
may be RAM), is written without a rollback journal or fsync (it is scratch: the durable record
is the JSONL journal) and is removed when the run ends; one left by a crashed process is
removed by the next run that opens a catalog in the same folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gateway_agent.stores.base import (
    ListRow,
    ObjectInfo,
    ObjectStore,
    ReportsSkips,
    SkippedEntry,
)
from gateway_agent.stores.errors import StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import splitlist
from skyplane_ops.transfer.listrows import (
    BATCH,
    checksums_json,
    dec,
    enc,
    insert_rows,
    listed,
    micros,
    regrouped,
)
from skyplane_ops.transfer.manifest import check_found, matches
from skyplane_ops.transfer.selection import Window, head_rows, row_filter

__all__ = ["BATCH", "WAY_SQL", "Catalog", "checksums_json", "dec", "enc", "fp_text", "micros"]

# Object states in ``src``.
TODO, SKIPPED, REFUSED, COMMITTED, CHANGED, FAILED = range(6)
_SCHEMA = """
CREATE TABLE src(key PRIMARY KEY, size INTEGER NOT NULL, mtime INTEGER, ck TEXT, version TEXT,
                 etag TEXT, state INTEGER NOT NULL DEFAULT 0,
                 fp TEXT GENERATED ALWAYS AS (json_array(size, etag, mtime, version)) VIRTUAL)
                 WITHOUT ROWID;
CREATE TABLE dst(key PRIMARY KEY, size INTEGER NOT NULL, mtime INTEGER, ck TEXT, etag TEXT,
                 extra INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE seg(key, part INTEGER, crc INTEGER NOT NULL, v INTEGER NOT NULL DEFAULT 0,
                 PRIMARY KEY(key, part)) WITHOUT ROWID;
CREATE TABLE exp(key PRIMARY KEY, size INTEGER NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE outcome(key PRIMARY KEY, kind TEXT NOT NULL, why TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE now(key PRIMARY KEY, size INTEGER, mtime INTEGER, version TEXT, etag TEXT,
                 fp TEXT GENERATED ALWAYS AS (json_array(size, etag, mtime, version)) VIRTUAL)
                 WITHOUT ROWID;
CREATE TABLE got(key PRIMARY KEY, size INTEGER NOT NULL, crc INTEGER, mtime INTEGER, ck TEXT,
                 etag TEXT) WITHOUT ROWID;
CREATE TABLE vouch(key PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE way(key PRIMARY KEY, paths INTEGER NOT NULL, at INTEGER NOT NULL, ver TEXT)
                 WITHOUT ROWID;
CREATE TABLE j_upload(key PRIMARY KEY, upload_id TEXT, fp TEXT) WITHOUT ROWID;
CREATE TABLE j_done(key, part INTEGER, crc INTEGER, fp TEXT, PRIMARY KEY(key, part)) WITHOUT ROWID;
CREATE TABLE j_commit(key PRIMARY KEY, size INTEGER, crc INTEGER, fp TEXT) WITHOUT ROWID;
"""


# Which paths an object's segments finished on (bits OR-ed), when the last one did and the
# destination version a write's answer named (a part names none: the completion sets it).
WAY_SQL = (
    "INSERT INTO way(key,paths,at,ver) VALUES(?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
    "paths = paths | excluded.paths, at = max(at, excluded.at), "
    "ver = coalesce(excluded.ver, ver)"
)

# An object's fingerprint (what must not change between listing and commit: size, etag,
# modification time in microseconds, the store's version) is the column ``fp``: JSON SQLite
# makes from the row when it is read (a virtual column: nothing stored, no Python per row),
# the form the journal stores too. (The journal of releases before the catalog kept the time
# as ISO text: such a journal resumes nothing, which costs a re-copy, never a wrong object.)


def fp_text(info: ObjectInfo) -> str:
    """The fingerprint JSON SQLite makes (``src.fp``), made in Python (for tests, tools)."""
    fp = [info.size, info.etag, micros(info.modified), info.version]
    return json.dumps(fp, separators=(",", ":"), ensure_ascii=False)


def _same_ck(a: str, b: str) -> int | None:
    """Sync's checksum rule: 1/0 when both sides report a common algorithm, else NULL."""
    x, y = json.loads(a), json.loads(b)
    common = x.keys() & y.keys()
    return int(all(x[k] == y[k] for k in common)) if common else None


def _remove_stale(folder: Path) -> None:
    """Catalogs of processes that died (``run-<pid>-*.sqlite``) are scratch: remove them."""
    for path in folder.glob("run-*.sqlite"):
        try:
            pid = int(path.name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, IndexError, PermissionError, OSError):
            continue


def _drop(path: Path, db: sqlite3.Connection) -> None:
    db.close()
    path.unlink(missing_ok=True)


class Catalog:
    """One run's catalog file; thread-safe for the parallel listings (one lock, big batches)."""

    def __init__(self, directory: Path) -> None:
        folder = directory / "catalog"
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale(folder)
        self.path = folder / f"run-{os.getpid()}-{uuid.uuid4().hex[:8]}.sqlite"
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            "locking_mode=EXCLUSIVE",
            "temp_store=FILE",
            "cache_size=-16384",  # 16 MiB of page cache: the rest stays on disk
        ):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.executescript(_SCHEMA)
        self.db.create_function("same_ck", 2, _same_ck, deterministic=True)
        self.lock = threading.RLock()
        self.has_destination = False
        # Source objects (and their bytes) known to be the same at the destination and left
        # out of both tables: a quick walk's (``uptodate.quick_listing``); counted as skipped.
        self.outside: tuple[int, int] = (0, 0)
        self.problems: list[SkippedEntry] = []
        # The sync record attached as ``ss`` (``syncstate.attach``), or None (not a sync).
        self.state: Path | None = None
        # Filled by key lookups (``add_keys``: a ``files_from`` run), not listings: the checks
        # after the copy look the same keys up again instead of listing either side.
        self.by_key = False
        self._finalizer = weakref.finalize(self, _drop, self.path, self.db)

    def close(self) -> None:
        """Close and delete the file (idempotent)."""
        self._finalizer()

    # ---- writes ----------------------------------------------------------------------------

    def write(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``executemany`` in batches, each its own transaction (no fsync: scratch)."""
        batch: list[Sequence[Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= BATCH:
                self._many(sql, batch)
                batch = []
        if batch:
            self._many(sql, batch)

    def _many(self, sql: str, batch: Sequence[Sequence[Any]]) -> None:
        with self.lock:
            insert_rows(self.db, sql, batch)

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self.lock:
            return self.db.execute(sql, params).rowcount

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self.lock:
            row = self.db.execute(sql, params).fetchone()
        return row[0] if row is not None and len(row) == 1 else row

    def pages(
        self, columns: str, table: str, where: str = "1", params: Sequence[Any] = ()
    ) -> Iterator[tuple[Any, ...]]:
        """Rows of ``table`` (first column must be ``key``) in key order, a page at a time:
        no statement stays open between pages, so the caller may write in between."""
        last: Any = None
        while True:
            cond = "1" if last is None else "key > ?"
            args = () if last is None else (last,)
            with self.lock:
                rows = self.db.execute(
                    f"SELECT {columns} FROM {table} WHERE {cond} AND ({where}) "
                    f"ORDER BY key LIMIT {BATCH}",
                    (*args, *params),
                ).fetchall()
            yield from rows
            if len(rows) < BATCH:
                return
            last = rows[-1][0]

    # ---- listings --------------------------------------------------------------------------

    def add_source(
        self,
        store: ObjectStore,
        src_uri: str,
        include: Sequence[str],
        exclude: Sequence[str],
        on_count: Callable[[int], None] | None = None,
        split: bool = True,
        window: Window | None = None,
    ) -> None:
        """Stream the filtered source listing into ``src``; refuse one that found nothing
        (unless a time ``window`` selects: nothing new is a normal answer).
        ``split``: a local folder is walked in two processes (``splitlist``) when it can be."""
        win = window or Window()
        kept = row_filter(include, exclude, win)
        try:
            splitlist.insert_listing(
                self.db, self.lock, self._scratch("src"), store,
                "src", "key,size,mtime,ck,version,etag", kept,
                versions=True, on_count=on_count, split=split,
                explain=lambda exc: f"cannot list source {src_uri}: {exc}",
            )  # fmt: skip
        except StoreError as exc:
            raise TransferError(f"cannot list source {src_uri}: {exc}") from exc
        if isinstance(store, ReportsSkips):
            self.problems.extend(
                p for p in store.skipped if matches(p.key, include, exclude) or p.error
            )
        if win.open:
            self._check_source(src_uri, include, exclude)

    def add_keys(
        self,
        store: ObjectStore,
        keys: Sequence[str],
        table: str,
        convert: splitlist.Convert,
        on_count: Callable[[int], None] | None = None,
    ) -> None:
        """Look each of ``keys`` up (``selection.head_rows``) into ``src`` or ``dst``, instead
        of a listing: a source key that is not there is a failed object (``problems``)."""
        self.by_key = True
        source = table == "src"
        columns = "key,size,mtime,ck,version,etag" if source else "key,size,mtime,ck,etag"
        marks = ",".join("?" * len(columns.split(",")))
        sql = f"INSERT OR REPLACE INTO {table}({columns}) VALUES({marks})"
        missing: list[SkippedEntry] = []
        count = 0
        for batch in head_rows(store, keys, versions=source, missing=missing):
            rows = convert(batch) if source else [(*r[:4], r[5]) for r in batch]
            self._many(sql, rows)
            count += len(rows)
            if on_count is not None:
                on_count(count)
        if source:
            self.problems.extend(missing)
        else:
            self.has_destination = True

    def _scratch(self, name: str) -> Path:
        """A scratch file next to the catalog for a listing another process writes."""
        return self.path.with_name(f"{self.path.stem}-{name}.sqlite")

    def insert_listing(
        self,
        store: ObjectStore,
        table: str,
        columns: str,
        convert: splitlist.Convert,
        *,
        versions: bool,
        verb: str = "INSERT OR REPLACE",
    ) -> int:
        """``splitlist.insert_listing`` into this catalog's ``table``; the number of rows."""
        return splitlist.insert_listing(
            self.db, self.lock, self._scratch("side"), store, table, columns, convert,
            versions=versions, verb=verb,
        )  # fmt: skip

    def _check_source(self, src_uri: str, include: Sequence[str], exclude: Sequence[str]) -> None:
        found = self.one("SELECT 1 FROM src LIMIT 1") is not None
        check_found(int(found), self.problems, src_uri, include, exclude)

    def add_destination(
        self, store: ObjectStore, on_count: Callable[[int], None] | None = None
    ) -> None:
        """Stream the destination listing into ``dst`` (store errors propagate)."""
        count = 0
        sql = "INSERT OR REPLACE INTO dst(key,size,mtime,ck,etag) VALUES(?,?,?,?,?)"
        for batch in regrouped(listed(store, versions=False)):
            self._many(sql, [(*r[:4], r[5]) for r in batch])
            count += len(batch)
            if on_count is not None:
                on_count(count)
        self.has_destination = True
        if on_count is not None:
            on_count(count)

    def attach_destination(self, path: Path) -> None:
        """Load a destination listing another process wrote (``sidelist``) into ``dst``."""
        with self.lock:
            self.db.execute("ATTACH DATABASE ? AS side", (str(path),))
            try:
                self.db.execute("BEGIN")
                self.db.execute(
                    "INSERT OR REPLACE INTO dst(key,size,mtime,ck,etag) "
                    "SELECT key, size, mtime, ck, etag FROM side.dst ORDER BY key"
                )
                self.db.execute("COMMIT")
            finally:
                self.db.execute("DETACH DATABASE side")
        self.has_destination = True

    def add_now(self, store: ObjectStore) -> None:
        """The source listed again (key, fingerprint) into ``now`` (looked up by key after a
        ``files_from`` run); store errors propagate."""
        self.run("DELETE FROM now")
        sql = "INSERT OR REPLACE INTO now(key,size,mtime,version,etag) VALUES(?,?,?,?,?)"
        if self.by_key:
            keys = [dec(k) for (k,) in self.pages("key", "src")]
            batches: Iterable[list[ListRow]] = head_rows(store, keys, versions=True)
        else:
            batches = regrouped(listed(store))
        for batch in batches:
            self._many(sql, [(r[0], r[1], r[2], r[4], r[5]) for r in batch])

    # ---- counts ----------------------------------------------------------------------------

    def source_totals(self, state: int | None = None) -> tuple[int, int]:
        """(objects, bytes) of the source, or of the objects in ``state``."""
        where = "1" if state is None else f"state = {int(state)}"
        n, b = self.one(f"SELECT count(*), coalesce(sum(size), 0) FROM src WHERE {where}")
        return int(n), int(b)

    def outcomes(self, kind: str) -> dict[str, str]:
        """{key: why} of the objects with outcome ``kind`` (``failed`` or ``changed``)."""
        return {dec(k): why for k, why in self.pages("key, why", "outcome", "kind = ?", (kind,))}

    def set_outcome(self, kind: str, items: Iterable[tuple[str, str]], state: int) -> None:
        """Record failed/changed objects and move them out of ``TODO``/``COMMITTED``."""
        rows = [(enc(k), kind, why) for k, why in items]
        self.write("INSERT OR REPLACE INTO outcome(key,kind,why) VALUES(?,?,?)", rows)
        self.write("UPDATE src SET state = ? WHERE key = ?", [(state, r[0]) for r in rows])

    # ---- the journal, indexed --------------------------------------------------------------

    def load_journal(self, path: Path) -> None:
        """Index the JSONL journal (streamed, later lines win, ``drop`` forgets a key)."""
        if not path.exists():
            return

        def flush(kind: str, rows: list[tuple[Any, ...]]) -> None:
            if not rows:
                return
            if kind == "upload":
                self._many("INSERT OR REPLACE INTO j_upload VALUES(?,?,?)", rows)
            elif kind == "done":
                self._many("INSERT OR REPLACE INTO j_done VALUES(?,?,?,?)", rows)
            elif kind == "commit":
                self._many("INSERT OR REPLACE INTO j_commit VALUES(?,?,?,?)", rows)
            else:
                with self.lock:
                    self.db.execute("BEGIN")
                    for table in ("j_upload", "j_done", "j_commit"):
                        self.db.executemany(f"DELETE FROM {table} WHERE key = ?", rows)
                    self.db.execute("COMMIT")
            rows.clear()

        kind, rows = "", list[tuple[Any, ...]]()
        with open(path) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    t = rec["t"]
                    new = _journal_rows(rec)
                except (ValueError, KeyError, TypeError, IndexError):
                    continue  # a torn last line after a crash
                if t != kind or len(rows) >= BATCH:
                    flush(kind, rows)
                    kind = t
                rows.extend(new)
        flush(kind, rows)


def _journal_rows(rec: dict[str, Any]) -> list[tuple[Any, ...]]:
    def fp(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    t = rec["t"]
    if t == "upload":
        return [(enc(rec["key"]), rec["upload_id"], fp(rec["fp"]))]
    if t == "done":
        out = []
        for seg_id, crc, f in rec["segs"]:
            part, key = seg_id.split(":", 1)
            out.append((enc(key), int(part), int(crc), fp(f)))
        return out
    if t == "commit":
        return [(enc(rec["key"]), int(rec["size"]), int(rec["crc"]), fp(rec["fp"]))]
    if t == "drop":
        return [(enc(rec["key"]),)]
    raise KeyError(t)
