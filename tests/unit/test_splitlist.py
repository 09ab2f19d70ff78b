"""A local folder listed in two processes (``splitlist``): the shares of a walk are disjoint
and together are the whole listing, skipped entries included; the catalog and the end-of-run
verification get exactly what one walk gives; a child that fails or dies is an error (its
half-written rows are never taken for a listing); a parent that fails stops its child.

Real forks, real folders, real SQLite files: nothing is mocked but the failures, which are
injected into the store the child inherits."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import StoreError
from gateway_agent.stores.local import LocalStore
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import splitlist
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.verify import verify_catalog


def _tree(root: Path, folders: int = 6, files: int = 7) -> dict[str, bytes]:
    data: dict[str, bytes] = {}
    for f in range(folders):
        for i in range(files):
            data[f"d{f}/sub/o{i}"] = f"{f}-{i}".encode() * (i + 1)
        data[f"top{f}.txt"] = b"t" * f
    data[os.fsdecode(b"odd-\xff")] = b"not utf-8"
    for key, body in data.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    os.mkfifo(root / "d1" / "fifo")  # skipped, in one share
    (root / "d4" / "ln").symlink_to(root / "d0")  # skipped (links=skip), maybe the other
    os.mkfifo(root / "zfifo")
    for n in range(4):  # skipped entries whose names are not UTF-8, in both shares
        os.mkfifo(os.fsencode(root) + b"/fifo-\xff-" + str(n).encode())
    return data


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts forks, and lets this test process fork as a single-threaded CLI would."""
    seen: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:  # the parent: note the child
            seen.append(1)
            children.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    children.clear()
    return seen


children: list[int] = []  # pids of the forks the ``forks`` fixture saw, in the parent


def _store(root: Path) -> LocalStore:
    store = open_store(f"file://{root}/")
    assert isinstance(store, LocalStore)
    return store


def test_shares_are_disjoint_and_make_the_listing(tmp_path: Path) -> None:
    _tree(tmp_path)
    whole = _store(tmp_path)
    rows = [r for batch in whole.list_rows() for r in batch]
    shares = [_store(tmp_path) for _ in range(2)]
    parts = [[r for batch in s.list_share(i, 2) for r in batch] for i, s in enumerate(shares)]
    assert all(parts) and not {r[0] for r in parts[0]} & {r[0] for r in parts[1]}
    assert sorted(parts[0] + parts[1]) == sorted(rows)
    assert sorted(shares[0].skipped + shares[1].skipped, key=repr) == sorted(
        whole.skipped, key=repr
    )
    with pytest.raises(ValueError, match="share 2 of 2"):
        next(iter(whole.list_share(2, 2)))


def test_a_name_keeps_its_share_whatever_else_the_folder_holds(tmp_path: Path) -> None:
    """Shares come from each name's hash, not its place in the folder: files created while
    two processes walk move no other file from one share to the other (none is missed)."""
    _tree(tmp_path)

    def share_of() -> dict[str, int]:
        return {
            r[0].split("/")[0]: i
            for i in range(2)
            for batch in _store(tmp_path).list_share(i, 2)
            for r in batch
        }

    before = share_of()
    for n in range(40):
        (tmp_path / f"c{n:02d}-new").write_bytes(b"new")
    after = share_of()
    assert {k: after[k] for k in before} == before


