"""The dry run decides in the run's catalog, as the run does, and streams its answer: the
lines and the JSON say what a sync would copy, skip and delete, it changes nothing, and it
leaves no scratch file behind."""

from __future__ import annotations

import io
import json
from pathlib import Path

from skyplane_ops import api
from skyplane_ops.testing.transfer import read_tree, write_dataset


def _trees(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {f"part/{i:03d}": 10 + i for i in range(120)} | {"top": 7})
    write_dataset(dst, {"gone/a": 3, "gone/b": 4, "logs/x.log": 5}, seed=2)
    (dst / "part").mkdir()
    for i in range(0, 120, 2):  # half of them already there, same bytes and newer
        (dst / "part" / f"{i:03d}").write_bytes(data[f"part/{i:03d}"])
    return src, dst, data


def test_a_sync_dry_run_streams_what_the_run_would_do_and_changes_nothing(
    tmp_path: Path,
) -> None:
    src, dst, data = _trees(tmp_path)
    before = read_tree(dst)
    journal = tmp_path / "journal"
    with api.preview_transfer(
        src.as_uri(),
        dst.as_uri(),
        exclude=["logs/*"],
        sync=True,
        delete=True,
        max_delete=1,
        journal_dir=journal,
    ) as preview:
        out = io.StringIO()
        preview.write_json(out)
        lines = list(preview.lines())
    answer = json.loads(out.getvalue())
    want = sorted([f"part/{i:03d}" for i in range(1, 120, 2)] + ["top"])
    assert [c["key"] for c in answer["copy"]] == want
    assert all(c["size"] == len(data[c["key"]]) for c in answer["copy"])
    assert answer["delete"] == ["gone/a", "gone/b"]  # logs/ is excluded: neither copied nor deleted
    assert answer["fail"] == [] and answer["skipped"] == 60
    assert answer["delete_refused"] is True  # 2 deletes > --max-delete 1
    assert api.TransferRequest.from_dict(answer["request"]).max_delete == 1  # what would run
    assert lines[0] == "would copy part/001 (11 bytes)" and "would delete gone/a" in lines
    assert lines[-1].startswith("dry run: 61 to copy, 2 to delete, 60 up to date")
    assert "the run would refuse" in lines[-1]
    assert read_tree(dst) == before
    assert list((journal / "catalog").glob("*.sqlite")) == []  # the scratch catalog is gone


def test_a_copy_dry_run_with_nothing_to_delete_is_valid_json(tmp_path: Path) -> None:
    src, dst, _ = _trees(tmp_path)
    with api.preview_transfer(
        src.as_uri(), dst.as_uri(), include=["top"], journal_dir=tmp_path / "j"
    ) as preview:
        out = io.StringIO()
        preview.write_json(out)
    answer = json.loads(out.getvalue())
    assert answer.pop("request")["include"] == ["top"]
    assert answer == {
        "copy": [{"key": "top", "size": 7}],
        "keep": [],
        "fail": [],
        "delete": [],
        "skipped": 0,
        "delete_refused": False,
    }
