"""One source to three local destinations: ``api.copy`` with three destinations (one plan, one
fleet, a copy per destination: ``FanoutRun``) against three separate ``api.copy`` runs and
three ``rclone copy`` runs of the same data.

The dataset (``--mib`` MiB in 16 files, default 256) is generated in a temporary folder and
removed afterwards. Local gateways, checksums and end verification on, as a user gets them.
Reported per way: seconds, the bytes read from the source and those its gateway sent
(FanoutRun's tree pass reads each byte once; on local gateways the planner's plan is usually
a star, the source sending to each destination itself: ``multicast.py --wan`` shows a relay
tree), and FanoutRun's time against the slowest of the three single copies. Figures on a
loaded machine are indicative.

Usage: ``python benchmarks/fanout.py [--mib N]``. Writes ``benchmarks/results/fanout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops import api  # noqa: E402
from skyplane_ops.sequence.fanout import FanoutRun  # noqa: E402
from skyplane_ops.testing.transfer import read_tree  # noqa: E402
from skyplane_ops.transfer.request import TransferRequest  # noqa: E402

MiB = 1024 * 1024
RESULTS = REPO / "benchmarks" / "results"
SRC_REGION = "aws:us-east-1"
DST_REGIONS = ["aws:eu-west-1", "aws:eu-central-1", "gcp:europe-west4"]
FANOUT, SEPARATE = "api.copy, 3 destinations (FanoutRun)", "3 separate api.copy"


def generate(root: Path, total_mib: int) -> None:
    root.mkdir(parents=True)
    size = max(1, total_mib * MiB // 16)
    for i in range(16):
        (root / f"f{i:02d}.bin").write_bytes(os.urandom(size))


def fanout(src: Path, dsts: list[Path], home: Path) -> dict[str, Any]:
    """``FanoutRun`` (what ``api.copy`` with three destinations runs), for its tree pass's
    source counters."""
    request = TransferRequest.build(
        f"file://{src}",
        [f"file://{d}" for d in dsts],
        src_region=SRC_REGION,
        dst_region=DST_REGIONS,
        journal_dir=str(home / "journal-fanout"),
    )
    run = FanoutRun(request)
    t0 = time.perf_counter()
    result = run.run()
    seconds = time.perf_counter() - t0
    assert result.status == "ok" and run.tree is not None
    return {
        "seconds": seconds,
        "source_bytes": run.tree.source_bytes_read,
        "source_sent": run.tree.source_bytes_sent,
        "tree_pass_seconds": run.tree.seconds,
        "tree_pass_destinations": len(run.tree.served),
        "chunks_sent_after_the_pass": sum(r.chunks for r in result.results.values()),
    }


def separate(src: Path, dsts: list[Path], home: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    nbytes, slowest = 0, 0.0
    for d, region in zip(dsts, DST_REGIONS, strict=True):
        t1 = time.perf_counter()
        one = api.copy(
            f"file://{src}",
            f"file://{d}",
            src_region=SRC_REGION,
            dst_region=region,
            journal_dir=str(home / "journal-separate"),
        )
        slowest = max(slowest, time.perf_counter() - t1)
        nbytes += one.bytes
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "source_bytes": nbytes, "source_sent": nbytes, "slowest": slowest}


def rclone(src: Path, dsts: list[Path]) -> dict[str, Any]:
    t0 = time.perf_counter()
    for d in dsts:
        subprocess.run(
            ["rclone", "copy", str(src), str(d), "--transfers", "8", "--config", "/dev/null"],
            check=True,
            capture_output=True,
        )
    seconds = time.perf_counter() - t0
    nbytes = sum(p.stat().st_size for p in src.iterdir()) * 3
    return {"seconds": seconds, "source_bytes": nbytes, "source_sent": nbytes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyplane-fanout-"))
    os.environ.setdefault("SKYPLANE_OPS_HOME", str(tmp / "home"))
    rows: dict[str, dict[str, Any]] = {}
    try:
        src = tmp / "src"
        generate(src, args.mib)
        data = read_tree(src)
        for name, run in (
            (FANOUT, lambda d: fanout(src, d, tmp)),
            (SEPARATE, lambda d: separate(src, d, tmp)),
            ("3 x rclone copy", lambda d: rclone(src, d)),
        ):
            dsts = [tmp / f"{len(rows)}-{i}" for i in range(3)]
            rows[name] = run(dsts)
            assert all(read_tree(d) == data for d in dsts), name
            for d in dsts:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = args.mib * MiB
    print(f"one source -> three local destinations, {args.mib} MiB in 16 files")
    print(f"  {'way':<40} {'seconds':>8} {'source reads':>13} {'source sends':>13}")
    for name, r in rows.items():
        print(
            f"  {name:<40} {r['seconds']:>8.2f} {r['source_bytes'] / total:>12.2f}x"
            f" {r['source_sent'] / total:>12.2f}x"
        )
    fan, sep = rows[FANOUT], rows[SEPARATE]
    print(
        f"  FanoutRun against the slowest single api.copy ({sep['slowest']:.2f} s): "
        f"{fan['seconds'] / sep['slowest']:.2f}x the whole run (its multicast plan and a fleet "
        f"started after it included), its tree pass {fan['tree_pass_seconds']:.2f} s "
        f"({fan['tree_pass_seconds'] / sep['slowest']:.2f}x)"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"mib": args.mib, "files": 16, "destinations": 3, "rows": rows}
    (RESULTS / "fanout.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