def test_catalog_lists_a_folder_in_two_processes(tmp_path: Path, forks: list[int]) -> None:
    data = _tree(tmp_path / "src")
    split, single = Catalog(tmp_path / "j1"), Catalog(tmp_path / "j2")
    counts: list[int] = []
    split.add_source(_store(tmp_path / "src"), "file://src/", [], [], counts.append)
    assert forks == [1] and counts[-1] == len(data)
    single.add_source(_store(tmp_path / "src"), "file://src/", [], [], split=False)
    assert forks == [1]
    columns = "key, size, mtime, ck, version, etag, state"
    assert list(split.pages(columns, "src")) == list(single.pages(columns, "src"))
    assert sorted(split.problems, key=repr) == sorted(single.problems, key=repr)
    odd = {os.fsdecode(b"fifo-\xff-" + str(n).encode()) for n in range(4)}
    assert {p.key for p in split.problems} == {"d1/fifo", "d4/ln", "zfifo", *odd}
    assert not list((tmp_path / "j1" / "catalog").glob("*-src.sqlite"))  # scratch removed
    # Filters apply in both processes.
    filtered = Catalog(tmp_path / "j3")
    filtered.add_source(_store(tmp_path / "src"), "file://src/", ["d2/**", "top*"], [])
    want = sorted(k for k in data if k.startswith(("d2/", "top")))
    assert [k for (k,) in filtered.pages("key", "src")] == want
    for c in (split, single, filtered):
        c.close()


def _failing_share(monkeypatch: pytest.MonkeyPatch, which: int, fail: Any) -> None:
    real = LocalStore.list_share

    def share(self: LocalStore, i: int, n: int, prefix: str = "", **kw: Any) -> Iterator[Any]:
        if i == which:
            fail()
        yield from real(self, i, n, prefix, **kw)

    monkeypatch.setattr(LocalStore, "list_share", share)


@pytest.mark.parametrize("how", ["error", "killed"])
def test_a_child_that_fails_fails_the_listing(
    tmp_path: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    _tree(tmp_path / "src")

    def fail() -> None:
        if how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)  # the child dies mid-listing
        raise StoreError("disk on fire")

    _failing_share(monkeypatch, 1, fail)
    catalog = Catalog(tmp_path / "j")
    want = "disk on fire" if how == "error" else r"second share stopped \(wait status"
    with pytest.raises(TransferError, match=want) as err:
        catalog.add_source(_store(tmp_path / "src"), "file://src/", [], [])
    if how == "error":
        assert str(err.value).startswith("cannot list source file://src/")
    assert forks == [1]
    assert not list((tmp_path / "j" / "catalog").glob("*-src.sqlite"))
    catalog.close()


def test_a_parent_that_fails_stops_its_child(
    tmp_path: Path, forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path / "src")

    def fail() -> None:
        raise StoreError("gone")

    _failing_share(monkeypatch, 0, fail)
    catalog = Catalog(tmp_path / "j")
    with pytest.raises(TransferError, match="cannot list source file://src/: gone"):
        catalog.add_source(_store(tmp_path / "src"), "file://src/", [], [])
    assert forks == [1] and len(children) == 1
    with pytest.raises(ChildProcessError):  # stopped and reaped: not a child any more
        os.waitpid(children[0], os.WNOHANG)
    assert not list((tmp_path / "j" / "catalog").glob("*-src.sqlite"))
    catalog.close()


def test_verification_lists_the_destination_in_two_processes(
    tmp_path: Path, forks: list[int]
) -> None:
    data = _tree(tmp_path / "dst")
    catalog = Catalog(tmp_path / "j")
    catalog.write(
        "INSERT INTO exp VALUES(?,?,?)", [(k, len(v), crc32c(v)) for k, v in data.items()]
    )
    store = _store(tmp_path / "dst")
    assert splitlist.splits(store)
    result = verify_catalog(store, catalog, "read-back")
    assert result.status == "passed" and result.objects == len(data), result.failures
    assert forks == [1]
    gone = [k for k in data if k.startswith(("d0/", "d1/", "d2/", "d3/"))][::7]
    for key in gone:  # some in each share
        (tmp_path / "dst" / key).unlink()
    (tmp_path / "dst" / "top5.txt").write_bytes(b"other size")
    result = verify_catalog(_store(tmp_path / "dst"), catalog, "read-back")
    assert forks == [1, 1]
    assert sorted(result.failures) == sorted(
        [f"{k}: missing at the destination" for k in gone] + ["top5.txt: size 10 != 5"]
    )
    catalog.close()
