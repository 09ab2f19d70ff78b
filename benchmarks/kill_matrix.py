"""The kill matrix with real processes: source, relay, sink, CLI x SIGKILL, SIGSTOP, SIGTERM.

Each case copies a folder through ``src -> relay -> sink`` gateway processes (local backend),
signals one process once a quarter of the bytes are journaled, records how the run ended and
how many seconds after the signal a clear error came (for the CLI: when its gateways were all
gone), checks that nothing was lost (source unchanged, every destination object its old or
its new version, never partial), then resumes on a fresh fleet and counts bytes that had been
journaled but were read again. By default with the product's defaults (hop timeout 30 s,
lease 60 s), so the figures are the ones a user gets; ``--quick`` uses 3 s / 4 s as the tests.

``--move`` runs the matrix for ``mv`` instead (issue 39): SIGKILL of the source, relay and
sink gateways while bytes move, and of the CLI while bytes move, while it commits and while it
deletes sources; after each kill no object may be missing from both sides, and a re-run must
finish the move (see ``skyplane_ops/testing/move_kills.py``).

Usage: ``python benchmarks/kill_matrix.py [--quick] [--move] [--only relay:SIGSTOP ...]``.
Writes ``benchmarks/results/kill_matrix.json`` (``kill_matrix_move.json`` with ``--move``).
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
from skyplane_ops.testing.move_kills import (  # noqa: E402
    CLI_STEPS,
    move_cli_kill_case,
    move_gateway_kill_case,
)
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
    ap.add_argument("--move", action="store_true", help="the SIGKILL matrix of `mv`")
    ap.add_argument("--only", nargs="*", default=[], help="cases as target:SIGNAL (target:step)")
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
    if args.move:
        return move_matrix(hop_timeout, lease_s, args.big, args.only)
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


MOVE_CASES = [*((t, "bytes") for t in TARGETS[:3]), *(("cli", s) for s in CLI_STEPS)]


def move_matrix(hop_timeout: float, lease_s: float, big: int, only: list[str]) -> int:
    """SIGKILL each process of an ``mv`` at each step; print and write the table."""
    cases = [c for c in MOVE_CASES if not only or f"{c[0]}:{c[1]}" in only]
    rows: list[dict[str, Any]] = []
    print(f"mv, SIGKILL; hop timeout {hop_timeout:.0f} s, lease {lease_s:.0f} s")
    print(f"{'case':<14} {'outcome':<10} {'caught':<6} {'left at src':>11}  "
          f"missing from both / re-run finished")  # fmt: skip
    for target, step in cases:
        with tempfile.TemporaryDirectory() as tmp:
            if target == "cli":
                case = move_cli_kill_case(
                    step, Path(tmp), lease_s=lease_s, rate_bps=1.5e6, big=big, big_mib=8
                )
            else:
                case = move_gateway_kill_case(
                    target, Path(tmp), hop_timeout=hop_timeout, lease_s=lease_s, rate_bps=1.5e6,
                    big=big, big_mib=8,
                )  # fmt: skip
        rows.append(case.row())
        verdict = "none / yes" if not case.problems else "; ".join(case.problems)
        print(
            f"{target + ' ' + step:<14} {case.outcome:<10} {'yes' if case.caught else 'no':<6} "
            f"{f'{case.left_at_source}/{case.objects}':>11}  {verdict}",
            flush=True,
        )
    out = REPO / "benchmarks" / "results" / "kill_matrix_move.json"
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
