"""The on-disk journal that makes a re-run resume instead of starting over.

One JSON-lines file per (source, destination, chunking) — the same command maps to the same
file. It records multipart upload ids, finished segments and completed (committed) multipart
objects, each with the source object's fingerprint (and the CRC32C), so a resumed run skips
them — an upload id is consumed by its completion and must never be completed twice — still
verifies whole objects, and drops anything whose source object changed in between. Deleted
after a verified success.

The engine never loads it into memory: it appends to it (one ``done`` line per batch of
finished chunks) and indexes it into the run's catalog at start
(``Catalog.load_journal``), so a resume over a million objects stays flat. The dict views
below (``finished``, ``commit_for``, ``upload_for``) load it on first use, for small callers.

Durability: ``upload``, ``commit`` and ``drop`` lines are fsynced before the call returns (each
protects the action that follows it: an upload id must never be lost or completed twice).
``done`` lines are written at once (a crash of the process loses none) but fsynced at most every
``DONE_FSYNC_S`` or by the next fsynced line: a ``done`` line lost to a power cut only makes a
re-run send that segment again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyplane_ops.errors import TransferError

DONE_FSYNC_S = 0.5  # the longest a written ``done`` line waits for its fsync
_jstr = json.encoder.encode_basestring_ascii  # json.dumps of a str, without an encoder per call


def default_journal_dir() -> Path:
    home = os.environ.get("SKYPLANE_OPS_HOME") or os.path.join(Path.home(), ".skyplane-ops")
    return Path(home) / "journal"


def transfer_key(
    src_uri: str, dst_uri: str, part_size: int, include: Sequence[str], exclude: Sequence[str]
) -> str:
    raw = json.dumps([src_uri, dst_uri, part_size, list(include), list(exclude)])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def _torn(fd: int) -> bool:
    """Whether the file ends inside a line (a crash or a full disk cut the last write short).
    The first append of a run ends it first: else its first line would be glued to the torn
    one, and both dropped as unreadable on the next load (an upload id lost with it)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


class JournalLockedError(TransferError):
    """Another run holds the journal of the same transfer."""


class JournalLock:
    """An exclusive ``flock`` on ``<key>.lock`` next to the journal, held for a whole run.

    Two runs of the same command would append to one journal and complete the same uploads
    twice; the second one stops (naming the pid that holds the lock) or, with ``wait``, waits.
    The kernel drops the lock when its holder dies, so a crashed run never blocks the next.
    A run that ends removes the lock file while it still holds the lock; a waiter that then
    gets the lock on the removed file sees that the path no longer names it and starts over.
    """

    # Locks this process holds (path -> [fd, holders]): a face may take the lock before it
    # provisions anything and the engine takes it again inside; flock would not nest.
    _held: dict[Path, list[int]] = {}
    _held_lock = threading.Lock()

    def __init__(self, directory: Path, key: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = (directory / f"{key}.lock").resolve()
        self._mine = False

    def __enter__(self) -> JournalLock:
        if not self._mine:  # ``transfer_lock`` hands it over acquired: once is one release
            self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, wait: bool = False) -> None:
        with self._held_lock:
            held = self._held.get(self.path)
            if held is not None:
                held[1] += 1
                self._mine = True
                return
        fd = self._lock(wait)
        with self._held_lock:
            self._held[self.path] = [fd, 1]
        self._mine = True

    def release(self) -> None:
        if not self._mine:
            return
        self._mine = False
        with self._held_lock:
            held = self._held[self.path]
            held[1] -= 1
            if held[1] == 0:
                del self._held[self.path]
                with contextlib.suppress(OSError):
                    os.unlink(self.path)  # still locked: no other run holds this file
                os.close(held[0])  # closing the descriptor drops the flock

    def _lock(self, wait: bool) -> int:
        while True:
            fd = self._lock_once(wait)
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # the holder removed this file as it ended: lock the new one

    def _lock_once(self, wait: bool) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                    raise JournalLockedError(
                        f"another run (pid {holder}) is using the journal of this transfer "
                        f"({self.path}); wait for it to finish or pass --wait-lock "
                        "(wait_lock=True)"
                    ) from None
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return fd


def _fp(fp: Fingerprint) -> str:
    """A fingerprint as the canonical JSON the journal stores (the catalog's form is it)."""
    return fp if isinstance(fp, str) else json.dumps(fp, separators=(",", ":"))


Fingerprint = list[Any] | str  # a list, or its canonical JSON text


