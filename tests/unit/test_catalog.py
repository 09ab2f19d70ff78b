"""The run's catalog: listings stream into SQLite, decisions are made there, the journal is
indexed (not loaded), and the dispatcher holds only its window of an iterator of chunks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores.base import Capabilities, ObjectInfo
from skyplane_ops.transfer.catalog import SKIPPED, TODO, Catalog, fp_text
from skyplane_ops.transfer.dispatch import ChunkTotals, Dispatcher, DispatchOptions
from skyplane_ops.transfer.journal import Journal
from skyplane_ops.transfer.manifest import Chunk, Segment, same_object
from skyplane_ops.transfer.todo import chunk_totals, iter_chunks, plan_todo, resume

MiB = 1024 * 1024
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class ListStore:
    """A store whose listing is a generator; it checks, while it yields, that the catalog
    has already taken in all but the last batch (the listing is streamed, not collected)."""

    capabilities = Capabilities()

    def __init__(self, infos: Any, catalog: Catalog | None = None, table: str = "src") -> None:
        self.infos, self.catalog, self.table = infos, catalog, table
        self.max_lag = 0

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for i, info in enumerate(self.infos):
            if self.catalog is not None and i % 997 == 0:
                stored = self.catalog.one(f"SELECT count(*) FROM {self.table}")
                self.max_lag = max(self.max_lag, i - stored)
            yield info

    def check_name(self, key: str) -> None:
        return None


def _objects(n: int, size: int = 100) -> Iterator[ObjectInfo]:
    for i in range(n):
        yield ObjectInfo(f"k{(i * 7919) % n:06d}", size, f"e{i}", {}, T0, f"v{i}")


def test_listing_streams_into_the_catalog_in_batches(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    store = ListStore(_objects(30_000), catalog)
    catalog.add_source(store, "mem://s/", [], [])  # type: ignore[arg-type]
    assert catalog.source_totals() == (30_000, 3_000_000)
    assert 0 < store.max_lag <= 5000  # at most one batch held in Python
    keys = [k for (k,) in catalog.pages("key", "src")]
    assert keys == sorted(keys) and len(keys) == 30_000  # key order comes from the database
    path = catalog.path
    catalog.close()
    assert not path.exists()


def test_sync_comparison_in_sql_matches_same_object(tmp_path: Path) -> None:
    """Every case of ``manifest.same_object`` gives the same answer in the catalog."""
    later, earlier = T0 + timedelta(seconds=1), T0 - timedelta(seconds=1)
    cases = {
        "same": (ObjectInfo("same", 5, modified=T0), ObjectInfo("same", 5, modified=later)),
        "older": (ObjectInfo("older", 5, modified=T0), ObjectInfo("older", 5, modified=earlier)),
        "size": (ObjectInfo("size", 5), ObjectInfo("size", 6)),
        "ck-eq": (
            ObjectInfo("ck-eq", 5, checksums={"crc32c": "a"}, modified=T0),
            ObjectInfo("ck-eq", 5, checksums={"crc32c": "a", "md5": "m"}, modified=earlier),
        ),
        "ck-ne": (
            ObjectInfo("ck-ne", 5, checksums={"crc32c": "a"}, modified=T0),
            ObjectInfo("ck-ne", 5, checksums={"crc32c": "b"}, modified=later),
        ),
        "ck-none-common": (
            ObjectInfo("ck-none-common", 5, checksums={"md5": "x"}, modified=T0),
            ObjectInfo("ck-none-common", 5, checksums={"crc32c": "y"}, modified=earlier),
        ),
        "no-time": (ObjectInfo("no-time", 5), ObjectInfo("no-time", 5, modified=earlier)),
        "missing": (ObjectInfo("missing", 5), None),
        # A local source's mtime put back (``written``) counts for nothing; a copy's ctime
        # moved by a link or a chmod (``modified``) does not make its bytes newer.
        "source time put back": (
            ObjectInfo("source time put back", 5, modified=T0, written=earlier),
            ObjectInfo("source time put back", 5, modified=earlier),
        ),
        "copy relinked": (
            ObjectInfo("copy relinked", 5, modified=T0),
            ObjectInfo("copy relinked", 5, modified=later, written=earlier),
        ),
        "copy written later": (
            ObjectInfo("copy written later", 5, modified=T0, written=earlier),
            ObjectInfo("copy written later", 5, modified=later, written=later),
        ),
    }
    catalog = Catalog(tmp_path)
    catalog.add_source(ListStore([s for s, _ in cases.values()]), "mem://s/", [], [])  # type: ignore[arg-type]
    dst = ListStore([d for _, d in cases.values() if d is not None])
    catalog.add_destination(dst)  # type: ignore[arg-type]
    todo = plan_todo(catalog, dst, "mem://d/", [], [], sync=True, delete=False, max_delete=None)  # type: ignore[arg-type]
    states = dict(catalog.pages("key, state", "src"))
    for key, (s, d) in cases.items():
        want = SKIPPED if d is not None and same_object(s, d) else TODO
        assert states[key] == want, key
    expected = {"source time put back": TODO, "copy relinked": TODO, "copy written later": SKIPPED}
    assert {k: states[k] for k in expected} == expected
    assert todo.skipped == sum(1 for v in states.values() if v == SKIPPED)
    catalog.close()


@pytest.mark.parametrize(
    ("dst_keys", "delete", "unreadable", "expected"),
    [
        (("a", "b"), False, False, True),  # the same tree
        (("a",), False, False, False),  # b missing at the destination
        (("a", "b", "c"), False, False, True),  # c extra, kept without --delete
        (("a", "b", "c"), True, False, False),  # c extra, a mirror-delete candidate
        (("a", "b"), True, False, True),
        (("a", "b"), False, True, False),  # an unreadable source entry is reported
    ],
)
def test_nothing_to_do_agrees_with_plan_todo(
    tmp_path: Path, dst_keys: tuple[str, ...], delete: bool, unreadable: bool, expected: bool
) -> None:
    """The read-only look a re-sync takes first says "nothing to do" exactly when
    ``plan_todo`` finds nothing to copy, delete or report; a size change counts too."""
    from gateway_agent.stores.base import SkippedEntry
    from skyplane_ops.transfer.todo import nothing_to_do

    for changed in (False, True):
        catalog = Catalog(tmp_path / f"{changed}")
        catalog.add_source(
            ListStore([ObjectInfo(k, 5, modified=T0) for k in "ab"]), "mem://s/", [], []
        )  # type: ignore[arg-type]
        if unreadable:
            catalog.problems.append(SkippedEntry("z", "cannot read: EACCES", True))
        sizes = {k: 6 if changed and k == "a" else 5 for k in dst_keys}
        dst = ListStore([ObjectInfo(k, sizes[k], modified=T0) for k in dst_keys])
        catalog.add_destination(dst)  # type: ignore[arg-type]
        quick = nothing_to_do(catalog, delete=delete)
        todo = plan_todo(
            catalog, dst, "mem://d/", [], [], sync=True, delete=delete, max_delete=None
        )  # type: ignore[arg-type]
        exact = not (todo.objects or todo.unread or todo.to_delete)
        assert quick == exact == (expected and not changed), (changed, todo)
        catalog.close()


def test_mirror_candidates_and_max_delete(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    catalog.add_source(ListStore([ObjectInfo("a", 1)]), "mem://s/", [], [])  # type: ignore[arg-type]
    dst = ListStore([ObjectInfo(k, 1) for k in ("a", "b", "logs/x", "c")])
    catalog.add_destination(dst)  # type: ignore[arg-type]
    todo = plan_todo(
        catalog,
        dst,
        "mem://d/",
        [],
        ["logs/*"],
        sync=True,
        delete=True,
        max_delete=5,  # type: ignore[arg-type]
    )
    assert todo.to_delete == 2
    assert [k for (k,) in catalog.pages("key", "dst", "extra = 1")] == ["b", "c"]
    catalog.close()


def test_journal_is_indexed_not_loaded_and_resumes_by_fingerprint(tmp_path: Path) -> None:
    small = ObjectInfo("small", 10, "e", {}, T0, "v1")
    big = ObjectInfo("big", 3 * MiB, "e", {}, T0, "v1")
    changed = ObjectInfo("changed", 10, "e", {}, T0, "v1")
    journal = Journal(tmp_path, "k")
    journal.record_done([("0:small", 11, fp_text(small)), ("0:changed", 12, fp_text(changed))])
    journal.record_done([("1:big", 21, fp_text(big)), ("2:big", 22, fp_text(big))])
    journal.record_done([("0:gone", 5, fp_text(small))])
    journal.drop_upload("gone")  # a later ``drop`` forgets what came before
    with open(journal.path, "a") as fh:
        fh.write('{"t":"done","segs":[["0:x"')  # torn last line after a crash
    assert not journal.done  # the engine's appends keep nothing in memory
    catalog = Catalog(tmp_path)
    now = ObjectInfo("changed", 10, "e2", {}, T0, "v2")  # rewritten since: not resumed
    listed = [small, big, now, ObjectInfo("gone", 10, "e", {}, T0, "v1")]
    catalog.add_source(ListStore(listed), "mem://s/", [], [])  # type: ignore[arg-type]
    catalog.load_journal(journal.path)
    caps = Capabilities(min_part_size=MiB)
    assert resume(catalog, MiB, caps) == 3
    chunks = list(iter_chunks(catalog, MiB, caps))
    left = sorted(s.seg_id for c in chunks for s in c.segments)
    assert left == ["0:changed", "0:gone", "3:big"]
    assert all(s.last for c in chunks for s in c.segments)  # big's last part left to send
    assert chunk_totals(catalog, MiB, caps) == (
        len(chunks),
        3,
        sum(c.nbytes for c in chunks),
        3,
    )
    catalog.close()


@pytest.mark.parametrize("min_part", [None, 2 * MiB])
def test_chunk_totals_count_what_iter_chunks_yields(tmp_path: Path, min_part: int | None) -> None:
    """The totals' shortcut for whole objects (no Segment built) counts the same chunks, bytes
    and objects as the chunks themselves, across batch limits and multipart objects."""
    sizes = [10, 0, 3 * MiB, 700_000, 1, MiB, MiB + 1, 5 * MiB + 3, 400_000, 2]
    listed = [ObjectInfo(f"k{i:02d}", n, "e", {}, T0, "v") for i, n in enumerate(sizes * 3)]
    catalog = Catalog(tmp_path)
    catalog.add_source(ListStore(listed), "mem://s/", [], [])  # type: ignore[arg-type]
    caps = Capabilities(min_part_size=min_part)
    for batch_bytes, batch_count in [(MiB, 4), (64 * MiB, 3), (8 * MiB, 1000), (1, 1)]:
        chunks = list(iter_chunks(catalog, MiB, caps, batch_bytes, batch_count))
        segments = [s for c in chunks for s in c.segments]
        assert chunk_totals(catalog, MiB, caps, batch_bytes, batch_count) == (
            len(chunks),
            len(segments),
            sum(s.length for s in segments),
            len({s.key for s in segments}),
        )
        assert any(len(c.segments) > 1 for c in chunks) or batch_count == 1
    catalog.close()


def test_catalog_of_a_dead_process_is_removed(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    folder = tmp_path / "catalog"
    folder.mkdir()
    stale = folder / f"run-{int(proc.stdout)}-abcd.sqlite"
    stale.write_bytes(b"x")
    mine = Catalog(tmp_path)
    assert not stale.exists() and mine.path.exists()
    other = Catalog(tmp_path)  # a live process's (here: this one's) catalog stays
    assert mine.path.exists()
    mine.close()
    other.close()
    assert not any(folder.iterdir())


class _NoGateways(Dispatcher):
    """The real dispatch loop with the gateways replaced: submitted chunks finish a few per
    poll, so the test sees what the loop holds while a long iterator drains."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inflight: list[int] = []
        self.max_map = 0

    def _start_jobs(self) -> None:
        return None

    def _submit(self, chunks: list[Chunk], uploads: Any) -> None:
        for c in chunks:
            self._chunk_path[c.chunk_id] = 0
            self.inflight.append(c.chunk_id)
        self.max_map = max(self.max_map, len(self._chunk_path))

    def _poll(self, gid: str, *args: Any) -> dict[str, Any]:
        done, self.inflight = self.inflight[:7], self.inflight[7:]
        events = [{"t": "done", "chunk": c, "crcs": [1]} for c in done]
        return {"counters": {}, "cursor": 0, "events": events}

    def stop(self, pollers: Any = None) -> None:
        return None


