"""The re-sync check between two local folders (``quickcheck``): real trees, real forks.

The rule it must keep: whenever it says "up to date", the catalog's exact path (list both
sides, ``sync_up_to_date``) says so too, with the same count; anything it is not sure of is
None. Each case changes a copied tree one way and asks both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway_agent.stores.local import LocalStore
from skyplane_ops import api, cli
from skyplane_ops.transfer.quickcheck import TreeCheck, same_share, trees_same
from skyplane_ops.transfer.uptodate import quick_up_to_date, sync_up_to_date

FILES = {f"p{d}/o{i:03d}.bin": 10 + i for d in range(3) for i in range(40)} | {"top.txt": 7}
NS = 1_000_000_000
REPO = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> None:
    for key, size in FILES.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    shutil.copytree(src, dst)  # copy2: the same times, to the nanosecond
    return src, dst


def _both(
    src: Path, dst: Path, tmp: Path, *, delete: bool = False, include: tuple[str, ...] = ()
) -> tuple[int | None, int | None]:
    """(quick count or None, the catalog path's count or None when it has work)."""
    kw = {"include": include, "delete": delete, "journal_dir": tmp / "state"}
    quick = quick_up_to_date(f"file://{src}", f"file://{dst}", transfer_id="t", **kw)  # type: ignore[arg-type]
    listing = api.list_request(
        f"file://{src}", f"file://{dst}", include=include, sync=True, journal_dir=tmp / "state"
    )
    exact = sync_up_to_date(listing, f"file://{src}", f"file://{dst}", transfer_id="t", **kw)  # type: ignore[arg-type]
    if exact is None:
        listing.close()
    return (
        None if quick is None else quick.objects_skipped,
        None if exact is None else exact.objects_skipped,
    )


def _older(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 1))


def _newer(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * NS))


def _own_names_at_destination(s: Path, d: Path) -> None:
    (d / ".%staging").mkdir()
    (d / "p0/.%tmp-1").write_bytes(b"t")


def _own_names_in_source(s: Path, d: Path) -> None:
    (s / ".%staging").mkdir()
    (s / "p2/.%tmp-9").write_bytes(b"t")


def _file_became_a_folder(s: Path, d: Path) -> None:
    (d / "top.txt").unlink()
    (d / "top.txt").mkdir()


