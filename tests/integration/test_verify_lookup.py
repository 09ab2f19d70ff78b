"""The end check of a sync that wrote a few objects into a large destination looks those up.

A daily sync adds a few files to a destination of many: listing the whole destination again to
check the few (6 s at a million files, minutes on an object store) is the cost rclone does not
pay. ``verify.looks_up`` picks a lookup per written object when the sync's destination listing
is ``LOOKUP_SHARE`` times larger. Real gateway processes on loopback copy between folders; the
lookups must still catch an object gone or cut short before the check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores.local import LocalStore
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    copy_dirs,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import finish
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.verify import LOOKUP_SHARE

MANY = {f"d{i % 7}/f{i:04d}.bin": 100 + i for i in range(2 * LOOKUP_SHARE + 10)}


def _record_checks(monkeypatch: pytest.MonkeyPatch, dst: Path) -> dict[str, list[str]]:
    """What the control plane's end check does: listings into ``got``, lookups of ``dst``."""
    seen: dict[str, list[str]] = {"listed": [], "looked_up": []}
    real_insert, real_head = Catalog.insert_listing, LocalStore.head

    def insert_listing(self: Catalog, store: Any, table: str, *args: Any, **kw: Any) -> int:
        seen["listed"].append(table)
        return real_insert(self, store, table, *args, **kw)

    def head(self: LocalStore, key: str) -> Any:
        if Path(self._root) == dst:
            seen["looked_up"].append(key)
        return real_head(self, key)

    monkeypatch.setattr(Catalog, "insert_listing", insert_listing)
    monkeypatch.setattr(LocalStore, "head", head)
    return seen


def test_a_small_sync_looks_up_what_it_wrote_and_catches_a_missing_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, journal = tmp_path / "src", tmp_path / "dst", tmp_path / "journal"
    dst.mkdir()
    data = write_dataset(src, MANY)
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, fleet):
        seen = _record_checks(monkeypatch, dst)
        first = copy_dirs(plan, fleet, (src, dst, journal), sync=True)
        assert first.objects == len(MANY) and "got" in seen["listed"]  # an empty destination
        assert seen["looked_up"] == []

        # Two objects change: one rewritten (another size), one new.
        data |= write_dataset(src, {"d1/f0001.bin": 5000, "new/x.bin": 77}, seed=2)
        seen["listed"].clear()
        second = copy_dirs(plan, fleet, (src, dst, journal), sync=True)
        assert second.objects == 2
        assert "got" not in seen["listed"], seen
        assert sorted(seen["looked_up"]) == ["d1/f0001.bin", "new/x.bin"]
        assert second.verification["status"] == "passed"
        assert second.verification["method"] == "write-checked crc32c"
        assert read_tree(dst) == data

        # The lookups see an object that vanished after its write, as a listing would.
        write_dataset(src, {"d2/f0002.bin": 9000}, seed=3)
        real_verify = finish.verify_catalog

        def remove_then_verify(*args: Any, **kwargs: Any) -> Any:
            (dst / "d2" / "f0002.bin").unlink()
            return real_verify(*args, **kwargs)

        monkeypatch.setattr(finish, "verify_catalog", remove_then_verify)
        with pytest.raises(TransferError, match=r"d2/f0002\.bin: missing at the destination"):
            copy_dirs(plan, fleet, (src, dst, journal), sync=True)
