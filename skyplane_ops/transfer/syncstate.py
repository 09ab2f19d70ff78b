"""What each object looked like on both sides when a sync last knew them equal: the record that
lets sync judge "unchanged" without trusting clocks.

Sync's old rule (same size, and the copy not older than the source) trusts two clocks: a copy
touched into the future hides every later rewrite of its source at the same size, and a source
dated in the future is copied again by every run. So a sync compares, in this order:

1. content identity, where both listings carry a checksum of the same kind (S3 single-part
   ETag as MD5, GCS CRC32C/MD5, Azure Content-MD5): equal checksums decide;
2. else this record, when it holds the object: unchanged only if the source's identity is the
   recorded one (a local file's size, mtime, ctime, device and inode; an object's ETag or
   generation) and the destination still looks as recorded (its checksum or ETag where it has
   one, else its size and mtime): a change on either side since, by anyone, is a copy;
3. else (no record: a first sync over an existing copy) the old rule.

The record is a SQLite file next to the journal, ``<TransferRequest.key>.sync.sqlite``, that
outlives a successful run (the journal does not). One row per object: the folder part of its
key and the name (so the quick walk of two local folders, ``quickcheck``, reads the records of
one folder at a time), the source identity, and the destination's size, mtime, checksums and
ETag as its listing shows them. It is written after a sync that verified, for the objects it
copied (their destination as verification listed it) and the ones it judged equal that had no
or another record; an up-to-date re-sync writes nothing. A record is only ever written for a
pair known equal at that moment, so a stale one can only cost a copy, never skip one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from skyplane_ops.transfer.catalog import COMMITTED, SKIPPED, TODO, Catalog

SUFFIX = ".sync.sqlite"
SCHEMA = """CREATE TABLE IF NOT EXISTS st(dir TEXT NOT NULL, name TEXT NOT NULL, sid TEXT NOT NULL,
    dsize INTEGER NOT NULL, dmtime INTEGER, dck TEXT, detag TEXT,
    PRIMARY KEY(dir, name)) WITHOUT ROWID"""


def state_path(journal_dir: Path, key: str) -> Path:
    """The sync record of the transfer ``key`` (``TransferRequest.key``)."""
    return journal_dir / f"{key}{SUFFIX}"


def dir_of(col: str) -> str:
    """SQL: the folder part of key column ``col``, with its trailing ``/`` ('' at the top):
    ``rtrim`` drops every trailing character that is not a ``/``."""
    return f"rtrim({col}, replace({col}, '/', ''))"


def name_of(col: str) -> str:
    """SQL: the last segment of key column ``col``."""
    return f"substr({col}, length({dir_of(col)}) + 1)"


# The source's identity: its version (a local file's size-mtime-ctime-device-inode, an ETag or
# a generation), else its fingerprint (size, etag, time).
SID = "coalesce(src.version, src.fp)"


def record_of(src_key: str = "src.key") -> str:
    """SQL: the record row ``r`` of the catalog row ``src``."""
    return f"ss.st r WHERE r.dir = {dir_of(src_key)} AND r.name = {name_of(src_key)}"


def same_dst(d: str, r: str = "r") -> str:
    """SQL: destination row ``d`` still looks as record ``r`` says: same size, and the same
    checksums where both have a common one, else the same ETag where both have one, else the
    same mtime (microseconds)."""
    return (
        f"{r}.dsize = {d}.size AND coalesce("
        f"CASE WHEN {r}.dck IS NOT NULL AND {d}.ck IS NOT NULL "
        f"THEN ({r}.dck = {d}.ck OR same_ck({r}.dck, {d}.ck)) END, "
        f"CASE WHEN {r}.detag IS NOT NULL AND {d}.etag IS NOT NULL THEN {r}.detag = {d}.etag END, "
        f"{r}.dmtime IS {d}.mtime)"
    )


def by_record(d: str = "d") -> str:
    """SQL (1, 0 or NULL without a record): the catalog rows ``src`` and ``d`` are unchanged
    since the record of the key."""
    return f"(SELECT r.sid = {SID} AND {same_dst(d)} FROM {record_of()})"


def dst_changed() -> str:
    """SQL: a copy is due because the destination changed since the record (the source did
    not): what ``--dry-run`` says of it."""
    return (
        f"EXISTS (SELECT 1 FROM {record_of()} AND r.sid = {SID}) "
        "AND EXISTS (SELECT 1 FROM dst d WHERE d.key = src.key)"
    )


def attach(catalog: Catalog, path: Path) -> None:
    """Attach the record at ``path`` to the catalog as ``ss`` (made empty when absent; an
    unreadable one is replaced: it only costs copies)."""
    with catalog.lock:
        if catalog.state is not None:
            return
        for attempt in range(2):
            try:
                catalog.db.execute("ATTACH DATABASE ? AS ss", (str(path),))
                try:
                    catalog.db.execute("PRAGMA ss.locking_mode=NORMAL")
                    catalog.db.execute("PRAGMA ss.journal_mode=DELETE")
                    catalog.db.execute("PRAGMA ss.synchronous=NORMAL")
                    catalog.db.execute(SCHEMA.replace(" st(", " ss.st(", 1))
                except sqlite3.DatabaseError:
                    catalog.db.execute("DETACH DATABASE ss")
                    raise
                break
            except sqlite3.DatabaseError:
                if attempt:
                    raise
                path.unlink(missing_ok=True)
        catalog.state = path


def _write(catalog: Catalog, statements: list[str]) -> None:
    with catalog.lock:
        db = catalog.db
        db.execute("BEGIN")
        try:
            for sql in statements:
                db.execute(sql)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _unchanged_record(d: str) -> str:
    """SQL: a record identical to what would be written (nothing to write)."""
    return (
        f"EXISTS (SELECT 1 FROM {record_of('s.key')} AND r.sid = coalesce(s.version, s.fp) "
        f"AND r.dsize = {d}.size AND r.dmtime IS {d}.mtime AND r.dck IS {d}.ck "
        f"AND r.detag IS {d}.etag)"
    )


def _insert(table: str, where: str) -> str:
    return (
        f"INSERT OR REPLACE INTO ss.st SELECT {dir_of('s.key')}, {name_of('s.key')}, "
        f"coalesce(s.version, s.fp), t.size, t.mtime, t.ck, t.etag "
        f"FROM src s JOIN {table} t ON t.key = s.key WHERE {where} "
        f"AND NOT {_unchanged_record('t')}"
    )


def record_equal(catalog: Catalog, states: tuple[int, ...] = (SKIPPED,)) -> None:
    """After a sync that found these source rows (``states``) equal at the destination:
    record each pair whose record is missing or another (``dst`` holds the destination)."""
    if catalog.state is None:
        return
    where = f"s.state IN ({', '.join(str(s) for s in states)})"
    _write(catalog, [_insert("dst", where), *_prune(catalog)])


def record_run(catalog: Catalog) -> None:
    """After a sync that verified: the objects it copied (``TODO``/``COMMITTED``, their
    destination as verification saw it: ``got``) and those it skipped as equal."""
    if catalog.state is None:
        return
    copied = _insert("got", f"s.state IN ({TODO}, {COMMITTED})")
    skipped = _insert("dst", f"s.state = {SKIPPED}")
    _write(catalog, [copied, skipped, *_prune(catalog)])


def _prune(catalog: Catalog) -> list[str]:
    """Records of keys the source no longer holds, when the catalog holds the whole source
    (not after a quick walk) and there are more records than source objects."""
    if catalog.outside != (0, 0):
        return []
    held = int(catalog.one("SELECT count(*) FROM ss.st"))
    if held <= int(catalog.one("SELECT count(*) FROM src")):
        return []
    return ["DELETE FROM ss.st WHERE NOT EXISTS (SELECT 1 FROM src WHERE src.key = dir || name)"]


class FolderRecords:
    """The quick walk's read-only view: the records of one folder at a time, as
    {name: (source identity, destination size, destination mtime, destination etag)} of the
    records a local destination can match (no checksum; its etag, where recorded, is the
    local store's ``mtime_ns-size``). Open it in the process that uses it."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)

    def folder(self, base: str) -> dict[str, tuple[str, int, int | None, str | None]]:
        rows = self.db.execute(
            "SELECT name, sid, dsize, dmtime, detag FROM st WHERE dir = ? AND dck IS NULL",
            (base,),
        )
        return {name: (sid, dsize, dmtime, etag) for name, sid, dsize, dmtime, etag in rows}

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()


def has_records(path: Path) -> bool:
    """Whether a record file exists and holds a row (else the quick walk has nothing to
    trust: every file would be handed to the catalog)."""
    if not os.path.exists(path):
        return False
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return db.execute("SELECT 1 FROM st LIMIT 1").fetchone() is not None
        finally:
            db.close()
    except sqlite3.Error:
        return False
