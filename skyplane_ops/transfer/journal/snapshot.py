"""The resume journal's snapshot in the state store: appended in pieces, never read whole.

A journal over a million objects runs to a few hundred MB, and the driver snapshots it every
few seconds. Reading it into memory and uploading it whole each time made the driver's memory
and its traffic grow with the run. The journal is append-only, so the snapshot is too: each
save uploads only what was appended since the last one, as pieces of at most ``PIECE`` bytes
under ``journal/<name>/<offset>`` (the offset in the local file, 16 digits, so the keys sort in
file order). A piece ends at a line end: a snapshot restored at any moment holds whole lines
only. Restoring streams the pieces back one at a time.

A snapshot belongs to one journal: the first save of a process (or after a restore) checks
that the stored pieces are a prefix of the local file, comparing them piece by piece, and when
they are not (another host's journal, or one deleted after a success and started again) the
stored pieces are replaced by the local file. A journal stored whole under
``journal/<name>`` (by an earlier version) is read as one piece at offset 0.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOURNAL = "journal/"
PIECE = 8 * 1024 * 1024  # bytes per piece at most: what a save or restore holds in memory
_DIGITS = 16


def _piece_key(name: str, offset: int) -> str:
    return f"{JOURNAL}{name}/{offset:0{_DIGITS}d}"


@dataclass
class _Stored:
    """One journal's pieces in the store: (offset, key, size), in offset order."""

    pieces: list[tuple[int, str, int]] = field(default_factory=list)

    def contiguous_end(self) -> int:
        """Where the pieces stop being one run of bytes from offset 0."""
        end = 0
        for offset, _key, size in self.pieces:
            if offset != end:
                break
            end += size
        return end

    def prefix(self) -> Iterator[tuple[int, str, int]]:
        end = 0
        for offset, key, size in self.pieces:
            if offset != end:
                return
            yield offset, key, size
            end += size


def stored_journals(store: Any) -> dict[str, _Stored]:
    """Every journal's stored pieces, by journal file name."""
    found: dict[str, _Stored] = {}
    for info in store.list(JOURNAL):
        rest = info.key[len(JOURNAL) :]
        name, _, offset = rest.partition("/")
        if not name.endswith(".jsonl"):
            continue
        if not offset:  # an earlier version's whole snapshot
            found.setdefault(name, _Stored()).pieces.append((0, info.key, info.size))
        elif offset.isdigit() and "/" not in offset:
            found.setdefault(name, _Stored()).pieces.append((int(offset), info.key, info.size))
    for stored in found.values():
        stored.pieces.sort()
    return found


def _read_at(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(size)


class JournalSnapshot:
    """Saves and restores the journals of one folder to and from a state store.

    Remembers per journal how far the store holds it (``_sent``), so a save uploads only the
    tail. Thread-safe: a heartbeat thread and a progress callback may both save."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._sent: dict[str, int] = {}
        self._lock = threading.Lock()

    # ---- save --------------------------------------------------------------------------

    def save(self, directory: str | Path) -> int:
        """Upload what each ``*.jsonl`` of ``directory`` gained since the last save; returns
        how many journals were saved (a journal already fully stored counts)."""
        with self._lock:
            paths = sorted(Path(directory).glob("*.jsonl"))
            stored: dict[str, _Stored] | None = None
            count = 0
            for path in paths:
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue  # deleted after a verified success while we were saving
                if path.name not in self._sent:
                    if stored is None:
                        stored = stored_journals(self._store)
                    self._sent[path.name] = self._adopt(path, size, stored.get(path.name))
                try:
                    self._append(path, size)
                except FileNotFoundError:
                    continue
                count += 1
            return count

    def _adopt(self, path: Path, size: int, stored: _Stored | None) -> int:
        """How much of ``path`` the store already holds: its pieces when they are a prefix of
        the file, else 0 after removing them (another journal's, or an earlier version's
        whole snapshot, which would collide with the pieces' names)."""
        if stored is None:
            return 0
        whole = f"{JOURNAL}{path.name}"
        end = stored.contiguous_end()
        keep = (
            0 < end <= size
            and all(key != whole for _, key, _ in stored.pieces)
            and all(
                self._store.read(key) == _read_at(path, offset, length)
                for offset, key, length in stored.prefix()
            )
        )
        for offset, key, _ in stored.pieces:
            if not keep or offset >= end:  # past a gap: never read back
                self._store.delete(key)
        return end if keep else 0

    def _append(self, path: Path, size: int) -> None:
        sent = self._sent[path.name]
        if size < sent:  # replaced by a shorter journal: start the snapshot again
            for _, key, _ in stored_journals(self._store).get(path.name, _Stored()).pieces:
                self._store.delete(key)
            sent = self._sent[path.name] = 0
        with open(path, "rb") as fh:
            fh.seek(sent)
            while sent < size:
                data = fh.read(min(PIECE, size - sent))
                if not data:
                    break
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    if len(data) < PIECE:
                        break  # a line still being written: the next save takes it whole
                    cut = len(data)  # a line longer than a piece: split it (never seen)
                data = data[:cut]
                fh.seek(sent + cut)
                self._store.write(_piece_key(path.name, sent), data)
                sent = self._sent[path.name] = sent + cut

    # ---- restore -----------------------------------------------------------------------

    def restore(self, directory: str | Path) -> int:
        """Download each stored journal into ``directory`` where it is longer than the local
        file (a local journal never loses what it has); returns files written."""
        with self._lock:
            folder = Path(directory)
            count = 0
            for name, stored in stored_journals(self._store).items():
                end = stored.contiguous_end()
                local = folder / name
                if end == 0 or (local.exists() and local.stat().st_size >= end):
                    continue
                folder.mkdir(parents=True, exist_ok=True)
                tmp = local.with_name(f".{name}.{os.getpid()}.tmp")
                try:
                    with open(tmp, "wb") as out:
                        for _offset, key, _size in stored.prefix():
                            out.write(self._store.read(key))
                        out.flush()
                        os.fsync(out.fileno())
                    os.replace(tmp, local)
                finally:
                    tmp.unlink(missing_ok=True)
                self._sent[name] = end  # the local file is now exactly the stored pieces
                count += 1
            return count
