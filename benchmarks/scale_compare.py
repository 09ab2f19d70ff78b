"""Many small objects, one version of the code against another: did a change slow ``cp`` down?

``scale.py`` compares us with rclone; this compares two (or more) commits of ours on the same
source tree, in the same run, in turns, so that the machine's drift (other jobs, the page
cache, the disk's writeback) falls on every version alike. Each commit is checked out as a
detached git worktree under ``--work`` and run with its own code on ``PYTHONPATH`` (the same
Python and packages), exactly as ``scale.py`` runs ours: ``skyplane-ops cp file:// file://``
on the local backend, checksums and end verification on, files on disk.

Rounds rotate the order (A B, B A, ...); each round copies into an empty folder, which is
counted and deleted after. ``--warmup`` untimed copies per version come first (the first copy
after the tree is made pays for the kernel growing its inode and dentry caches).

Usage: ``python benchmarks/scale_compare.py --revs BEFORE,AFTER [--count 100000] [--rounds 3]``
Writes ``benchmarks/results/scale_compare.json``: every run's seconds, the medians and each
version's median relative to the first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import REGIONS, _check_and_drop, bench_env, check_disk, generate, timed

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def checkout(rev: str, where: Path) -> tuple[str, Path]:
    """``rev`` as a detached worktree at ``where``; returns (full sha, path)."""
    sha = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", rev], text=True).strip()
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(where), sha],
        check=True,
        capture_output=True,
    )
    return sha, where


def copy_once(code: Path, src: Path, dst: Path, work: Path, count: int) -> float:
    """One timed ``cp`` by the checkout at ``code``; the copy is counted and deleted."""
    env = bench_env(work)
    env["PYTHONPATH"] = str(code)
    env["PYTHONPYCACHEPREFIX"] = str(work / f"pycache-{code.name}")
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    dst.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "skyplane_ops.cli", "cp", f"file://{src}/", f"file://{dst}/"]
    cmd += [*REGIONS, "--journal-dir", str(state), "--no-progress", "--json"]
    run = timed(cmd, env)
    _check_and_drop(code.name, dst, count)
    return float(run["seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--revs", required=True, help="comma-separated commits; first = base")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--out", default=str(RESULTS / "scale_compare.json"))
    args = parser.parse_args()
    revs = [r for r in args.revs.split(",") if r]
    if len(revs) < 2 or args.rounds < 1:
        parser.error("--revs takes two or more commits, --rounds 1 or more")
    work = Path(args.work or tempfile.mkdtemp(prefix="skyplane-scale-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    check_disk(work, args.count)
    codes: list[tuple[str, str, Path]] = []
    try:
        for i, rev in enumerate(revs):
            sha, path = checkout(rev, work / f"v{i}")
            codes.append((rev, sha, path))
        src, dst = work / "src", work / "dst"
        generate(src, args.count)
        for _ in range(args.warmup):
            for _rev, _sha, code in codes:
                copy_once(code, src, dst, work, args.count)
        seconds: dict[str, list[float]] = {rev: [] for rev in revs}
        for n in range(args.rounds):
            order = codes if n % 2 == 0 else codes[::-1]
            for rev, _sha, code in order:
                seconds[rev].append(copy_once(code, src, dst, work, args.count))
                print(f"round {n + 1}: {rev:>12} {seconds[rev][-1]:7.2f} s", flush=True)
    finally:
        for _rev, _sha, code in codes:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(code)],
                capture_output=True,
            )
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(seconds[revs[0]])
    rows: list[dict[str, Any]] = []
    print(f"\n{args.count:,} objects of 1 KiB, file:// -> file:// on disk, {args.rounds} rounds")
    print(f"{'commit':>12} {'sha':>9} {'median s':>9} {'vs first':>9}  all runs")
    for rev, sha, _code in codes:
        med = statistics.median(seconds[rev])
        rows.append(
            {
                "rev": rev,
                "sha": sha,
                "seconds": seconds[rev],
                "median_seconds": round(med, 3),
                "relative_to_first": round(med / base, 4),
            }
        )
        runs = " ".join(f"{s:.2f}" for s in seconds[rev])
        print(f"{rev:>12} {sha[:9]:>9} {med:9.2f} {med / base:9.3f}  {runs}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {"count": args.count, "rounds": args.rounds, "warmup": args.warmup, "rows": rows},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