class Journal:
    """Append-only record of upload ids and finished segments for one transfer key."""

    def __init__(self, directory: Path, key: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{key}.jsonl"
        self.uploads: dict[str, tuple[str, list[Any]]] = {}  # key -> (upload_id, fingerprint)
        self.done: dict[str, tuple[int, list[Any]]] = {}  # seg_id -> (crc, fingerprint)
        # key -> (size, crc, fingerprint) of multipart objects whose upload was completed
        self.committed: dict[str, tuple[int, int, list[Any]]] = {}
        self._lock = threading.Lock()
        self._loaded = False
        self._synced = time.monotonic()  # when the file was last fsynced
        self._unsynced = False  # ``done`` lines written since then
        self._tail_checked = False  # whether the file's last line was checked for a tear

    def _ensure(self) -> None:
        if not self._loaded:
            self._loaded = True
            if self.path.exists():
                self._load()

    def _load(self) -> None:
        with open(self.path) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line after a crash
                if rec.get("t") == "upload":
                    self.uploads[rec["key"]] = (rec["upload_id"], rec["fp"])
                elif rec.get("t") == "done":
                    for seg_id, crc, fp in rec["segs"]:
                        self.done[seg_id] = (int(crc), fp)
                elif rec.get("t") == "commit":
                    self.committed[rec["key"]] = (int(rec["size"]), int(rec["crc"]), rec["fp"])
                elif rec.get("t") == "drop":
                    self._forget(rec["key"])

    def _append(self, lines: list[str], sync: bool = True) -> None:
        """Append ``lines``; fsync now if ``sync`` (or a ``done`` line waited long enough)."""
        data = "".join(line + "\n" for line in lines).encode()
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                if not self._tail_checked:
                    self._tail_checked = True
                    if _torn(fd):
                        data = b"\n" + data
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                now = time.monotonic()
                if sync or now - self._synced >= DONE_FSYNC_S:
                    os.fsync(fd)
                    self._synced, self._unsynced = now, False
                else:
                    self._unsynced = True
            finally:
                os.close(fd)

    def sync(self) -> None:
        """Fsync ``done`` lines still waiting (at the end of a run; a lost one is only re-sent)."""
        if self._unsynced:
            self._append([], sync=True)

    @staticmethod
    def _dumps(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

    def record_upload(self, key: str, upload_id: str, fp: Fingerprint) -> None:
        if self._loaded:
            self.uploads[key] = (upload_id, json.loads(_fp(fp)))
        self._append(
            [f'{{"t":"upload","key":{self._dumps(key)},"upload_id":'
             f'{self._dumps(upload_id)},"fp":{_fp(fp)}}}']
        )  # fmt: skip

    def record_done(self, segs: Sequence[tuple[str, int, Fingerprint]]) -> None:
        """Segments finished: one line for a whole batch of chunks, fsynced within
        ``DONE_FSYNC_S`` (not before returning: a lost line only re-sends its segments)."""
        if not segs:
            return
        if self._loaded:
            for seg_id, crc, fp in segs:
                self.done[seg_id] = (crc, json.loads(_fp(fp)))
        body = ",".join(
            f"[{_jstr(seg_id)},{int(crc)},{fp if isinstance(fp, str) else _fp(fp)}]"
            for seg_id, crc, fp in segs
        )
        self._append([f'{{"t":"done","segs":[{body}]}}'], sync=False)

    def record_commit(self, key: str, size: int, crc: int, fp: Fingerprint) -> None:
        """The multipart upload of ``key`` was completed: its upload id is spent."""
        if self._loaded:
            self.committed[key] = (size, crc, json.loads(_fp(fp)))
        self._append(
            [f'{{"t":"commit","key":{self._dumps(key)},"size":{int(size)},"crc":{int(crc)},'
             f'"fp":{_fp(fp)}}}']
        )  # fmt: skip

    def _forget(self, key: str) -> None:
        self.uploads.pop(key, None)
        self.committed.pop(key, None)
        for seg_id in [s for s in self.done if s.split(":", 1)[1] == key]:
            del self.done[seg_id]

    def forget(self, key: str) -> None:
        """Everything recorded for ``key`` is void (it failed verification): a re-run copies it
        afresh."""
        self.drop_upload(key)

    def drop_upload(self, key: str) -> None:
        """The upload of ``key`` was aborted: forget it and the parts sent to it, so a re-run
        starts that object afresh instead of completing a dead upload."""
        if self._loaded:
            self._forget(key)
        self._append([f'{{"t":"drop","key":{self._dumps(key)}}}'])

    def commit_for(self, key: str, fp: list[Any]) -> tuple[int, int] | None:
        """(size, crc) if ``key`` was committed from the same source version."""
        self._ensure()
        hit = self.committed.get(key)
        return (hit[0], hit[1]) if hit is not None and hit[2] == fp else None

    def finished(self, seg_id: str, fp: list[Any]) -> int | None:
        """The recorded CRC if the segment finished against the same source version."""
        self._ensure()
        hit = self.done.get(seg_id)
        return hit[0] if hit is not None and hit[1] == fp else None

    def upload_for(self, key: str, fp: list[Any]) -> str | None:
        self._ensure()
        hit = self.uploads.get(key)
        return hit[0] if hit is not None and hit[1] == fp else None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
