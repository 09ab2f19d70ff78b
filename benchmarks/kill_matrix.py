"""The kill matrix with real processes: source, relay, sink, CLI x SIGKILL, SIGSTOP, SIGTERM.

Each case copies a folder through ``src -> relay -> sink`` gateway processes (local backend),
signals one process once a quarter of the bytes are journaled, records how the run ended and
how many seconds after the signal a clear error came (for the CLI: when its gateways were all
gone), checks that nothing was lost (source unchanged, every destination object its old or
its new version, never partial), then resumes on a fresh fleet and counts bytes that had been
journaled but were read again. By default with the product's defaults (hop timeout 30 s,
lease 60 s), so the figures are the ones a user gets; ``--quick`` uses 3 s / 4 s as the tests.

Usage: ``python benchmarks/kill_matrix.py [--quick] [--only relay:SIGSTOP ...]``.
Writes ``benchmarks/results/kill_matrix.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops.provision.lease import LEASE_S  # noqa: E402
from skyplane_ops.testing.gateways import KillCase, cli_kill_case, gateway_kill_case  # noqa: E402
from skyplane_ops.transfer.dispatch import DispatchOptions  # noqa: E402

TARGETS = ("source", "relay", "sink", "cli")
SIGNALS = ("SIGKILL", "SIGSTOP", "SIGTERM")


def run_case(target: str, sig: str, hop_timeout: float, lease_s: float, big: int) -> KillCase:
    with tempfile.TemporaryDirectory() as tmp:
        if target == "cli":
            return cli_kill_case(
                sig, Path(tmp), hop_timeout=hop_timeout, lease_s=lease_s, rate_bps=1.5e6, big=big
            )
        return gateway_kill_case(
            target, sig, Path(tmp), hop_timeout=hop_timeout, lease_s=lease_s, rate_bps=1.5e6,
            big=big,
        )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="hop timeout 3 s, lease 4 s")
    ap.add_argument("--only", nargs="*", default=[], help="cases as target:SIGNAL")
    ap.add_argument(
        "--big",
        type=int,
        default=6,
        help="8 MiB objects to copy: more than the kernel socket buffers and byte budgets of "
        "the three gateways hold, so a stopped process still has work when the hop times out",
    )
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="kill-matrix-home-")
    os.environ["SKYPLANE_OPS_HOME"] = home  # fleets, secrets, journals: never the user's
    hop_timeout = 3.0 if args.quick else DispatchOptions().hop_timeout
    lease_s = 4.0 if args.quick else LEASE_S
    cases = [(t, s) for t in TARGETS for s in SIGNALS]
    if args.only:
        cases = [c for c in cases if f"{c[0]}:{c[1]}" in args.only]
    rows: list[dict[str, Any]] = []
    print(f"hop timeout {hop_timeout:.0f} s, lease {lease_s:.0f} s")
    print(f"{'case':<16} {'outcome':<17} {'s to error':>10} {'gw gone s':>9} "
          f"{'resent B':>9}  nothing lost")  # fmt: skip
    for target, sig in cases:
        case = run_case(target, sig, hop_timeout, lease_s, args.big)
        row = case.row()
        rows.append(row)
        print(
            f"{target + ' ' + sig:<16} {case.outcome:<17} "
            f"{_num(case.seconds_to_error):>10} {_num(case.gateways_left_after_s):>9} "
            f"{_num(case.bytes_resent_on_resume):>9}  "
            f"{'yes' if not case.problems else '; '.join(case.problems)}",
            flush=True,
        )
    out = REPO / "benchmarks" / "results" / "kill_matrix.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"hop_timeout_s": hop_timeout, "lease_s": lease_s, "cases": rows}, indent=2)
    )
    print(f"wrote {out}")
    return 0 if all(not r["problems"] for r in rows) else 1


def _num(v: float | int | None) -> str:
    return "-" if v is None else f"{v:g}"


if __name__ == "__main__":
    sys.exit(main())