def test_dispatcher_holds_only_its_window_of_a_chunk_iterator() -> None:
    from skyplane_ops.planner.plan import TransferPlan
    from skyplane_ops.provision.fleet import Gateway, GatewayFleet

    plan = TransferPlan(src="a:1", dsts=("b:1",), volume_gb=1, mode="min_cost", paths=[],
                        hops=[], vms={"a:1": 1, "b:1": 1}, predicted_gbps=1,
                        egress_cost_usd=0, vm_cost_usd=0)  # fmt: skip
    fleet = GatewayFleet("t", "local", [Gateway("g0", "a:1", "127.0.0.1", 1, 2),
                                        Gateway("g1", "b:1", "127.0.0.1", 3, 4)], "x")  # fmt: skip
    options = DispatchOptions(window_chunks=16, lease_s=0, poll_interval=0.0001)
    d = _NoGateways(plan, fleet, b"s" * 32, src_uri="mem://a/", dst_uri="mem://b/",
                    options=options)  # fmt: skip
    n = 5000
    pulled, lag = 0, 0
    landed: list[int] = []

    def chunks() -> Iterator[Chunk]:
        nonlocal pulled, lag
        for i in range(n):
            pulled += 1
            lag = max(lag, pulled - len(landed))
            yield Chunk(i, [Segment(f"k{i}", 0, 10, 0)])

    def on_done(finished: list[tuple[Chunk, list[int]]]) -> None:
        landed.extend(c.chunk_id for c, _ in finished)

    seen: list[tuple[int, int]] = []
    stats = d.run(chunks(), {}, on_done, lambda p: seen.append((p.objects_done, p.chunks_done)),
                  ChunkTotals(n, 10 * n, n))  # fmt: skip
    assert sorted(landed) == list(range(n)) and stats.chunks == n
    assert lag <= d.window == 16  # never more than the window pulled ahead of what landed
    assert d.max_map <= d.window and not d._chunk_path  # per-chunk state is dropped on landing
    assert seen[-1] == (n, n)


