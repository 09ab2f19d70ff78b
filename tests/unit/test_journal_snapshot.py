"""The journal's snapshot in a state store (a real ``file://`` store): appended in bounded
pieces of whole lines, restored byte for byte, never mixed with another journal; and a
journal whose last line was torn is healed before the next append."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.transfer.journal import Journal, snapshot
from skyplane_ops.transfer.state import TransferState

PIECE = 4096


class Recording:
    """The state store, recording the size of every write and read (what a save holds)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.written: list[int] = []
        self.read_sizes: list[int] = []

    def write(self, key: str, data: bytes) -> Any:
        self.written.append(len(data))
        return self.store.write(key, data)

    def read(self, key: str, *args: Any, **kwargs: Any) -> bytes:
        data: bytes = self.store.read(key, *args, **kwargs)
        self.read_sizes.append(len(data))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "PIECE", PIECE)


def _state(tmp_path: Path, name: str = "t1") -> tuple[TransferState, Recording]:
    state = TransferState((tmp_path / "state").as_uri(), name)
    recording = Recording(state._store)
    state._store = recording
    state._journal = snapshot.JournalSnapshot(recording)
    return state, recording


def _lines(path: Path, first: int, count: int) -> bytes:
    body = b"".join(
        json.dumps({"t": "done", "segs": [[f"k{i}", i, ["fp", i]]]}).encode() + b"\n"
        for i in range(first, first + count)
    )
    with open(path, "ab") as fh:
        fh.write(body)
    return body


def test_saves_only_what_the_journal_gained_in_bounded_pieces_and_restores_it(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    journal = work / "abc.jsonl"
    _lines(journal, 0, 300)  # ~15 KiB: several pieces
    state, store = _state(tmp_path)
    assert state.save_journal(work) == 1
    first = sum(store.written)
    assert first == journal.stat().st_size
    _lines(journal, 300, 50)
    store.written.clear()
    assert state.save_journal(work) == 1
    assert sum(store.written) == journal.stat().st_size - first  # the tail only
    assert state.save_journal(work) == 1 and sum(store.written) == journal.stat().st_size - first
    assert max(store.written) <= PIECE
    # Another host (a fresh process) restores it byte for byte, a piece at a time.
    other = tmp_path / "other"
    restorer, rstore = _state(tmp_path)
    assert restorer.restore_journal(other) == 1
    assert (other / "abc.jsonl").read_bytes() == journal.read_bytes()
    assert max(rstore.read_sizes) <= PIECE
    # ... and its next save appends to the same snapshot without reading it again.
    rstore.read_sizes.clear()
    _lines(other / "abc.jsonl", 350, 10)
    assert restorer.save_journal(other) == 1
    assert rstore.read_sizes == []
    again = tmp_path / "again"
    assert _state(tmp_path)[0].restore_journal(again) == 1
    assert (again / "abc.jsonl").read_bytes() == (other / "abc.jsonl").read_bytes()


def test_a_line_still_being_written_waits_for_the_next_save(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    journal = work / "abc.jsonl"
    whole = _lines(journal, 0, 3)
    with open(journal, "ab") as fh:
        fh.write(b'{"t":"done","segs":[["half')
    state, _ = _state(tmp_path)
    state.save_journal(work)
    restored = tmp_path / "r1"
    _state(tmp_path)[0].restore_journal(restored)
    assert (restored / "abc.jsonl").read_bytes() == whole
    with open(journal, "ab") as fh:
        fh.write(b'",1,[]]]}\n')
    state.save_journal(work)
    restored = tmp_path / "r2"
    _state(tmp_path)[0].restore_journal(restored)
    assert (restored / "abc.jsonl").read_bytes() == journal.read_bytes()


def test_a_longer_local_journal_is_kept_and_another_journals_snapshot_replaced(
    tmp_path: Path,
) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    _lines(theirs / "abc.jsonl", 1000, 20)
    _state(tmp_path)[0].save_journal(theirs)
    _lines(mine / "abc.jsonl", 0, 200)  # longer than the snapshot, and not its continuation
    before = (mine / "abc.jsonl").read_bytes()
    state, _ = _state(tmp_path)
    assert state.restore_journal(mine) == 0
    assert (mine / "abc.jsonl").read_bytes() == before
    state.save_journal(mine)  # the snapshot becomes this journal, not a mixture
    out = tmp_path / "out"
    _state(tmp_path)[0].restore_journal(out)
    assert (out / "abc.jsonl").read_bytes() == before


def test_a_journal_started_again_replaces_the_snapshot(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _lines(work / "abc.jsonl", 0, 100)
    state, _ = _state(tmp_path)
    state.save_journal(work)
    (work / "abc.jsonl").unlink()  # a verified success deletes it; a new run starts one
    new = _lines(work / "abc.jsonl", 500, 2)
    state.save_journal(work)
    out = tmp_path / "out"
    _state(tmp_path)[0].restore_journal(out)
    assert (out / "abc.jsonl").read_bytes() == new


def test_an_earlier_versions_whole_snapshot_is_restored_then_kept_as_pieces(
    tmp_path: Path,
) -> None:
    state, store = _state(tmp_path)
    body = b'{"t":"upload","key":"a","upload_id":"u1","fp":[1]}\n'
    store.store.write("journal/abc.jsonl", body)
    work = tmp_path / "work"
    assert state.restore_journal(work) == 1
    assert (work / "abc.jsonl").read_bytes() == body
    more = _lines(work / "abc.jsonl", 0, 5)
    fresh, _ = _state(tmp_path)
    fresh.save_journal(work)
    keys = [i.key for i in store.store.list("journal/")]
    assert keys and all(k.startswith("journal/abc.jsonl/") for k in keys)
    out = tmp_path / "out"
    _state(tmp_path)[0].restore_journal(out)
    assert (out / "abc.jsonl").read_bytes() == body + more


def test_a_torn_last_line_does_not_swallow_the_next_runs_first_record(tmp_path: Path) -> None:
    first = Journal(tmp_path, "k")
    first.record_upload("a", "u1", ["fp-a"])
    with open(first.path, "ab") as fh:
        fh.write(b'{"t":"upload","key":"b","upl')  # the process died mid-write
    second = Journal(tmp_path, "k")
    second.record_upload("c", "u3", ["fp-c"])  # the resumed run's first record
    third = Journal(tmp_path, "k")
    assert third.upload_for("a", ["fp-a"]) == "u1"
    assert third.upload_for("c", ["fp-c"]) == "u3"
