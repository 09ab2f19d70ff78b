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
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.errors import ObjectNotFoundError
from skyplane_ops.testing.gateways import dataset, slow_hooks, wait_for
from skyplane_ops.testing.move_kills import (
    kill_and_reap,
    local,
    missing_from_both,
    move_cli_kill_case,
    move_gateway_kill_case,
    mv_cli,
)
from skyplane_ops.testing.transfer import DST, RELAY, SRC, make_plan, read_tree

pytestmark = pytest.mark.slow
LEASE = 4.0


def _mv(home: Path, src: str, dst: Path, plan_file: Path, *extra: str) -> subprocess.Popen[str]:
    return mv_cli(home, src, dst, plan_file, LEASE, *extra)


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
    kill_and_reap(proc, home)
    assert missing_from_both(new, local(src), dst) == []
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
    kill_and_reap(proc, home)
    left = {o.key for o in store.list()}
    assert missing_from_both(new, at_src, dst) == []
    if caught:
        assert 0 < len(left) < len(new)  # killed mid-delete, not before or after

    _finish(home, uri, dst, plan_file, *options)
    assert read_tree(dst) == new and list(store.list()) == []


@pytest.mark.parametrize("target", ["source", "relay", "sink"])
def test_a_gateway_killed_mid_move_deletes_nothing_and_a_rerun_finishes(
    tmp_path: Path, target: str
) -> None:
    """SIGKILL of the source, relay or sink gateway while bytes move (src -> relay -> sink)."""
    case = move_gateway_kill_case(
        target, tmp_path, hop_timeout=3.0, lease_s=LEASE, rate_bps=1.0e6, big=2, big_mib=5
    )
    assert case.problems == [], case  # nothing missing from both sides; the re-run finished
    if not case.caught:
        pytest.skip("the move finished before a quarter of its bytes was seen")
    assert case.outcome == "failed", case  # one gateway per region: nothing to route around
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
