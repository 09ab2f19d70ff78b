"""A local folder's ``list_rows`` (the catalog's fast listing: tuples, no ``ObjectInfo``) lists
exactly what ``list`` lists: the same keys in the same order, sizes, times to the microsecond,
versions and etags, the same skipped entries, under every link policy and prefix; and the
catalog stores the same rows (and fingerprints) whichever of the two it is given."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.base import ObjectInfo
from gateway_agent.stores.local.files import file_info, file_row
from gateway_agent.stores.local.walk import CHUNK
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.listrows import checksums_json, micros

BAD = os.fsdecode(b"bad-\xff-name")  # not UTF-8: a lone surrogate in the key


def _tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "deep.txt").write_bytes(b"deep")
    (root / "a" / "x.txt").write_bytes(b"x" * 10)
    (root / "a.txt").write_bytes(b"top")
    (root / "report%202024.txt").write_bytes(b"%")
    (root / "with\nnewline").write_bytes(b"n")
    (root / BAD).write_bytes(b"bytes")
    (root / ".%tmp-hidden").write_bytes(b"store's own")
    (root / ".%staging").mkdir()
    (root / ".%staging" / "part").write_bytes(b"p")
    (root / ".visible").write_bytes(b"dotfile")
    (root / "empty").write_bytes(b"")
    os.mkfifo(root / "fifo")
    (root / "ln-file").symlink_to(root / "a.txt")
    (root / "ln-dir").symlink_to(root / "a")
    (root / "a" / "b" / "loop").symlink_to(root / "a")
    (root / "dangling").symlink_to(root / "nowhere")
    rng = random.Random(7)
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            ns = rng.randrange(10**18, 2 * 10**18)
            os.utime(path, ns=(ns, ns))


def _as_row(o: ObjectInfo) -> tuple[Any, ...]:
    return (o.key, o.size, micros(o.modified), checksums_json(o), o.version, o.etag)


@pytest.mark.parametrize("links", ["skip", "follow", "store"])
@pytest.mark.parametrize("prefix", ["", "a", "a/", "a/b/", "ln-", "zzz", "a.t"])
def test_rows_list_what_list_lists(tmp_path: Path, links: str, prefix: str) -> None:
    _tree(tmp_path)
    slow = open_store(f"file://{tmp_path}", {"links": links})
    fast = open_store(f"file://{tmp_path}", {"links": links})
    expected = [_as_row(o) for o in slow.list(prefix)]
    got = [row for batch in fast.list_rows(prefix) for row in batch]
    assert got == expected
    assert fast.skipped == slow.skipped
    if prefix == "":
        keys = [r[0] for r in got]
        assert BAD in keys and "empty" in keys and ".visible" in keys
        assert not any(k.startswith((".%tmp", ".%staging")) or k == "fifo" for k in keys)


def test_row_time_is_the_datetime_microsecond(tmp_path: Path) -> None:
    """The row's time equals what ``datetime.fromtimestamp`` makes of the float mtime
    (half-even rounding included), so a fingerprint is one whichever path listed it."""
    path = tmp_path / "f"
    path.write_bytes(b"x")
    rng = random.Random(1)
    values = [rng.randrange(0, 4 * 10**18) for _ in range(3000)]
    values += [s * 10**9 + us * 1000 + 500 for s in (0, 1, 1_700_000_000) for us in range(50)]
    values += [10**18 + 999_999_500, 1_700_000_000_999_999_999]
    for ns in values:
        os.utime(path, ns=(ns, ns))
        st = os.lstat(path)
        info = file_info("f", st)
        assert file_row("f", st) == _as_row(info), ns


def test_a_big_folder_streams_in_bounded_batches(tmp_path: Path) -> None:
    n = CHUNK * 2 + 17
    for i in range(n):
        (tmp_path / f"f{i:06d}").write_bytes(b"")
    (tmp_path / "f000100.d").mkdir()
    (tmp_path / "f000100.d" / "inner").write_bytes(b"i")
    store = open_store(f"file://{tmp_path}", {})
    batches = list(store.list_rows())
    assert max(len(b) for b in batches) <= CHUNK
    keys = [r[0] for b in batches for r in b]
    assert keys == [o.key for o in open_store(f"file://{tmp_path}", {}).list()]
    assert len(keys) == n + 1


class OnlyList:
    """A local store seen through ``list`` only: the catalog's generic path."""

    def __init__(self, store: Any) -> None:
        self.store, self.capabilities = store, store.capabilities
        self.skipped = store.skipped

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.store.list(prefix)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("include", "exclude"), [((), ()), (("a/**",), ()), ((), ("*.txt",)), (("*",), ("bad*",))]
)
def test_catalog_rows_are_the_same_either_way(
    tmp_path: Path, include: tuple[str, ...], exclude: tuple[str, ...]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    uri = f"file://{src}"
    tables = []
    for store in (open_store(uri, {}), OnlyList(open_store(uri, {}))):
        catalog = Catalog(tmp_path / "state")
        try:
            catalog.add_source(store, uri, include, exclude)  # type: ignore[arg-type]
            catalog.add_destination(store)  # type: ignore[arg-type]
            catalog.add_now(store)  # type: ignore[arg-type]
            tables.append(
                [
                    catalog.db.execute(f"SELECT * FROM {t} ORDER BY key").fetchall()
                    for t in ("src", "dst", "now")
                ]
                + [catalog.db.execute("SELECT key, fp FROM src ORDER BY key").fetchall()]
                + [catalog.problems]
            )
        finally:
            catalog.close()
    assert tables[0] == tables[1]
    assert tables[0][0], "the source rows are there"


def test_unversioned_rows_drop_the_version_and_carry_the_write_time(tmp_path: Path) -> None:
    """A sync's destination is compared by when its bytes were written (the mtime), a source
    by its last change (the later of mtime and ctime): ``_tree`` puts some mtimes before the
    ctime (the two times differ) and some after (they are the same). The etag stays: the sync
    record keeps it, and a HEAD of the copy reports the same one."""
    _tree(tmp_path)
    store = open_store(f"file://{tmp_path}", {"links": "store"})
    full = [r for b in store.list_rows() for r in b]
    light = [r for b in store.list_rows(versions=False) for r in b]
    written = {o.key: micros(o.written or o.modified) for o in store.list()}
    assert light == [(r[0], r[1], written[r[0]], r[3], None, r[5]) for r in full]
    changed = {r[0]: r[2] for r in full}
    moved_back = [key for key in changed if written[key] != changed[key]]
    assert moved_back and len(moved_back) < len(full)
    for key in moved_back:
        st = os.lstat(tmp_path / key)
        assert written[key] < changed[key] and st.st_mtime_ns < st.st_ctime_ns


def test_every_name_a_folder_lists_is_one_another_folder_holds(tmp_path: Path) -> None:
    """``Capabilities.file_names``: a copy between two local folders checks no names (the
    engine's ``plan_todo(names_fit=True)``), because every key one lists passes the other's
    ``check_name``: odd names, the longest name, dot names, a stored link."""
    from tests.faults._names import COMMON, NEWLINE, NOT_UTF8

    src = tmp_path / "src"
    names = [*COMMON, NEWLINE, NOT_UTF8, "n" * 255, ".hidden", "a/.b/..c", "%00", "sp ace"]
    for name in names:
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    (src / "link").symlink_to("a")
    (src / ".%staging").mkdir()  # the store's own names are never listed
    (src / ".%tmp-x").write_bytes(b"t")
    lister = open_store(f"file://{src}", {"links": "store"})
    other = open_store(f"file://{tmp_path / 'dst'}")
    assert lister.capabilities.file_names and other.capabilities.file_names
    keys = [o.key for o in lister.list()]
    assert len(keys) == len(set(names)) + 1  # and the link, as NAME.rclonelink
    for key in keys:
        other.check_name(key)  # type: ignore[attr-defined]


@pytest.mark.parametrize("versions", [True, False])
def test_rows_looked_up_are_the_rows_listed(tmp_path: Path, versions: bool) -> None:
    """``rows_of`` (a sync's few changed files, looked up) gives each file the row the
    listing gives it, and None for a name that is no file (missing, a folder, a link, a
    FIFO), as the listing shows none."""
    _tree(tmp_path)
    store: Any = open_store(f"file://{tmp_path}")
    listed = {r[0]: r for b in store.list_rows(versions=versions) for r in b}
    keys = [*sorted(listed), "missing", "a", "a/missing/deeper", "ln-file", "fifo", "a.txt/x"]
    got = dict(zip(keys, store.rows_of(keys, versions=versions), strict=True))
    assert {k: r for k, r in got.items() if r is not None} == listed
    assert BAD in listed
