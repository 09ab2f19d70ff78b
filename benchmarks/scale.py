"""Many small objects: ``skyplane-ops cp`` next to ``rclone copy`` in the same run.

For each count (10k and 100k objects of 1 KiB; 1M with ``--full``) a source tree is generated
under ``--work`` (default: a temporary folder), then copied ``file:// -> file://`` by

* the CLI (``skyplane-ops cp``, local backend: one gateway process per region, checksums and
  end verification on, as a user gets them), and
* ``rclone copy --transfers 16 --checkers 16``,

and each is run again on the unchanged tree (``skyplane-ops sync`` / ``rclone copy``), then once
more after ``UPDATED`` (10) source files were rewritten (the daily sync of a few changes). Reported
per run: seconds, objects/s, peak RSS of the CLI and of every gateway (sampled from ``/proc``
every 50 ms over the whole process tree), and the disk used by the CLI's state (journal
folder, its peak while running). Both tools run on the same machine one after the other.

Each tool's copy is counted and deleted after its re-sync, so the disk holds the source and
one copy at a time (1M objects of 1 KiB: ~4 GiB each); the run refuses to start a count whose
source and copy would not fit.

``--warmup N`` (default 1) copies with each tool N times untimed first (like hyperfine, and
like ``bigfile.py``). The first copy after the tree is generated pays for the kernel growing
its caches by a copy's worth of inodes and dentries; a copy made after another was deleted
reuses them. At 100k objects on tmpfs that was 4.7 s cold and 3.4 s warm for us, and 4.9 s
and 4.4 s for rclone. Without a warm-up, whichever tool went first paid it (here always ours,
at the first count).

``--repeat N`` (default 1) times N copies by each tool, in turn, and shows the median one (the
highest memory of any): single runs of one count vary by 10-20% here, which a ratio of two
counts (linearity: 1M within 12x of 100k) doubles.

``--no-vms`` runs ours on the worker path (an in-process gateway: no gateway process, no
TCP; see ``docs/vmless.md``) instead of the local backend's gateway processes.

Usage: ``python benchmarks/scale.py [--counts 10000,100000] [--full] [--warmup 1] [--repeat 1]
[--work DIR] [--no-vms]``
(``--full``: 10k, 100k and 1M; run it alone: other work on the machine skews both tools).
Writes ``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MiB = 1024 * 1024
REGIONS = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]


def generate(root: Path, count: int, size: int = 1024) -> None:
    """``count`` files of ``size`` bytes in folders of 1,000 (as a data lake partitions)."""
    body = os.urandom(size)
    for i in range(count):
        folder = root / f"p{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"o{i:07d}.bin", "wb") as fh:
            fh.write(i.to_bytes(8, "big") + body[8:])


UPDATED = 10


def rewrite_some(root: Path, count: int, round_: int) -> None:
    """Rewrite ``UPDATED`` files spread over the tree with new content of a new size."""
    for j in range(UPDATED):
        i = j * count // UPDATED
        path = root / f"p{i // 1000:04d}" / f"o{i:07d}.bin"
        path.write_bytes(os.urandom(1024 + round_ * 7 + j))


def check_updated(side: str, src: Path, dst: Path, count: int) -> None:
    """The rewritten files arrived (a sync that copied nothing must not look fast)."""
    for j in range(UPDATED):
        i = j * count // UPDATED
        rel = Path(f"p{i // 1000:04d}") / f"o{i:07d}.bin"
        if (src / rel).read_bytes() != (dst / rel).read_bytes():
            raise RuntimeError(f"{side}: {rel} was not updated by the sync")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except OSError:
        pass
    return out


def _rss_and_cmd(pid: int) -> tuple[int, int, str]:
    """(VmRSS, RssAnon, command line) of ``pid``; zeros once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = {x.split(":")[0]: x.split()[1:2] for x in fh}
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return 0, 0, ""
    rss, anon = (int((fields.get(k) or ["0"])[0]) * 1024 for k in ("VmRSS", "RssAnon"))
    return rss, anon, cmd


