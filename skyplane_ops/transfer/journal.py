"""The on-disk journal that makes a re-run resume instead of starting over.

One JSON-lines file per (source, destination, chunking) — the same command maps to the same
file. It records multipart upload ids, finished segments and completed (committed) multipart
objects, each with the source object's fingerprint (and the CRC32C), so a resumed run skips
them — an upload id is consumed by its completion and must never be completed twice — still
verifies whole objects, and drops anything whose source object changed in between. Deleted
after a verified success.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def default_journal_dir() -> Path:
    home = os.environ.get("SKYPLANE_OPS_HOME") or os.path.join(Path.home(), ".skyplane-ops")
    return Path(home) / "journal"


def transfer_key(
    src_uri: str, dst_uri: str, part_size: int, include: Sequence[str], exclude: Sequence[str]
) -> str:
    raw = json.dumps([src_uri, dst_uri, part_size, list(include), list(exclude)])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


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

    def _append(self, records: list[dict[str, Any]]) -> None:
        with self._lock, open(self.path, "a") as fh:
            for rec in records:
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def record_upload(self, key: str, upload_id: str, fp: list[Any]) -> None:
        self.uploads[key] = (upload_id, fp)
        self._append([{"t": "upload", "key": key, "upload_id": upload_id, "fp": fp}])

    def record_done(self, segs: list[tuple[str, int, list[Any]]]) -> None:
        if not segs:
            return
        for seg_id, crc, fp in segs:
            self.done[seg_id] = (crc, fp)
        self._append([{"t": "done", "segs": [list(s) for s in segs]}])

    def record_commit(self, key: str, size: int, crc: int, fp: list[Any]) -> None:
        """The multipart upload of ``key`` was completed: its upload id is spent."""
        self.committed[key] = (size, crc, fp)
        self._append([{"t": "commit", "key": key, "size": size, "crc": crc, "fp": fp}])

    def _forget(self, key: str) -> None:
        self.uploads.pop(key, None)
        for seg_id in [s for s in self.done if s.split(":", 1)[1] == key]:
            del self.done[seg_id]

    def drop_upload(self, key: str) -> None:
        """The upload of ``key`` was aborted: forget it and the parts sent to it, so a re-run
        starts that object afresh instead of completing a dead upload."""
        self._forget(key)
        self._append([{"t": "drop", "key": key}])

    def commit_for(self, key: str, fp: list[Any]) -> tuple[int, int] | None:
        """(size, crc) if ``key`` was committed from the same source version."""
        hit = self.committed.get(key)
        return (hit[0], hit[1]) if hit is not None and hit[2] == fp else None

    def finished(self, seg_id: str, fp: list[Any]) -> int | None:
        """The recorded CRC if the segment finished against the same source version."""
        hit = self.done.get(seg_id)
        return hit[0] if hit is not None and hit[1] == fp else None

    def upload_for(self, key: str, fp: list[Any]) -> str | None:
        hit = self.uploads.get(key)
        return hit[0] if hit is not None and hit[1] == fp else None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
