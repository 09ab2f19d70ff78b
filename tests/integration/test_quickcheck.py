"""The sync walk between two local folders (``quickcheck``, ``quick_listing``): real trees,
real forks.

The rule it must keep: whenever it says "up to date", the catalog's exact path (list both
sides, ``sync_up_to_date``) says so too, with the same count; whenever it hands over a listing
of the files that differ, that listing plans exactly what the full one plans (the same objects
to copy, skipped and to delete); anything it is not sure of is None. Each case changes a copied
tree one way and asks both.
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

from gateway_agent.stores import open_store
from gateway_agent.stores.local import LocalStore
from skyplane_ops import api, cli
from skyplane_ops.sequence import copy_run
from skyplane_ops.transfer import uptodate, verify
from skyplane_ops.transfer.catalog import TODO, Catalog
from skyplane_ops.transfer.listing import Listing
from skyplane_ops.transfer.listrows import dec
from skyplane_ops.transfer.quickcheck import MOST_DIFFERENT, TreeCheck, same_share, walk_trees
from skyplane_ops.transfer.todo import plan_todo
from skyplane_ops.transfer.uptodate import quick_listing

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


Plan = tuple[list[str], int, int]  # (keys to copy, objects skipped, objects to delete)


def _plan(listing: Listing, dst: Path, delete: bool, include: tuple[str, ...]) -> Plan:
    """What a sync would do from ``listing`` (closed after)."""
    store = open_store(f"file://{dst}", {})  # as the engine opens it
    try:
        todo = plan_todo(
            listing.catalog, store, f"file://{dst}", include, (),
            sync=True, delete=delete, max_delete=None,
        )  # fmt: skip
        keys = sorted(dec(k) for (k,) in listing.catalog.pages("key", "src", f"state = {TODO}"))
        return keys, todo.skipped, todo.to_delete
    finally:
        listing.close()


def _record(src: Path, dst: Path, tmp: Path, include: tuple[str, ...] = ()) -> None:
    """A sync of the two (equal) trees through the listing: it finds them up to date and
    writes the sync record (``syncstate``) the walk judges by. Without one the walk is not
    asked: the first sync over a copy made elsewhere lists both sides."""
    uris = (f"file://{src}", f"file://{dst}")
    kw = {"include": include, "journal_dir": tmp / "state"}
    request = api.TransferRequest.build(*uris, sync=True, **kw)  # type: ignore[arg-type]
    assert quick_listing(request, transfer_id="t") is None  # no record yet
    listing = api.list_request(request)
    assert uptodate.sync_up_to_date(listing, request, transfer_id="t") is not None


def _both(
    src: Path, dst: Path, tmp: Path, *, delete: bool = False, include: tuple[str, ...] = ()
) -> tuple[object, object]:
    """(what the walk says, what the full listing says), each: the count of an up-to-date
    sync, a ``Plan``, or None (the walk only: not sure)."""
    kw = {"include": include, "delete": delete, "journal_dir": tmp / "state"}
    uris = (f"file://{src}", f"file://{dst}")
    request = api.TransferRequest.build(*uris, sync=True, **kw)  # type: ignore[arg-type]
    answer = quick_listing(request, transfer_id="t")
    quick: object = answer
    if isinstance(answer, Listing):
        quick = _plan(answer, dst, delete, include)
    elif answer is not None:
        quick = answer.objects_skipped
    listing = api.list_request(*uris, include=include, sync=True, journal_dir=tmp / "state")
    return _counted(quick), _counted(_plan(listing, dst, delete, include))


def _counted(answer: object) -> object:
    """A plan with nothing to copy or delete as what ``sync_up_to_date`` says: the count."""
    if isinstance(answer, tuple) and not answer[0] and not answer[2]:
        return answer[1]
    return answer


def _older(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 1))


def _newer(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5 * NS))


def _replaced_with_old_time(s: Path, d: Path) -> None:
    """A source file replaced by other bytes of the same size with its old mtime put back (a
    tarball extracted over it, ``cp -p``, ``touch -d``): only its ctime tells."""
    path = s / "p1/o005.bin"
    st = path.stat()
    path.write_bytes(os.urandom(st.st_size))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 3600 * NS))


def _copy_linked_after_source_change(s: Path, d: Path) -> None:
    """The source changed, then the copy got a second name and a mode change (a hard-link
    snapshot of the replica, a permission fix): its ctime moves, its bytes are still old."""
    (s / "p0/o002.bin").write_bytes(os.urandom(FILES["p0/o002.bin"]))
    os.utime(d / "p0/o002.bin", ns=(0, (s / "p0/o002.bin").stat().st_mtime_ns - NS))
    os.link(d / "p0/o002.bin", d.parent / "snapshot-o002.bin")
    os.chmod(d / "p0/o002.bin", 0o640)


def _own_names_at_destination(s: Path, d: Path) -> None:
    (d / ".%staging").mkdir()
    (d / "p0/.%tmp-1").write_bytes(b"t")


def _own_names_in_source(s: Path, d: Path) -> None:
    (s / ".%staging").mkdir()
    (s / "p2/.%tmp-9").write_bytes(b"t")


def _file_became_a_folder(s: Path, d: Path) -> None:
    (d / "top.txt").unlink()
    (d / "top.txt").mkdir()


def _new_folder(s: Path, d: Path) -> None:
    (s / "p9/deep").mkdir(parents=True)
    (s / "p9/a.bin").write_bytes(b"a" * 11)
    (s / "p9/deep/b.bin").write_bytes(b"b" * 12)


Change = Callable[[Path, Path], object]
CASES: dict[str, tuple[Change, bool, tuple[str, ...], bool]] = {
    # name: (change to src/dst, delete, include, the walk must answer)
    "same": (lambda s, d: None, False, (), True),
    "same, delete": (lambda s, d: None, True, (), True),
    "size": (lambda s, d: (d / "p1/o007.bin").write_bytes(b"x"), False, (), True),
    "size, delete": (lambda s, d: (d / "p1/o007.bin").write_bytes(b"x"), True, (), True),
    "copy older by 1 ns": (lambda s, d: _older(d / "p2/o039.bin"), False, (), True),
    "copy newer": (lambda s, d: _newer(d / "p0/o000.bin"), False, (), True),
    "source replaced, its old time put back": (_replaced_with_old_time, False, (), True),
    "copy linked after a source change": (_copy_linked_after_source_change, False, (), True),
    "missing copy": (lambda s, d: (d / "top.txt").unlink(), False, (), True),
    "missing copy, filtered in": (
        lambda s, d: (d / "p0/o001.bin").unlink(),
        False,
        ("*.bin",),
        True,
    ),
    "new folder": (_new_folder, False, (), True),
    "new folder, delete": (_new_folder, True, (), True),
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
    _record(src, dst, tmp_path, include)
    change(src, dst)
    quick, full = _both(src, dst, tmp_path, delete=delete, include=include)
    if answers:
        assert quick is not None and quick == full, (quick, full)
    else:
        assert quick is None, quick
    if name in MUST_COPY:  # both agreeing is not enough: the changed file is copied
        assert isinstance(full, tuple) and MUST_COPY[name] in full[0], full


MUST_COPY = {
    "source replaced, its old time put back": "p1/o005.bin",
    "copy linked after a source change": "p0/o002.bin",
}


# The two-process path runs in a fresh interpreter: this one may run other tests' threads,
# and a process with threads does not fork (``forked.forkable``).
_FORKED = """
import json, sys
from gateway_agent.stores.local import LocalStore
from skyplane_ops.transfer import forked
from skyplane_ops.transfer.quickcheck import TreeCheck, same_share, walk_trees
def facts(w):
    return None if w is None else [w.equal, w.equal_bytes, sorted(w.different)]
