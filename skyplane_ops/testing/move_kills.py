"""The kill matrix for ``mv``: SIGKILL of the source, relay or sink gateway, or of the CLI, at
the steps of a move, each followed by the move's invariant and a re-run that finishes it.

The invariant (issue 39): every original object is at the source or at the destination, whole
and byte-identical, never missing from both; nothing leaves the source before its copy is
verified at the destination (a source that is gone must be whole at the destination). Used by
``tests/faults/test_move_kills.py`` and ``benchmarks/kill_matrix.py --move``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyplane_ops.errors import TransferError
from skyplane_ops.testing.gateways import (
    REGION_OF,
    REPO,
    MiB,
    _fleet,
    dataset,
    slow_hooks,
    wait_for,
)
from skyplane_ops.testing.transfer import DST, RELAY, SRC, agents_of, make_plan, read_tree
from skyplane_ops.transfer import DispatchOptions, run_transfer
from skyplane_ops.transfer.progress import Progress

CLI_STEPS = ("bytes", "commit", "delete")  # while bytes move, while it commits, while it deletes


@dataclass
class MoveKillCase:
    target: str  # source | relay | sink | cli
    step: str  # bytes | commit | delete
    outcome: str = ""  # failed | completed (the kill landed after the last byte) | hung
    caught: bool = True  # the kill landed in the step named (not before, not after)
    objects: int = 0  # objects the move started with
    left_at_source: int = 0  # objects still at the source right after the kill
    problems: list[str] = field(default_factory=list)  # invariant broken (after kill, re-run)
    rerun_finished: bool = False

    def row(self) -> dict[str, Any]:
        return asdict(self)


def missing_from_both(
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


def local(src: Path) -> Callable[[str], bytes | None]:
    """``at_src`` for a local source folder."""
    return lambda key: (src / key).read_bytes() if (src / key).is_file() else None


def _finished(src: Path, dst: Path, new: dict[str, bytes]) -> list[str]:
    bad = []
    if read_tree(dst) != new:
        bad.append("re-run: the destination is not byte-identical")
    if read_tree(src):
        bad.append(f"re-run: {len(read_tree(src))} objects left at the source")
    return bad


def move_gateway_kill_case(
    target: str,
    root: Path,
    *,
    hop_timeout: float,
    lease_s: float,
    rate_bps: float,
    big: int = 2,
    big_mib: int = 5,
) -> MoveKillCase:
    """SIGKILL one gateway of ``src -> relay -> sink`` once a quarter of the bytes of a
    ``run_transfer(move=True)`` are journaled; check the invariant; re-run on a fresh fleet."""
    case = MoveKillCase(target, "bytes")
    src, dst, journal = root / "src", root / "dst", root / "journal"
    src.mkdir(parents=True)
    dst.mkdir()
    _, new = dataset(src, dst, big=big, big_mib=big_mib)
    total = sum(map(len, new.values()))
    case.objects = len(new)
    plan = make_plan([SRC, RELAY, DST])
    prov, fleet = _fleet(plan, lease_s)
    pid = int(fleet.in_region(REGION_OF[target])[0].resources["pid"])
    quarter = threading.Event()
    outcome: dict[str, Any] = {}

    def seen(p: Progress) -> None:
        if p.bytes_done >= total // 4:
            quarter.set()

    def move() -> None:
        try:
            outcome["result"] = run_transfer(
                plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal,
                part_size=2 * MiB, progress=seen, move=True,
                dispatch=DispatchOptions(
                    hop_timeout=hop_timeout, lease_linger_s=0, test_hooks=slow_hooks(rate_bps)
                ),
            )  # fmt: skip
        except TransferError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=move, daemon=True)
    worker.start()
    try:
        wait_for(lambda: quarter.is_set() or not worker.is_alive(), 120, "a quarter of the bytes")
        case.caught = worker.is_alive()
        os.kill(pid, signal.SIGKILL)
        worker.join(timeout=max(120.0, 4 * hop_timeout))
        if worker.is_alive():
            case.outcome = "hung"
            return case
    finally:
        prov.deprovision(fleet)
    case.outcome = "failed" if "error" in outcome else "completed"
    case.left_at_source = len(read_tree(src))
    case.problems = missing_from_both(new, local(src), dst)
    if "error" in outcome and read_tree(src) != new:
        case.problems.append("a failed move deleted sources")
    prov, fleet = _fleet(plan, lease_s)
    try:
        result = run_transfer(
            plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal,
            part_size=2 * MiB, move=True, dispatch=DispatchOptions(lease_linger_s=0),
        )  # fmt: skip
    finally:
        prov.deprovision(fleet)
    if not result.verified:
        case.problems.append("re-run: not verified")
    case.problems += _finished(src, dst, new)
    case.rerun_finished = not case.problems
    return case


def mv_cli(
    home: Path, src: str, dst: Path, plan_file: Path, lease_s: float, *extra: str
) -> subprocess.Popen[str]:
    """A ``skyplane-ops mv`` process (SIGINT ignored) with JSON progress on stderr."""
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home), "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable, "-m", "skyplane_ops.cli", "mv", src, f"file://{dst}",
        "--src-region", SRC, "--dst-region", DST, "--plan", str(plan_file),
        "--journal-dir", str(home / "journal"), "--chunk-mib", "2", "--json",
        "--backend-options", json.dumps({"lease_s": lease_s, "idle_timeout": 300}), *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip


def kill_and_reap(proc: subprocess.Popen[str], home: Path) -> None:
    """SIGKILL the CLI, keep its pipe drained, and SIGKILL the gateways it started."""
    proc.kill()
    proc.wait()
    if proc.stderr is not None:
        threading.Thread(target=proc.stderr.read, daemon=True).start()
    for pid in agents_of(home):
        os.kill(pid, signal.SIGKILL)


def _progress_reaches(proc: subprocess.Popen[str], nbytes: int) -> bool:
    """Read JSON progress events until ``nbytes`` are done (True) or the pipe closes."""
    assert proc.stderr is not None
    for line in proc.stderr:
        try:
            if int(json.loads(line).get("bytes_done", 0)) >= nbytes:
                return True
        except (ValueError, AttributeError, TypeError):
            continue
    return False


def move_cli_kill_case(
    step: str, root: Path, *, lease_s: float, rate_bps: float, big: int = 2, big_mib: int = 5
) -> MoveKillCase:
    """SIGKILL ``skyplane-ops mv`` at ``step``: ``bytes`` (a quarter journaled), ``commit``
    (every byte moved: checking, committing, verifying) or ``delete`` (the first source
    gone); check the invariant; run the same ``mv`` again to the end."""
    case = MoveKillCase("cli", step)
    src, dst, home = root / "src", root / "dst", root / "home"
    src.mkdir(parents=True)
    dst.mkdir()
    _, new = dataset(src, dst, big=big, big_mib=big_mib)
    total = sum(map(len, new.values()))
    case.objects = len(new)
    plan_file = root / "plan.json"
    plan_file.write_text(make_plan([SRC, RELAY, DST]).to_json())
    uri = f"file://{src}"
    extra = ["--gateway-test-hooks", json.dumps(slow_hooks(rate_bps))] if step == "bytes" else []
    proc = mv_cli(home, uri, dst, plan_file, lease_s, *extra)
    try:
        if step == "bytes":
            case.caught = _progress_reaches(proc, total // 4)
        elif step == "commit":
            case.caught = _progress_reaches(proc, total) and proc.poll() is None
        else:  # the deletes start only after the copy verified: kill at the first one
            threading.Thread(target=_progress_reaches, args=(proc, total + 1), daemon=True).start()
            wait_for(
                lambda: len(list(src.rglob("*.*"))) < len(new) or proc.poll() is not None,
                240, "the first source delete", 0.005,
            )  # fmt: skip
            case.caught = proc.poll() is None
    finally:
        kill_and_reap(proc, home)
    case.outcome = "completed" if proc.returncode == 0 else "failed"
    case.left_at_source = len(read_tree(src))
    if step != "delete" and case.caught:
        case.caught = case.left_at_source == len(new)  # killed before any delete
    case.problems = missing_from_both(new, local(src), dst)
    rerun = mv_cli(home, uri, dst, plan_file, lease_s)
    _, err = rerun.communicate(timeout=300)
    if rerun.returncode != 0:
        case.problems.append(f"re-run failed: {err.strip()[-300:]}")
    case.problems += _finished(src, dst, new)
    case.rerun_finished = not case.problems
    return case
