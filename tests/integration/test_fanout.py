"""One source, several destinations through the control plane (``FanoutRun``): real gateway
processes on loopback, real folders; one destination's sink killed mid-run must not undo or
block the others, and the re-run completes it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.sequence.events import RunEvents
from skyplane_ops.sequence.fanout import FanoutError, FanoutRun
from skyplane_ops.testing.transfer import (
    SRC,
    agents_of,
    local_fleet,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import DispatchOptions
from skyplane_ops.transfer.progress import Progress
from tests.fixtures.fanout import fanout_request, paths_plan

MiB = 1024 * 1024
D1, D2, D3 = "test:d1", "test:d2", "test:d3"


def test_api_copy_to_three_destinations_is_byte_identical(tmp_path: Path) -> None:
    data = write_dataset(
        tmp_path / "src", {"big.bin": 3 * MiB + 5, **{f"s/{i}": 999 for i in range(20)}}
    )
    dsts = [tmp_path / n for n in ("eu", "de", "nl")]
    result = api.copy(
        f"file://{tmp_path / 'src'}",
        [f"file://{d}" for d in dsts],
        src_region="aws:us-east-1",
        dst_region=["aws:eu-west-1", "aws:eu-central-1", "gcp:europe-west4"],
        part_size=MiB,
        journal_dir=str(tmp_path / "journal"),
    )
    assert isinstance(result, api.FanoutResult) and result.status == "ok"
    for d in dsts:
        assert read_tree(d) == data
        one = result.results[f"file://{d}"]
        assert one.objects == 21 and one.verification["status"] == "passed"
    summary = result.to_dict()
    assert [x["dst_uri"] for x in summary["destinations"]] == [f"file://{d}" for d in dsts]


def test_bad_destinations_are_refused_before_any_work(tmp_path: Path) -> None:
    src = f"file://{tmp_path / 'src'}"
    with pytest.raises(api.TransferError, match="one per destination"):
        api.copy(src, [f"file://{tmp_path}/a", f"file://{tmp_path}/b"], dst_region=["x:y"])
    with pytest.raises(api.TransferError, match="overlap"):
        api.copy(src, [f"file://{tmp_path}/a", f"file://{tmp_path}/a/b"])


def test_the_source_reads_and_sends_each_byte_once_down_a_tree(tmp_path: Path) -> None:
    """A plan whose paths share the source's edge (SRC -> D1, then D1 -> D2 and D1 -> D3):
    the tree pass sends the dataset over it once, and the destinations' runs send nothing
    more; each destination is still committed and verified on its own."""
    data = write_dataset(
        tmp_path / "src", {"big.bin": 4 * MiB + 7, **{f"s/{i}": 1500 for i in range(30)}}
    )
    total = sum(len(b) for b in data.values())
    src = tmp_path / "src"
    try:  # metadata travels down the tree as on a route (docs/metadata.md)
        os.setxattr(src / "s/3", "user.owner", b"etl")
        os.setxattr(src / "big.bin", "user.run-id", b"42")
    except OSError as exc:  # pragma: no cover - the file system of the test machine
        pytest.skip(f"no user extended attributes here: {exc}")
    for name in data:
        os.utime(src / name, (1_600_000_000.5, 1_600_000_000.5))
    request, dsts = fanout_request(tmp_path, SRC, (D1, D2, D3), src)
    tree = paths_plan((D1, D2, D3), [SRC, D1], [SRC, D1, D2], [SRC, D1, D3])
    with local_fleet(tree) as (_, fleet):
        run = FanoutRun(request, Gateways(fleet=fleet, plan=tree))
        result = run.run()
    assert result.status == "ok"
    assert all(read_tree(p) == data for p in dsts.values())
    for p in dsts.values():
        assert os.getxattr(p / "s/3", "user.owner") == b"etl"
        assert os.getxattr(p / "big.bin", "user.run-id") == b"42"
        assert all((p / n).stat().st_mtime_ns == (src / n).stat().st_mtime_ns for n in data)
    assert run.tree is not None and len(run.tree.served) == 3
    assert run.tree.source_bytes_read == total  # read once
    assert run.tree.source_bytes_sent == total  # sent once, for three destinations
    for one in result.results.values():
        assert one.chunks == 0 and one.chunks_resumed > 0  # the runs only commit and verify
        assert one.verification["status"] == "passed"


def test_a_sync_sends_down_the_tree_pruned_to_the_destinations_with_work(tmp_path: Path) -> None:
    """D1 is up to date already: the sync's tree pass goes to D2 and D3 only, D1's gateway
    relaying (the tree pruned to them, not cut), the source sending each byte once."""
    data = write_dataset(tmp_path / "src", {"big.bin": 3 * MiB + 1, "a": 700, "b/c": 900})
    total = sum(len(b) for b in data.values())
    request, dsts = fanout_request(tmp_path, SRC, (D1, D2, D3), sync=True)
    shutil.copytree(tmp_path / "src", dsts[D1])  # sizes and times as the source's
    tree = paths_plan((D1, D2, D3), [SRC, D1], [SRC, D1, D2], [SRC, D1, D3])
    with local_fleet(tree) as (_, fleet):
        run = FanoutRun(request, Gateways(fleet=fleet, plan=tree))
        result = run.run()
    assert result.status == "ok" and all(read_tree(p) == data for p in dsts.values())
    assert run.tree is not None
    assert run.tree.served == [f"file://{dsts[D2]}", f"file://{dsts[D3]}"]
    assert run.tree.source_bytes_sent == total
    assert result.results[f"file://{dsts[D1]}"].objects_skipped == len(data)
    assert all(r.chunks == 0 for r in result.results.values())


def test_a_chunk_a_relay_spoilt_is_sent_again_by_the_tree_pass(tmp_path: Path) -> None:
    """D1 relays to D2 and D3 and corrupts the first two chunks it forwards (a test hook):
    every sink refuses them (their end-to-end tags fail), the pass sends each again down the
    tree cut to each sink, and the destinations' runs have nothing left to send."""
    data = write_dataset(tmp_path / "src", {"big.bin": 4 * MiB, "a": 1000})
    request, dsts = fanout_request(tmp_path, SRC, (D1, D2, D3))
    tree = paths_plan((D1, D2, D3), [SRC, D1], [SRC, D1, D2], [SRC, D1, D3])
    tuning = DispatchOptions(test_hooks={D1: {"corrupt_chunks": 2}})
    with local_fleet(tree) as (_, fleet):
        run = FanoutRun(request, Gateways(fleet=fleet, plan=tree), tuning=tuning)
        result = run.run()
    assert result.status == "ok"
    assert all(read_tree(p) == data for p in dsts.values())
    assert run.tree is not None and run.tree.resent >= 2 * 3  # two chunks, three sinks
    assert all(n == 5 for n in run.tree.landed.values())  # every chunk in the pass
    assert all(r.chunks == 0 for r in result.results.values())