src, dst, change = sys.argv[1:4]
check = TreeCheck(src, dst, reserved=LocalStore.reserved)
assert forked.forkable()
halves = [facts(same_share(check, k, 2)) for k in (0, 1)]
out = {"whole": facts(walk_trees(check)), "halves": halves}
if change != "-":  # a file of share int(change), by this interpreter's string hash
    share = int(change)
    names = sorted(n for n in json.loads(sys.argv[4]) if hash(n.rsplit("/", 1)[-1]) % 2 == share)
    with open(dst + "/" + names[0], "wb") as fh:
        fh.write(b"changed")
    out["changed"], out["name"] = facts(walk_trees(check)), names[0]
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
    assert out["whole"] == [len(FILES), sum(FILES.values()), []]
    halves = out["halves"]
    assert isinstance(halves, list) and all(h is not None for h in halves)
    assert [halves[0][0] + halves[1][0], halves[0][1] + halves[1][1]] == [
        len(FILES),
        sum(FILES.values()),
    ]


@pytest.mark.parametrize("share", [0, 1])
def test_a_difference_in_either_share_is_found(trees: tuple[Path, Path], share: int) -> None:
    """The forked child's share (odd name hashes) counts as much as this process's: the
    changed file is named, the others counted."""
    src, dst = trees
    out = _forked(src, dst, str(share))
    name = out["name"]
    assert out["changed"] == [len(FILES) - 1, sum(FILES.values()) - FILES[str(name)], [name]]


def test_without_a_fork_the_answer_is_the_same(trees: tuple[Path, Path]) -> None:
    """A process running threads does not fork: both shares are walked here."""
    src, dst = trees
    check = TreeCheck(str(src), str(dst), reserved=LocalStore.reserved)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        pids_before = set(os.listdir("/proc/self/task"))
        walked = walk_trees(check)
        assert walked is not None
        assert (walked.equal, walked.equal_bytes) == (len(FILES), sum(FILES.values()))
        (dst / "p2/o001.bin").write_bytes(b"changed")
        walked = walk_trees(check)
        assert walked is not None and walked.different == ["p2/o001.bin"]
        assert set(os.listdir("/proc/self/task")) == pids_before
    finally:
        release.set()
        other.join()