def _dir_bytes(path: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(base, name)).st_blocks * 512
            except OSError:
                pass
    return total


class Sampler(threading.Thread):
    """Peak RSS of a process and of each of its descendants (gateways named by cmdline)."""

    def __init__(self, pid: int, state_dir: Path | None) -> None:
        super().__init__(daemon=True)
        self.pid, self.state_dir = pid, state_dir
        self.peaks: dict[str, int] = {}
        self.anon: dict[str, int] = {}
        self.state_peak = 0
        self._done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._done.is_set():
            self._sample()
            if self.state_dir is not None and n % 20 == 0:
                self.state_peak = max(self.state_peak, _dir_bytes(self.state_dir))
            n += 1
            self._done.wait(0.05)

    def _sample(self) -> None:
        todo, seen = [self.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            rss, anon, cmd = _rss_and_cmd(pid)
            if pid == self.pid:
                name = "main"
            elif "gateway_agent" in cmd:
                words = cmd.split()
                gid = words[words.index("--gateway-id") + 1] if "--gateway-id" in words else pid
                name = f"gateway {gid}"
            else:
                name = f"other {pid}"
            self.peaks[name] = max(self.peaks.get(name, 0), rss)
            self.anon[name] = max(self.anon.get(name, 0), anon)
            todo.extend(_children(pid))

    def stop(self) -> None:
        self._done.set()
        self.join()
        self._sample()


def timed(cmd: list[str], env: dict[str, str], state_dir: Path | None = None) -> dict[str, Any]:
    """Run ``cmd`` to the end, sampling memory. Dirty pages (a freshly generated tree, the last
    run's copy) are flushed first, so no run pays for the writeback of the one before."""
    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = Sampler(proc.pid, state_dir)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    names = sorted(k for k in sampler.peaks if k.startswith("gateway"))
    return {
        "seconds": round(seconds, 3),
        "main_rss_mib": round(sampler.peaks.get("main", 0) / MiB, 1),
        # Other descendants: the CLI's forked destination lister during a sync.
        "other_rss_mib": round(
            max((v for k, v in sampler.peaks.items() if k.startswith("other")), default=0) / MiB,
            1,
        ),
        "gateways": [k.split(" ", 1)[1] for k in names],
        "gateway_rss_mib": [round(sampler.peaks[k] / MiB, 1) for k in names],
        "gateway_anon_mib": [round(sampler.anon[k] / MiB, 1) for k in names],
        "state_peak_mib": round(sampler.state_peak / MiB, 2),
        "stdout_tail": out.decode()[-300:],
    }


def timed_cli(cmd: list[str], env: dict[str, str], state: Path) -> dict[str, Any]:
    """``timed`` plus where the CLI's time went (its ``--json`` phases and steps)."""
    out = state.parent / "cli.json"
    run = timed(["sh", "-c", 'exec "$@" > "$0"', str(out), *cmd], env, state)
    doc = json.loads(out.read_text())
    run["phases"] = {k: round(float(v), 2) for k, v in doc.get("phases", {}).items()}
    run["steps"] = {k: round(float(v), 2) for k, v in doc.get("steps", {}).items()}
    run["plan"] = doc.get("plan_summary")
    run["paths"] = [  # each path's share and achieved rate
        {k: path.get(k) for k in ("regions", "share", "achieved_gbps", "seconds")}
        for path in doc.get("paths", [])
    ]
    run["verification"] = (doc.get("verification") or {}).get("method")
    out.unlink()
    return run


def where_it_went(run: dict[str, Any]) -> str:
    """A CLI run's phases and its transfer's steps, on one line."""
    steps = {f"transfer.{k}": v for k, v in run.get("steps", {}).items() if v}
    return ", ".join(f"{k} {v:g}" for k, v in {**run.get("phases", {}), **steps}.items())


def cli_command() -> list[str]:
    """The CLI of this checkout (``PYTHONPATH`` is set to it by ``bench_env``)."""
    return [sys.executable, "-m", "skyplane_ops.cli"]


def bench_env(work: Path) -> dict[str, str]:
    """The environment both tools run in: this checkout first on the path, no CA bundle
    override (rclone fails with one), state under ``work``. Python keeps its bytecode (under
    ``work``), as an installed package has it: ``pip install`` compiles it, but a checkout
    run with ``PYTHONDONTWRITEBYTECODE`` (set on this machine) compiles ~170 modules in every
    CLI run (0.14 s) and gateway start (0.07 s), a cost no user's run pays."""
    drop = {"AWS_CA_BUNDLE", "PYTHONDONTWRITEBYTECODE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["SKYPLANE_OPS_HOME"] = str(work / "home")
    return env


def count_files(root: Path) -> int:
    return sum(len(files) for _b, _d, files in os.walk(root))


def _check_and_drop(side: str, dst: Path, count: int) -> None:
    got = count_files(dst)
    shutil.rmtree(dst, ignore_errors=True)
    if got != count:
        raise RuntimeError(f"{side}: {got} of {count} objects at the destination")


def check_disk(work: Path, count: int, size: int = 1024) -> None:
    """Refuse to start when the source and one copy would not fit with 2 GiB to spare."""
    need = 2 * count * max(4096, size) + 2 * 1024**3
    free = shutil.disk_usage(work).free
    if free < need:
        raise SystemExit(
            f"{count:,} objects need ~{need / 1024**3:.1f} GiB free under {work}, "
            f"{free / 1024**3:.1f} GiB are"
        )


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median time, with every run's seconds and the highest memory of any run
    (a memory target holds in every run, not in the median one)."""
    ranked = sorted(runs, key=lambda r: r["seconds"])
    median = {**ranked[len(ranked) // 2], "all_seconds": [r["seconds"] for r in runs]}
    for key in ("main_rss_mib", "state_peak_mib"):
        median[key] = max(r[key] for r in runs)
    median["gateway_rss_mib"] = [
        max(v) for v in zip(*(r["gateway_rss_mib"] for r in runs), strict=False)
    ]
    return median


def run_count(
    work: Path,
    count: int,
    env: dict[str, str],
    warmup: int = 1,
    repeat: int = 1,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    src, ours, theirs = work / "src", work / "dst-ours", work / "dst-rclone"
    state = work / "state"
    for d in (src, ours, theirs, state):
        shutil.rmtree(d, ignore_errors=True)
    check_disk(work, count)
    generate(src, count)
    ours.mkdir()
    theirs.mkdir()
    cli = cli_command()
    common = [*REGIONS, "--journal-dir", str(state), "--no-progress", "--json", *extra]
    rclone = [
        "rclone",
        "copy",
        str(src),
        str(theirs),
        "--transfers",
        "16",
        "--checkers",
        "16",
        "--config",
        "/dev/null",
    ]
    row: dict[str, Any] = {"objects": count, "warmup": warmup, "repeat": repeat}
    ours_cp = [*cli, "cp", f"file://{src}", f"file://{ours}", *common]
    copies: dict[str, list[dict[str, Any]]] = {"ours": [], "rclone": []}
    # Warm-ups (untimed: both tools then start with the kernel's caches warm) and all but the
    # last timed copy, each tool in turn.
    for i in range(warmup + repeat - 1):
        run = timed_cli(ours_cp, env, state)
        shutil.rmtree(state, ignore_errors=True)
        _check_and_drop("ours", ours, count)
        ours.mkdir()
        theirs_run = timed(rclone, env)
        _check_and_drop("rclone", theirs, count)
        theirs.mkdir()
        if i >= warmup:
            copies["ours"].append(run)
            copies["rclone"].append(theirs_run)
    # One destination on disk at a time (a million 1 KiB files take ~4 GiB of blocks): each
    # tool copies, re-syncs, is checked and its copy deleted before the other one runs.
    row["ours"] = median_run([*copies["ours"], timed_cli(ours_cp, env, state)])
    sync = [*cli, "sync", f"file://{src}", f"file://{ours}", *common]
    row["ours_resync"] = timed_cli(sync, env, state)
    rewrite_some(src, count, 1)
    row["ours_update"] = timed_cli(sync, env, state)
    check_updated("ours", src, ours, count)
    _check_and_drop("ours", ours, count)
    row["rclone"] = median_run([*copies["rclone"], timed(rclone, env)])
    row["rclone_resync"] = timed(rclone, env)
    rewrite_some(src, count, 2)
    row["rclone_update"] = timed(rclone, env)
    check_updated("rclone", src, theirs, count)
    _check_and_drop("rclone", theirs, count)
    for key in ("ours", "rclone", "ours_resync", "rclone_resync", "ours_update", "rclone_update"):
        row[key]["objects_per_s"] = round(count / row[key]["seconds"], 1)
        row[key].pop("stdout_tail", None)
    row["ratio"] = round(row["ours"]["objects_per_s"] / row["rclone"]["objects_per_s"], 3)
    row["resync_ratio"] = round(row["rclone_resync"]["seconds"] / row["ours_resync"]["seconds"], 3)
    for d in (src, ours, theirs, state):
        shutil.rmtree(d, ignore_errors=True)
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'objects':>9} {'ours s':>8} {'rclone s':>8} {'ours obj/s':>10} {'rc obj/s':>9} "
        f"{'ratio':>6} {'CLI MiB':>8} {'gw MiB':>12} {'rc MiB':>7} {'state MiB':>9} "
        f"{'resync ours/rc s':>17} {'sync MiB':>8}"
    )
    for r in rows:
        o, c = r["ours"], r["rclone"]
        gws = "/".join(f"{v:.0f}" for v in o["gateway_rss_mib"]) or "-"
        print(
            f"{r['objects']:>9,} {o['seconds']:8.1f} {c['seconds']:8.1f} "
            f"{o['objects_per_s']:10.0f} {c['objects_per_s']:9.0f} {r['ratio']:6.2f} "
            f"{o['main_rss_mib']:8.0f} {gws:>12} {c['main_rss_mib']:7.0f} "
            f"{o['state_peak_mib']:9.1f} "
            f"{r['ours_resync']['seconds']:8.1f}/{r['rclone_resync']['seconds']:<8.1f} "
            f"{r['ours_resync']['main_rss_mib']:4.0f}+{r['ours_resync']['other_rss_mib']:<4.0f}"
        )
        if "ours_update" in r:
            print(
                f"{'':>9} sync after {UPDATED} files changed: ours "
                f"{r['ours_update']['seconds']:.2f} s, rclone {r['rclone_update']['seconds']:.2f} s"
            )
        for key in ("ours", "ours_resync", "ours_update"):
            if r.get(key, {}).get("phases"):
                print(f"{'':>9} {key}: {where_it_went(r[key])}")
    by_count = {r["objects"]: r["ours"]["seconds"] for r in rows}
    if 100_000 in by_count and 1_000_000 in by_count:
        print(f"time 1M / 100k: {by_count[1_000_000] / by_count[100_000]:.1f}x (linear: 10x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--counts", default="10000,100000", help="comma-separated counts")
    parser.add_argument("--full", action="store_true", help="also 1,000,000 objects")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed copies by each tool first, per count"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed copies by each tool, in turn, per count: the median one is shown",
    )
    parser.add_argument(
        "--no-vms",
        action="store_true",
        help="ours on the worker path (no gateway process: planner.schedule) instead of the "
        "local backend's gateway processes",
    )
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    args = parser.parse_args()
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat takes 1 or more, --warmup 0 or more")
    counts = [int(c) for c in args.counts.split(",") if c]
    if args.full:
        counts = sorted({*counts, 10_000, 100_000, 1_000_000})
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="skyplane-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    env = bench_env(work)
    rows = []
    try:
        for count in counts:
            extra = ("--no-vms",) if args.no_vms else ()
            rows.append(run_count(work, count, env, args.warmup, args.repeat, extra))
            print_table(rows[-1:])
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print_table(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "rows": rows,
                "rclone": "rclone copy --transfers 16 --checkers 16",
                "note": "2-core machine shared with other jobs; ratio = ours / rclone objects/s; "
                "resync_ratio = rclone s / ours s",
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
