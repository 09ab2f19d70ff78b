"""``move``: each source object is deleted only after its copy is committed and verified, and
only if it is still the version that was copied (issue 39). Real gateway processes on loopback
copy between folders, and from a real moto S3 server."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
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
from skyplane_ops.transfer import finish, run_transfer
from skyplane_ops.transfer.result import PartialTransferError


@pytest.fixture
def fleet() -> Any:
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, running):
        yield plan, running


def test_a_move_deletes_each_verified_source_and_keeps_what_it_skipped(
    tmp_path: Path, fleet: Any
) -> None:
    plan, running = fleet
    src, dst, journal = tmp_path / "src", tmp_path / "dst", tmp_path / "j"
    data = write_dataset(src, {f"d/{i}": 3000 + i for i in range(30)} | {"big": 5 << 20})
    write_dataset(dst, {"d/4": 7}, seed=5)
    theirs = (dst / "d" / "4").read_bytes()
    result = copy_dirs(
        plan, running, (src, dst, journal), move=True, ignore_existing=True, part_size=1 << 20
    )
    assert result.verified and result.objects == 30 and result.objects_moved == 30
    assert read_tree(src) == {"d/4": data["d/4"]}  # kept at the destination: stays here too
    assert read_tree(dst) == {**{k: v for k, v in data.items() if k != "d/4"}, "d/4": theirs}


def test_max_delete_refuses_the_whole_move_before_anything_is_copied(
    tmp_path: Path, fleet: Any
) -> None:
    plan, running = fleet
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {f"f{i}": 100 for i in range(5)})
    with pytest.raises(TransferError, match=r"mv would delete 5 object\(s\).*--max-delete 4"):
        copy_dirs(plan, running, (src, dst, tmp_path / "j"), move=True, max_delete=4)
    assert read_tree(src) == data and read_tree(dst) == {}
    result = copy_dirs(plan, running, (src, dst, tmp_path / "j"), move=True, max_delete=5)
    assert result.objects_moved == 5 and read_tree(src) == {} and read_tree(dst) == data


def test_a_source_rewritten_after_its_copy_is_kept_not_deleted(
    tmp_path: Path, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, running = fleet
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {"a": 100, "b": 200, "c": 300})
    real = finish.delete_moved

    def rewrite_then_delete(store: Any, catalog: Any) -> Any:
        (src / "b").write_bytes(b"landed after the copy")  # a new version at the same key
        return real(store, catalog)

    monkeypatch.setattr(finish, "delete_moved", rewrite_then_delete)
    with pytest.raises(PartialTransferError) as err:
        copy_dirs(plan, running, (src, dst, tmp_path / "j"), move=True)
    assert "changed after its copy" in err.value.failed["b"]
    assert read_tree(src) == {"b": b"landed after the copy"}
    assert read_tree(dst) == data
    assert err.value.result.objects_moved == 2


def test_a_failed_verification_deletes_nothing(
    tmp_path: Path, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, running = fleet
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {"a": 100, "b": 200})
    real = finish.verify_catalog

    def tamper_then_verify(store: Any, catalog: Any, *args: Any) -> Any:
        (dst / "a").write_bytes(b"x" * 50)  # the copy is cut short before the end check
        return real(store, catalog, *args)

    monkeypatch.setattr(finish, "verify_catalog", tamper_then_verify)
    with pytest.raises(TransferError, match="verification failed"):
        copy_dirs(plan, running, (src, dst, tmp_path / "j"), move=True)
    assert read_tree(src) == data


def test_a_move_of_named_keys_from_s3_deletes_only_those(tmp_path: Path, moto_s3: Any) -> None:
    uri = moto_s3.make_bucket(f"mv{uuid.uuid4().hex[:8]}")
    store = open_store(uri, moto_s3.options)
    blobs = {f"in/{i}": os.urandom(1000 + i) for i in range(8)}
    for key, blob in blobs.items():
        store.write(key, blob)
    dst = tmp_path / "dst"
    dst.mkdir()
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, running):
        result = run_transfer(
            plan, running, uri, f"file://{dst}", src_options=moto_s3.options,
            journal_dir=tmp_path / "j", files_from=["in/1", "in/5"], move=True,
        )  # fmt: skip
    assert result.objects_moved == 2
    assert sorted(o.key for o in store.list()) == sorted(set(blobs) - {"in/1", "in/5"})
    assert read_tree(dst) == {"in/1": blobs["in/1"], "in/5": blobs["in/5"]}