def test_stop_and_progress(trees: tuple[Path, Path]) -> None:
    src, dst = trees
    check = TreeCheck(str(src), str(dst), reserved=LocalStore.reserved)
    assert same_share(check, stop=lambda: True) is None
    seen: list[int] = []
    assert walk_trees(check, seen.append) is not None
    assert seen and seen == sorted(seen) and seen[-1] <= len(FILES)


def test_too_many_differing_files_is_not_sure(
    trees: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More differing files than ``MOST_DIFFERENT`` (a first copy): the walk gives up, so the
    keys it holds stay bounded; the listing takes over."""
    from skyplane_ops.transfer import quickcheck

    src, dst = trees
    check = TreeCheck(str(src), str(dst), reserved=LocalStore.reserved)
    for key in list(FILES)[:5]:
        (dst / key).unlink()
    monkeypatch.setattr(quickcheck, "MOST_DIFFERENT", 5)
    assert same_share(check) is not None
    (dst / list(FILES)[5]).unlink()
    assert same_share(check) is None
    assert MOST_DIFFERENT >= 10_000  # a daily sync's changes fit


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_cli_sync_lists_into_a_catalog_only_what_differs(
    trees: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``skyplane-ops sync`` answers an unchanged local tree before any listing; a changed
    file and a new partition are copied from a catalog of only those files (no listing of
    either side), the rest counted as skipped; the end check looks the written files up."""
    src, dst = trees
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    listed: list[str] = []
    real = api.list_request

    def list_request(*args: object, **kwargs: object) -> object:
        listed.append(str(args[0]))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    # Every place the run sequence lists from: its own list step and the sync check.
    monkeypatch.setattr(copy_run, "list_request", list_request)
    monkeypatch.setattr(uptodate, "list_request", list_request)
    looked: list[int] = []
    real_look = verify._head_into_got

    def look(dst: object, catalog: Catalog, threads: int) -> None:
        looked.append(int(catalog.one("SELECT count(*) FROM exp")))
        real_look(dst, catalog, threads)  # type: ignore[arg-type]

    monkeypatch.setattr(verify, "_head_into_got", look)
    monkeypatch.setattr(verify, "LOOKUP_SHARE", 16)  # 3 written of 121 held: few enough here
    argv = ["sync", f"file://{src}", f"file://{dst}", "--src-region", "aws:us-east-1",
            "--dst-region", "aws:us-west-2", "--no-progress", "--json"]  # fmt: skip
    result = _cli(argv, capsys)
    assert (result["objects"], result["objects_skipped"]) == (0, len(FILES))
    # That first sync over a copy made elsewhere (``copytree``) had no record to judge by: it
    # listed both sides and recorded them. From now on the walk answers.
    assert len(listed) == 1
    listed.clear()
    result = _cli(argv, capsys)
    assert (result["objects"], result["objects_skipped"]) == (0, len(FILES))
    assert listed == []
    (src / "p1/o003.bin").write_bytes(b"new bytes")
    _new_folder(src, dst)
    result = _cli([*argv, "--delete"], capsys)
    assert (result["objects"], result["objects_skipped"]) == (3, len(FILES) - 1)
    assert result["objects_deleted"] == 0
    assert listed == []
    for key in ("p1/o003.bin", "p9/a.bin", "p9/deep/b.bin"):
        assert (dst / key).read_bytes() == (src / key).read_bytes()
    verification = result["verification"]
    assert isinstance(verification, dict) and verification["status"] == "passed"
    assert verification["objects"] == 3 and looked == [3]  # not a listing of the whole copy
    result = _cli(argv, capsys)
    assert (result["objects"], result["objects_skipped"]) == (0, len(FILES) + 2)
    assert listed == []


def test_after_a_cp_the_next_sync_is_answered_by_the_walk_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A verified ``cp`` records what it copied, so the first ``sync`` after it is decided by
    the quick walk against that record (no listing of either side), and so is every sync
    after that one: the walk trusts a local copy whose record holds its etag too."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src)
    dst.mkdir()
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    uris = [f"file://{src}", f"file://{dst}"]
    regions = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]
    copied = _cli(["cp", *uris, *regions, "--no-progress", "--json"], capsys)
    assert copied["objects"] == len(FILES)
    request = api.TransferRequest.build(*uris, sync=True)  # the key cp and sync share
    for _ in range(2):  # after the cp, and after a sync that recorded again
        answer = quick_listing(request, transfer_id="t")
        assert isinstance(answer, api.TransferResult), answer  # certain, from the walk
        assert answer.objects_skipped == len(FILES)
        result = _cli(["sync", *uris, *regions, "--no-progress", "--json"], capsys)
        assert (result["objects"], result["objects_skipped"]) == (0, len(FILES))
