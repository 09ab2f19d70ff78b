"""Kills during a move: no object is ever missing from both sides (issue 39).

``skyplane-ops mv`` (a real CLI process, SIGINT ignored) is SIGKILLed while bytes move, once
every byte moved (while it checks, commits and verifies) and while it deletes verified sources
(a moto S3 source, slow enough to be caught mid-delete); the source, relay and sink gateways of
``src -> relay -> sink`` are SIGKILLed mid-copy under ``run_transfer(move=True)``.
After each kill every original object is at the source, byte-identical, or at the destination,
byte-identical (a source is only ever deleted after its copy verified); then the same move is
run again and completes: everything at the destination, nothing left at the source.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.errors import ObjectNotFoundError
from skyplane_ops.errors import TransferError
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.testing.gateways import REPO, dataset, slow_hooks, wait_for
from skyplane_ops.testing.move_kills import move_cli_kill_case, move_gateway_kill_case
from skyplane_ops.testing.transfer import DST, RELAY, SRC, agents_of, make_plan, read_tree
from skyplane_ops.transfer import DispatchOptions, run_transfer
from skyplane_ops.transfer.progress import Progress

pytestmark = pytest.mark.slow
MiB = 1 << 20
LEASE = 4.0


def _missing_from_both(
    new: dict[str, bytes], at_src: Callable[[str], bytes | None], dst: Path
) -> list[str]:
    """Keys whose original bytes are neither at the source nor at the destination, and
    sources that are not their original bytes."""
    bad = []
    for key, blob in new.items():
        here = at_src(key)
        there = (dst / key).read_bytes() if (dst / key).is_file() else None
        if here is not None and here != blob:
            bad.append(f"{key}: the source changed")
        if here != blob and there != blob:
            bad.append(f"{key}: missing from both sides")
    return bad


def _local(src: Path) -> Callable[[str], bytes | None]:
    return lambda key: (src / key).read_bytes() if (src / key).is_file() else None


def _mv(home: Path, src: str, dst: Path, plan_file: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home), "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable, "-m", "skyplane_ops.cli", "mv", src, f"file://{dst}",
        "--src-region", SRC, "--dst-region", DST, "--plan", str(plan_file),
        "--journal-dir", str(home / "journal"), "--chunk-mib", "2", "--json",
        "--backend-options", json.dumps({"lease_s": LEASE, "idle_timeout": 300}), *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip


def _kill_and_reap(proc: subprocess.Popen[str], home: Path) -> None:
    proc.kill()
    proc.wait()
    if proc.stderr is not None:
        threading.Thread(target=proc.stderr.read, daemon=True).start()
    for pid in agents_of(home):  # its gateways (the kill matrix checks their lease)
        os.kill(pid, signal.SIGKILL)


def _finish(home: Path, src: str, dst: Path, plan_file: Path, *extra: str) -> None:
    proc = _mv(home, src, dst, plan_file, *extra)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(make_plan([SRC, RELAY, DST]).to_json())
    return path


def test_mv_killed_while_bytes_move_loses_nothing_and_a_rerun_finishes(
    tmp_path: Path, plan_file: Path
) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    dst.mkdir()
    _, new = dataset(src, dst, big=2, big_mib=5)
    total = sum(map(len, new.values()))
    hooks = json.dumps(slow_hooks(1.0e6))
    proc = _mv(home, f"file://{src}", dst, plan_file, "--gateway-test-hooks", hooks)
    assert proc.stderr is not None
    for line in proc.stderr:  # JSON progress events
        try:
            if int(json.loads(line).get("bytes_done", 0)) >= total // 4:
                break
        except (ValueError, AttributeError):
            continue
    _kill_and_reap(proc, home)
    assert _missing_from_both(new, _local(src), dst) == []
    assert read_tree(src) == new  # nothing was verified yet: nothing was deleted

    _finish(home, f"file://{src}", dst, plan_file)
    assert read_tree(dst) == new and read_tree(src) == {}


def test_mv_killed_while_it_deletes_sources_loses_nothing(
    tmp_path: Path, plan_file: Path, moto_s3: Any
) -> None:
    uri = moto_s3.make_bucket(f"mvk{uuid.uuid4().hex[:8]}")
    store = open_store(uri, moto_s3.options)
    new = {f"o/{i:03d}": os.urandom(2000 + i) for i in range(150)}
    for key, blob in new.items():
        store.write(key, blob)
    dst, home = tmp_path / "dst", tmp_path / "home"
    dst.mkdir()

    def at_src(key: str) -> bytes | None:
        try:
            return store.read(key)
        except ObjectNotFoundError:
            return None

    options = ["--src-options", json.dumps(moto_s3.options)]
    proc = _mv(home, uri, dst, plan_file, *options)
    # The deletes start only after the copy verified: kill at the first one.
    wait_for(lambda: sum(1 for _ in store.list()) < len(new) or proc.poll() is not None, 240,
             "the first source delete", 0.01)  # fmt: skip
    caught = proc.poll() is None
    _kill_and_reap(proc, home)
    left = {o.key for o in store.list()}
    assert _missing_from_both(new, at_src, dst) == []
    if caught:
        assert 0 < len(left) < len(new)  # killed mid-delete, not before or after

    _finish(home, uri, dst, plan_file, *options)
    assert read_tree(dst) == new and list(store.list()) == []


def test_a_sink_killed_mid_move_deletes_nothing_and_a_rerun_finishes(tmp_path: Path) -> None:
    src, dst, journal = tmp_path / "src", tmp_path / "dst", tmp_path / "j"
    src.mkdir()
    dst.mkdir()
    _, new = dataset(src, dst, big=2, big_mib=5)
    total = sum(map(len, new.values()))
    plan = make_plan([SRC, RELAY, DST])

    def fleet() -> tuple[LocalProvisioner, Any]:
        prov = LocalProvisioner(
            idle_timeout=300, buffer_mib=4, extra_args=["--enable-test-hooks"], lease_s=LEASE
        )
        return prov, prov.provision(plan.vms, transfer_id=f"t-{uuid.uuid4().hex[:10]}")

    prov, running = fleet()
    quarter = threading.Event()
    outcome: dict[str, Any] = {}

    def move() -> None:
        def seen(p: Progress) -> None:
            if p.bytes_done >= total // 4:
                quarter.set()

        try:
            outcome["result"] = run_transfer(
                plan, running, f"file://{src}", f"file://{dst}", journal_dir=journal,
                part_size=2 * MiB, progress=seen, move=True,
                dispatch=DispatchOptions(
                    hop_timeout=3.0, lease_linger_s=0, test_hooks=slow_hooks(1.0e6)
                ),
            )  # fmt: skip
        except TransferError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=move, daemon=True)
    worker.start()
    try:
        wait_for(lambda: quarter.is_set() or not worker.is_alive(), 120, "a quarter of the bytes")
        os.kill(int(running.in_region(DST)[0].resources["pid"]), signal.SIGKILL)
        worker.join(timeout=120)
        assert not worker.is_alive()
    finally:
        prov.deprovision(running)
    assert _missing_from_both(new, _local(src), dst) == []
    if "error" in outcome:
        assert read_tree(src) == new  # a failed move deleted nothing

    prov, running = fleet()
    try:
        result = run_transfer(
            plan, running, f"file://{src}", f"file://{dst}", journal_dir=journal,
            part_size=2 * MiB, move=True, dispatch=DispatchOptions(lease_linger_s=0),
        )  # fmt: skip
    finally:
        prov.deprovision(running)
    assert result.verified and read_tree(dst) == new and read_tree(src) == {}


@pytest.mark.parametrize("target", ["source", "relay"])
def test_a_source_or_relay_killed_mid_move_deletes_nothing_and_a_rerun_finishes(
    tmp_path: Path, target: str
) -> None:
    """SIGKILL of the source or relay gateway while bytes move (src -> relay -> sink)."""
    case = move_gateway_kill_case(
        target, tmp_path, hop_timeout=3.0, lease_s=LEASE, rate_bps=1.0e6, big=2, big_mib=5
    )
    assert case.problems == [], case
    assert case.outcome in ("failed", "completed"), case
    if case.outcome == "failed":
        assert case.left_at_source == case.objects  # a failed move deleted nothing
    assert case.rerun_finished


def test_mv_killed_while_it_commits_loses_nothing_and_a_rerun_finishes(tmp_path: Path) -> None:
    """SIGKILL of the CLI once every byte moved (checking, committing, verifying)."""
    case = move_cli_kill_case("commit", tmp_path, lease_s=LEASE, rate_bps=1.0e6)
    assert case.problems == [], case
    if not case.caught:
        pytest.skip("the move finished (or started deleting) before the kill landed")
    assert case.left_at_source == case.objects  # nothing verified was deleted yet
    assert case.rerun_finished
