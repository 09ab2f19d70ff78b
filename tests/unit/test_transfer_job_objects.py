"""A gateway reads and writes the objects of a batched chunk in parallel, and one bad object
fails only itself, after the others finished (no call left running behind the error)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.flow import ByteBudget
from gateway_agent.job import Job, ObjectFailed


def _job(object_threads: int) -> Job:
    spec = {
        "job_id": "job-objects",
        "routes": {"0": ["here"]},
        "gateways": {"here": []},
        "object_threads": object_threads,
    }
    return Job(spec, gateway_id="gw", region="here", secret=b"s" * 32, budget=ByteBudget(1 << 20))


def _in_eight_threads(job: Job, fn: Any) -> None:
    """``fn(c)`` for chunks 0..7, each in a thread of its own (as eight readers or writers),
    then the job is stopped."""
    try:
        threads = [threading.Thread(target=fn, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        job.stop()


def test_objects_of_a_chunk_run_concurrently() -> None:
    job = _job(8)
    gate = threading.Barrier(8, timeout=30)  # passes only if 8 calls run at the same time

    def one(i: int) -> int:
        gate.wait()
        return i * i

    try:
        assert job._each(one, list(range(8))) == [i * i for i in range(8)]
    finally:
        job.stop()


def test_one_bad_object_is_raised_after_the_others_finished() -> None:
    job = _job(4)
    done: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        if i in (2, 5):
            raise ObjectFailed("failed", f"k{i}", "destination", "bad name")
        with lock:
            done.append(i)

    try:
        with pytest.raises(ObjectFailed) as err:
            job._each(one, list(range(8)))
    finally:
        job.stop()
    assert err.value.key == "k2"  # the first in chunk order
    assert sorted(done) == [0, 1, 3, 4, 6, 7]


def test_one_thread_keeps_the_order() -> None:
    job = _job(1)
    seen: list[int] = []
    try:
        job._each(seen.append, [3, 1, 2])
    finally:
        job.stop()
    assert seen == [3, 1, 2]


def test_local_calls_run_inline_and_a_bad_object_fails_only_itself() -> None:
    """A store of local calls (a folder): the objects run in the calling thread, in order,
    and one bad object is raised after the others were done, as with threads."""
    job = _job(8)
    seen: list[tuple[int, str]] = []

    def one(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        if i == 1:
            raise ObjectFailed("failed", f"k{i}", "destination", "bad name")
        return i

    try:
        with pytest.raises(ObjectFailed) as err:
            job._each(one, [0, 1, 2, 3], inline=True)
    finally:
        job.stop()
    assert err.value.key == "k1"
    assert seen == [(i, threading.current_thread().name) for i in range(4)]


def test_the_local_store_declares_local_calls(tmp_path: Path) -> None:
    from gateway_agent.stores import open_store

    assert open_store(f"file://{tmp_path}").capabilities.local_calls


def test_batches_from_a_store_of_local_calls_are_read_two_at_a_time(tmp_path: Path) -> None:
    """Eight reader threads with batches from a folder: at most ``LOCAL_BATCH_READERS`` read at
    once (more only contend for the interpreter); each batch is still read whole and right."""
    from gateway_agent.flow import Lease
    from gateway_agent.job import LOCAL_BATCH_READERS
    from gateway_agent.stores import open_store

    for i in range(8 * 6):
        (tmp_path / f"o{i:02d}").write_bytes(bytes([i]) * 100)
    store: Any = open_store(f"file://{tmp_path}")
    inside, most, lock = 0, 0, threading.Lock()
    real = store.read_into

    def counted(*args: object, **kwargs: object) -> int:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        try:
            time.sleep(0.01)  # a slow disk: without the gate, eight batches would overlap
            return int(real(*args, **kwargs))
        finally:
            with lock:
                inside -= 1

    store.read_into = counted
    job = _job(8)
    job._src = store
    chunks: list[bytes] = []

    def read(c: int) -> None:
        segs = [{"key": f"o{i:02d}", "offset": 0, "length": 100} for i in range(c * 6, c * 6 + 6)]
        got = job._read_chunk({"chunk": c, "path": "0", "segs": segs}, 600, Lease(job._budget, 0))
        assert got is not None
        with lock:
            chunks.append(bytes(got.payload))

    _in_eight_threads(job, read)
    assert sorted(chunks) == sorted(
        b"".join(bytes([i]) * 100 for i in range(c * 6, c * 6 + 6)) for c in range(8)
    )
    assert 1 <= most <= LOCAL_BATCH_READERS


def _overlap_of_batch_writes(
    tmp_path: Path, options: dict[str, Any], hold: float
) -> tuple[int, list[bytes]]:
    """Eight writer threads each write a batched chunk of six small objects to a folder (with
    store ``options``); (most batches inside the store at once, what landed). Each batch
    stays in the store until another one is in too, or ``hold`` seconds."""
    from gateway_agent.flow import Lease
    from gateway_agent.job import InChunk
    from gateway_agent.stores import open_store
    from gateway_agent.stores.checksum import crc32c

    store: Any = open_store(f"file://{tmp_path}", options)
    inside, most, lock = 0, 0, threading.Lock()
    overlapped = threading.Event()
    real = store.write_batch

    def counted(*args: object, **kwargs: object) -> Any:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            if most > 1:
                overlapped.set()
        try:
            overlapped.wait(hold)  # a slow call: without the gate, batches overlap
            return real(*args, **kwargs)
        finally:
            with lock:
                inside -= 1

    store.write_batch = counted
    job = _job(8)
    job._dst, job._dst_uri = store, f"file://{tmp_path}"
    events: list[dict[str, Any]] = []
    job._event = lambda **kw: events.append(kw)  # type: ignore[method-assign]

    def write(c: int) -> None:
        body = [bytes([i]) * 100 for i in range(c * 6, c * 6 + 6)]
        segs = [{"key": f"o{i:02d}", "offset": 0, "length": 100} for i in range(c * 6, c * 6 + 6)]
        meta = {"chunk": c, "segs": segs, "crcs": [crc32c(b) for b in body]}
        payload = b"".join(body)
        job._write_chunk(InChunk(meta, payload, crc32c(payload), Lease(job._budget, 0)))

    _in_eight_threads(job, write)
    assert sorted(e["chunk"] for e in events if e["t"] == "done") == list(range(8))
    return most, [(tmp_path / f"o{i:02d}").read_bytes() for i in range(48)]


def test_batches_to_a_folder_are_written_one_at_a_time(tmp_path: Path) -> None:
    """At most ``LOCAL_BATCH_WRITERS`` writers write batches to a folder at once (more only
    contend for the interpreter); every object lands whole."""
    from gateway_agent.job import LOCAL_BATCH_WRITERS

    most, landed = _overlap_of_batch_writes(tmp_path, {}, hold=0.02)
    assert most == LOCAL_BATCH_WRITERS == 1
    assert landed == [bytes([i]) * 100 for i in range(48)]


def test_batches_to_a_folder_that_flushes_every_write_overlap(tmp_path: Path) -> None:
    """With ``fsync`` every write waits for the disk: batches are written by every writer at
    once, so the waits overlap."""
    most, landed = _overlap_of_batch_writes(tmp_path, {"fsync": True}, hold=5)
    assert most > 1
    assert landed == [bytes([i]) * 100 for i in range(48)]