Change = Callable[[Path, Path], object]
CASES: dict[str, tuple[Change, bool, tuple[str, ...], bool]] = {
    # name: (change to src/dst, delete, include, quick must answer)
    "same": (lambda s, d: None, False, (), True),
    "same, delete": (lambda s, d: None, True, (), True),
    "size": (lambda s, d: (d / "p1/o007.bin").write_bytes(b"x"), False, (), False),
    "copy older by 1 ns": (lambda s, d: _older(d / "p2/o039.bin"), False, (), False),
    "copy newer": (lambda s, d: _newer(d / "p0/o000.bin"), False, (), True),
    "missing copy": (lambda s, d: (d / "top.txt").unlink(), False, (), False),
    "extra copy": (lambda s, d: (d / "p1/extra").write_bytes(b"e"), False, (), True),
    "extra copy, delete": (lambda s, d: (d / "p1/extra").write_bytes(b"e"), True, (), False),
    "extra folder, delete": (lambda s, d: (d / "new").mkdir(), True, (), False),
    "store's own names": (_own_names_at_destination, True, (), True),
    "store's own names in the source": (_own_names_in_source, False, (), True),
    "link in source": (lambda s, d: (s / "p0/ln").symlink_to(s / "top.txt"), False, (), False),
    "file became a folder": (_file_became_a_folder, False, (), False),
    "filtered out, missing": (lambda s, d: (d / "top.txt").unlink(), False, ("*.bin",), True),
    "filtered out, kept": (lambda s, d: None, False, ("*.bin",), True),
    "filtered-out copy, delete": (lambda s, d: None, True, ("*.bin",), False),
    "no destination": (lambda s, d: shutil.rmtree(d), False, (), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_quick_answer_is_the_catalogs(trees: tuple[Path, Path], tmp_path: Path, name: str) -> None:
    change, delete, include, answers = CASES[name]
    src, dst = trees
    change(src, dst)
    quick, exact = _both(src, dst, tmp_path, delete=delete, include=include)
    if answers:
        assert quick is not None and quick == exact, (quick, exact)
    else:
        assert quick is None, quick
    if quick is not None:  # "up to date" is never said where the catalog finds work
        assert exact == quick


# The two-process path runs in a fresh interpreter: this one may run other tests' threads,
# and a process with threads does not fork (``forked.forkable``).
_FORKED = """
import json, sys
from gateway_agent.stores.local import LocalStore
from skyplane_ops.transfer import forked
from skyplane_ops.transfer.quickcheck import TreeCheck, same_share, trees_same
src, dst, change = sys.argv[1:4]
check = TreeCheck(src, dst, reserved=LocalStore.reserved)
assert forked.forkable()
out = {"whole": trees_same(check), "halves": [same_share(check, k, 2) for k in (0, 1)]}
if change != "-":  # a file of share int(change), by this interpreter's string hash
    share = int(change)
    names = sorted(n for n in json.loads(sys.argv[4]) if hash(n.rsplit("/", 1)[-1]) % 2 == share)
    with open(dst + "/" + names[0], "wb") as fh:
        fh.write(b"changed")
    out["changed"] = trees_same(check)
print(json.dumps(out))
"""


def _forked(src: Path, dst: Path, change: str = "-") -> dict[str, object]:
    argv = [sys.executable, "-c", _FORKED, str(src), str(dst), change, json.dumps(list(FILES))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_counts_files_and_bytes_of_both_shares(trees: tuple[Path, Path]) -> None:
    src, dst = trees
    out = _forked(src, dst)
    want = [len(FILES), sum(FILES.values())]
    assert out["whole"] == want
    halves = out["halves"]
    assert isinstance(halves, list) and all(h is not None for h in halves)
    assert [sum(x) for x in zip(*halves, strict=True)] == want


@pytest.mark.parametrize("share", [0, 1])
def test_a_difference_in_either_share_is_found(trees: tuple[Path, Path], share: int) -> None:
    """The forked child's share (odd name hashes) counts as much as this process's."""
    src, dst = trees
    out = _forked(src, dst, str(share))
    assert out["whole"] is not None and out["changed"] is None


def test_without_a_fork_the_answer_is_the_same(trees: tuple[Path, Path]) -> None:
    """A process running threads does not fork: both shares are walked here."""
    src, dst = trees
    check = TreeCheck(str(src), str(dst), reserved=LocalStore.reserved)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        pids_before = set(os.listdir("/proc/self/task"))
        assert trees_same(check) == (len(FILES), sum(FILES.values()))
        (dst / "p2/o001.bin").write_bytes(b"changed")
        assert trees_same(check) is None
        assert set(os.listdir("/proc/self/task")) == pids_before
    finally:
        release.set()
        other.join()


def test_stop_and_progress(trees: tuple[Path, Path]) -> None:
    src, dst = trees
    check = TreeCheck(str(src), str(dst), reserved=LocalStore.reserved)
    assert same_share(check, stop=lambda: True) is None
    seen: list[int] = []
    assert trees_same(check, seen.append) is not None
    assert seen and seen == sorted(seen) and seen[-1] <= len(FILES)


def test_cli_resync_of_an_unchanged_tree_lists_into_no_catalog(
    trees: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``skyplane-ops sync`` answers an unchanged local tree before any listing; one changed
    file sends it down the catalog's path, which copies it."""
    src, dst = trees
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    listed: list[str] = []
    real = api.list_request

    def list_request(*args: object, **kwargs: object) -> object:
        listed.append(str(args[0]))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "list_request", list_request)
    argv = ["sync", f"file://{src}", f"file://{dst}", "--src-region", "aws:us-east-1",
            "--dst-region", "aws:us-west-2", "--no-progress", "--json"]  # fmt: skip
    capsys.readouterr()
    assert cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["objects"], result["objects_skipped"]) == (0, len(FILES))
    assert listed == []
    (src / "p1/o003.bin").write_bytes(b"new bytes")
    assert cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["objects"] == 1 and len(listed) == 1
    assert (dst / "p1/o003.bin").read_bytes() == b"new bytes"
