"""One big file of random data: ``skyplane-ops cp`` next to ``rclone copy`` in the same run.

A file of ``--gib`` GiB (default 4; random bytes, not sparse) is written under ``--work``, then
copied ``file:// -> file://`` by the CLI (local backend, one gateway per region, gateways started
with a byte budget of ``--buffer-mib``, checksums and end verification on) and by
``rclone copy --transfers 16 --checkers 16``. Reported: seconds, Gbit/s, peak RSS of the CLI and
of every gateway (VmRSS and anonymous memory, sampled every 50 ms from ``/proc``) against the
target "byte budget + 150 MiB".

Usage: ``python benchmarks/bigfile.py [--gib 4] [--buffer-mib 512] [--work DIR]``.
Writes ``benchmarks/results/bigfile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import REGIONS, RESULTS, bench_env, cli_command, timed

MiB = 1024 * 1024


def generate(path: Path, gib: float) -> int:
    """``gib`` GiB of random data (64 MiB of urandom, each block tagged so none repeats)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = bytearray(os.urandom(64 * MiB))
    total = int(gib * 1024) * MiB
    with open(path, "wb") as fh:
        for i in range(total // len(block)):
            block[:8] = i.to_bytes(8, "big")
            fh.write(block)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--buffer-mib", type=int, default=512, help="gateway byte budget")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--out", default=str(RESULTS / "bigfile.json"))
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="skyplane-big-"))
    env = bench_env(work)
    src, ours, theirs = work / "src", work / "dst-ours", work / "dst-rclone"
    row: dict[str, Any] = {"gib": args.gib, "buffer_mib": args.buffer_mib}
    try:
        nbytes = generate(src / "big.bin", args.gib)
        ours.mkdir(parents=True, exist_ok=True)
        theirs.mkdir(parents=True, exist_ok=True)
        cli = [*cli_command(), "cp", f"file://{src}", f"file://{ours}"]
        cli += [*REGIONS, "--journal-dir", str(work / "state"), "--no-progress", "--json"]
        cli += ["--backend-options", json.dumps({"buffer_mib": args.buffer_mib})]
        row["ours"] = timed(cli, env, work / "state")
        rclone = ["rclone", "copy", str(src), str(theirs), "--transfers", "16"]
        row["rclone"] = timed([*rclone, "--checkers", "16", "--config", "/dev/null"], env)
        for side, dst in (("ours", ours), ("rclone", theirs)):
            if (dst / "big.bin").stat().st_size != nbytes:
                raise RuntimeError(f"{side}: the copy has the wrong size")
            row[side].pop("stdout_tail", None)
            row[side]["gbps"] = round(nbytes * 8 / 1e9 / row[side]["seconds"], 3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row["ratio"] = round(row["ours"]["gbps"] / row["rclone"]["gbps"], 3)
    limit = args.buffer_mib + 150
    row["gateway_limit_mib"] = limit
    row["within_limit"] = all(v <= limit for v in row["ours"]["gateway_rss_mib"])
    o, c = row["ours"], row["rclone"]
    print(
        f"{'file':>8} {'ours s':>7} {'rclone s':>8} {'ours Gbit/s':>11} {'rc Gbit/s':>9} "
        f"{'ratio':>6} {'CLI MiB':>8} {'gw MiB (anon)':>22} {'limit':>6} {'rc MiB':>7}"
    )
    gws = "/".join(
        f"{v:.0f}({a:.0f})"
        for v, a in zip(o["gateway_rss_mib"], o["gateway_anon_mib"], strict=False)
    )
    print(
        f"{args.gib:>5.1f}GiB {o['seconds']:7.1f} {c['seconds']:8.1f} {o['gbps']:11.2f} "
        f"{c['gbps']:9.2f} {row['ratio']:6.2f} {o['main_rss_mib']:8.0f} {gws:>22} "
        f"{limit:6d} {c['main_rss_mib']:7.0f}"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