@pytest.mark.parametrize("threaded", [False, True], ids=["forked", "threaded-host"])
def test_destination_listed_in_a_child_process(
    tmp_path: Path, monkeypatch: Any, threaded: bool
) -> None:
    """A single-threaded process forks a lister; one that runs threads lists in a thread."""
    import os
    import threading

    from gateway_agent.stores.errors import BucketNotFoundError
    from skyplane_ops.errors import TransferError
    from skyplane_ops.transfer import sidelist

    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    monkeypatch.setattr(threading, "active_count", lambda: 2 if threaded else 1)

    dst = tmp_path / "dst"
    for name in ("b", "a/c", "a/d"):
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (dst / name).write_bytes(b"x" * 3)
    catalog = Catalog(tmp_path / "j")
    sidelist.start(catalog, f"file://{dst}", {})(False)
    assert list(catalog.pages("key, size", "dst")) == [("a/c", 3), ("a/d", 3), ("b", 3)]
    assert catalog.has_destination and not list((tmp_path / "j" / "catalog").glob("*-dst*"))

    def missing(uri: str, options: Any) -> Any:
        raise BucketNotFoundError("no such bucket")

    monkeypatch.setattr(sidelist, "open_store", missing)  # the forked child sees it too
    with pytest.raises(TransferError, match=r"destination mem://nope/ does not exist"):
        sidelist.start(catalog, "mem://nope/", {})(False)
    catalog.close()
    assert forks == ([] if threaded else [1, 1])