class _KillSink(RunEvents):
    """Kills ``region``'s gateway during the tree pass, once its destination has its small
    objects and some parts of the large one written (the rest still to come)."""

    wants_progress = True

    def __init__(self, region: str, dst: Path) -> None:
        self.region, self.dst = region, dst
        self.fleet: api.GatewayFleet | None = None
        self.current = ""
        self.killed = False

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        self.current = name
        yield {}

    def provisioned(self, fleet: api.GatewayFleet) -> None:
        self.fleet = fleet

    def progress(self, update: Progress) -> None:
        # 20 chunks landed of 3 x 9: at least 2 of them at the slow destination.
        if self.killed or self.current != "multicast" or update.chunks_done < 20:
            return
        if not ((self.dst / "a").exists() and (self.dst / "b" / "c").exists()):
            return
        assert self.fleet is not None
        os.kill(int(self.fleet.in_region(self.region)[0].resources["pid"]), signal.SIGKILL)
        self.killed = True


def test_one_sink_killed_the_others_commit_and_the_rerun_completes_it(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "src", {"big.bin": 8 * MiB, "a": 1000, "b/c": 2000})
    request, dsts = fanout_request(tmp_path, SRC, (D1, D2, D3))
    star = paths_plan((D1, D2, D3), [SRC, D1], [SRC, D2], [SRC, D3])
    # D2's sink writes slowly, so it is killed with most of its chunks still to come.
    tuning = DispatchOptions(
        connections=1, hop_timeout=4.0, test_hooks={D2: {"sink_rate_bps": 2e6}}
    )
    events = _KillSink(D2, dsts[D2])
    with local_fleet(star) as (_, fleet):
        gateways = Gateways(fleet=fleet, plan=star)
        run = FanoutRun(request, gateways, events, tuning=tuning)
        with pytest.raises(FanoutError) as err:
            run.run()
    assert events.killed
    # Killed in the tree pass: D1 and D3 had every chunk from it (their runs sent none).
    assert run.tree is not None and len(run.tree.served) == 3
    landed = run.tree.landed
    assert landed[f"file://{dsts[D1]}"] == landed[f"file://{dsts[D3]}"] == 9
    assert landed.get(f"file://{dsts[D2]}", 0) < 9
    got = err.value.result
    assert set(got.results) == {f"file://{dsts[D1]}", f"file://{dsts[D3]}"}
    assert list(got.errors) == [f"file://{dsts[D2]}"] and "re-run" in str(err.value)
    assert read_tree(dsts[D1]) == data and read_tree(dsts[D3]) == data
    assert got.results[f"file://{dsts[D1]}"].chunks == 0
    assert got.results[f"file://{dsts[D3]}"].chunks == 0
    torn = {k: v for k, v in read_tree(dsts[D2]).items() if data.get(k) != v}
    assert torn == {} and len(read_tree(dsts[D2])) < len(data)  # nothing half-written

    # The same copy again completes D2 and sends D1 and D3 nothing: the run recorded the
    # destinations it reached, so they are synced (only what they lack), not copied again.
    with local_fleet(star) as (_, fleet):
        result = FanoutRun(request, Gateways(fleet=fleet, plan=star)).run()
    assert all(read_tree(p) == data for p in dsts.values())
    assert result.status == "ok"
    assert result.results[f"file://{dsts[D1]}"].objects == 0
    assert result.results[f"file://{dsts[D3]}"].objects == 0
    assert result.results[f"file://{dsts[D3]}"].objects_skipped == len(data)
    assert not list((tmp_path / "journal").glob("*.fanout.json"))  # all done: record gone
    resumed = result.results[f"file://{dsts[D2]}"]
    # Only what D2 lacked travelled: the rest of big.bin's parts (the journal kept those
    # written before the kill); the small objects it had committed are skipped.
    assert resumed.objects == 1 and resumed.objects_skipped == 2
    assert resumed.chunks_resumed >= 1 and resumed.chunks + resumed.chunks_resumed == 8


def test_cli_cp_to_three_destinations(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "src", {"big.bin": 2 * MiB + 1, "a/b": 4000, "c": 0})
    dsts = [tmp_path / n for n in ("x", "y", "z")]
    regions = ["aws:eu-west-1", "aws:eu-central-1", "gcp:europe-west4"]
    home = tmp_path / "home"
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    args = [sys.executable, "-m", "skyplane_ops.cli", "cp", str(tmp_path / "src")]
    args += [str(d) for d in dsts] + ["--src-region", "aws:us-east-1", "--json", "--no-progress"]
    for r in regions:
        args += ["--dst-region", r]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "ok"
    assert [d["dst_uri"] for d in out["destinations"]] == [d.as_uri() for d in dsts]
    assert all(d["verification"]["status"] == "passed" for d in out["destinations"])
    assert all(read_tree(d) == data for d in dsts)
    assert agents_of(home) == []  # the one fleet was torn down

    bad = subprocess.run(args[:-2], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "one --dst-region per DST" in bad.stderr
