"""What a local destination's checked writes vouch for, and when the source is listed again.

Real gateway processes on loopback copy between folders. ``--verify full`` trusts a write the
sink checked (``checked_writes``): nothing is read back, only the listing's sizes are compared;
``read-back`` reads every object back. The engine lists the source again after the copy only
when some object was listed without a version (its reads were not pinned).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.local import LocalStore
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    copy_dirs,
    listings_without_versions,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import SourceChangedError, finish
from skyplane_ops.transfer.catalog import SKIPPED, TODO, Catalog, enc
from skyplane_ops.transfer.commit import vouch_multipart
from skyplane_ops.transfer.verify import read_back_crc, relist_needed, verify_catalog

MiB = 1024 * 1024
FILES = {"big.bin": 3 * MiB + 17, "a.txt": 5000, "b/c.txt": 300}


def _tamper_before_verify(monkeypatch: pytest.MonkeyPatch, dst: Path, change: bytes) -> None:
    """Rewrite ``a.txt`` at the destination after the copy wrote it, before verification."""
    real = finish.verify_catalog

    def tampered(*args: Any, **kwargs: Any) -> Any:
        (dst / "a.txt").write_bytes(change)
        return real(*args, **kwargs)

    monkeypatch.setattr(finish, "verify_catalog", tampered)


def test_full_reads_nothing_back_and_read_back_catches_a_same_size_rewrite(
    dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, journal = dirs
    data = write_dataset(src, FILES)
    plan = make_plan([SRC, DST])
    reads: list[str] = []
    real_read = LocalStore.read

    def counted(self: LocalStore, key: str, *args: Any, **kwargs: Any) -> bytes:
        reads.append(key)  # only the control plane's own reads (gateways are other processes)
        return real_read(self, key, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "read", counted)
    with local_fleet(plan) as (_, fleet):
        result = copy_dirs(plan, fleet, (src, dst, journal), part_size=MiB)
        assert read_tree(dst) == data
        # Every object (the multipart one too) was vouched for by the sink's checked write.
        assert result.verification["method"] == "write-checked crc32c", result.verification
        assert reads == []
        # The stronger mode ignores the vouches and catches a rewrite the listing cannot see.
        for path in dst.rglob("*"):
            if path.is_file():
                path.unlink()
        _tamper_before_verify(monkeypatch, dst, b"X" * FILES["a.txt"])
        with pytest.raises(TransferError, match=r"a\.txt: crc32c mismatch on read-back"):
            copy_dirs(plan, fleet, (src, dst, journal), part_size=MiB, verify="read-back")
    assert sorted(set(reads)) == sorted(FILES)


def test_full_still_catches_a_vouched_object_whose_size_changed(
    dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, journal = dirs
    write_dataset(src, FILES)
    plan = make_plan([SRC, DST])
    _tamper_before_verify(monkeypatch, dst, b"short")
    with local_fleet(plan) as (_, fleet), pytest.raises(TransferError) as err:
        copy_dirs(plan, fleet, (src, dst, journal), part_size=MiB)
    assert f"a.txt: size 5 != {FILES['a.txt']}" in str(err.value)


def test_multipart_object_with_a_part_not_vouched_is_read_back(tmp_path: Path) -> None:
    """``vouch_multipart`` vouches only when every part's write was vouched; the others are
    read back, and a read-back catches what a vouch would have hidden."""
    root = tmp_path / "dst"
    store = open_store(f"file://{root}")
    blobs = {"whole": b"w" * 1000, "parted": b"p" * 3000, "mixed": b"m" * 3000}
    for key, blob in blobs.items():
        store.write(key, blob)
    catalog = Catalog(tmp_path / "state")
    try:
        rows = [(enc(k), len(b), read_back_crc(store, k, len(b))) for k, b in blobs.items()]
        catalog.write("INSERT INTO src(key, size) VALUES(?,?)", [r[:2] for r in rows])
        catalog.write("INSERT INTO exp VALUES(?,?,?)", rows)
        parts = [("parted", 1, 1), ("parted", 2, 1), ("mixed", 1, 1), ("mixed", 2, 0)]
        catalog.write("INSERT INTO seg(key, part, crc, v) VALUES(?,?,0,?)", parts)
        catalog.write("INSERT INTO seg(key, part, crc, v) VALUES(?,0,0,1)", [("whole",)])
        vouch_multipart(catalog, 1000, {})
        vouched = {k for (k,) in catalog.pages("key", "vouch")}
        assert vouched == {"parted"}  # multipart only: "whole" is vouched by its seg row
        assert int(catalog.one(f"SELECT count(*) FROM src WHERE state = {TODO}")) == 3
        (root / "mixed").write_bytes(b"M" * 3000)  # same size: only a read-back sees it
        check = verify_catalog(store, catalog, "full")
        assert check.failures == ["mixed: crc32c mismatch on read-back"]
        assert check.method == "write-checked crc32c+read-back crc32c"
    finally:
        catalog.close()


@pytest.mark.parametrize("versions", [True, False], ids=["versioned", "unversioned"])
def test_source_listed_again_only_without_versions(
    dirs: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, versions: bool
) -> None:
    """The file changes after its (only) read: pinned reads cannot see that, so with versions
    the copy holds the listed version and is not relisted; without versions the relist is the
    only check, and it must run and report the change."""
    src, dst, journal = dirs
    write_dataset(src, {"x.txt": 100, "y.txt": 200})
    if not versions:
        listings_without_versions(monkeypatch)
    relisted: list[bool] = []
    real = finish.changed_objects

    def change_then_relist(*args: Any) -> Any:
        relisted.append(True)
        (src / "x.txt").write_bytes(b"changed after it was read")
        return real(*args)

    monkeypatch.setattr(finish, "changed_objects", change_then_relist)
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, fleet):
        if versions:
            result = copy_dirs(plan, fleet, (src, dst, journal))
            assert result.status == "ok" and result.steps["check_source"] < 1
            assert relisted == []
        else:
            with pytest.raises(SourceChangedError, match=r"x\.txt"):
                copy_dirs(plan, fleet, (src, dst, journal))
            assert relisted == [True]


def test_relist_needed_rules(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    try:
        sql = "INSERT INTO src(key, size, version, state) VALUES(?,?,?,?)"
        catalog.write(sql, [("a", 1, "v1", TODO), ("b", 1, None, SKIPPED)])
        assert not relist_needed(catalog, delete=False)
        assert relist_needed(catalog, delete=True)  # the mirror delete uses the fresh listing
        catalog.write(sql, [("c", 1, None, TODO)])
        assert relist_needed(catalog, delete=False)
    finally:
        catalog.close()
