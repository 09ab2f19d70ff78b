"""``--bwlimit`` accuracy on loopback and on the netns WAN: the rate a capped copy achieves,
and after a change.

A folder of ``--mib`` MiB (4 MiB files, 1 MiB parts) is copied through a local fleet
(``--relay``: source -> relay -> sink; ``--wan``: the netns WAN of the tests, root only, with
two paths: 90% through a relay over 400 Mbit/s links, 10% over the 25 Mbit/s direct link, so
the cap is split over paths and hops; ``--change-via-state``: the change goes through a
``file://`` state store and the run's ``CapFollower``, as from another host) under each cap of
``--caps``; the achieved rate is the
slope of the bytes the run reports done between 10% and 90% of them (the start and the end
are a job's start and its last chunks, not the cap). The last row starts at the first cap
and changes to the second (``api.set_bwlimit``) at 35% of the bytes; its rates are measured
before (5-33%) and after (50-95%) the change.

Usage: ``python benchmarks/bwlimit.py [--mib 256] [--caps 25MiB 100Mbit 50MiB] [--relay |
--wan] [--change-via-state]``. Writes ``benchmarks/results/bwlimit[-wan].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops import api  # noqa: E402
from skyplane_ops.provision.netns.provisioner import NetnsProvisioner  # noqa: E402
from skyplane_ops.testing.multicast import WAN_RELAY, WAN_SCALE, WAN_SRC, wan_grid  # noqa: E402
from skyplane_ops.testing.transfer import (  # noqa: E402
    DST,
    RELAY,
    SRC,
    copy_dirs,
    local_fleet,
    make_plan,
    write_dataset,
)
from skyplane_ops.transfer.bwlimit import live_path, parse_rate  # noqa: E402
from skyplane_ops.transfer.bwlimit_remote import CapFollower  # noqa: E402
from skyplane_ops.transfer.progress import Progress  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
MiB = 1 << 20
WAN_DST = "netns:X"


def make_wan_plan() -> api.TransferPlan:
    """Two paths on the netns WAN: 90% through the relay, 10% direct (under its 25 Mbit/s at
    every cap up to 30 MiB/s)."""
    return make_plan([WAN_SRC, WAN_RELAY, WAN_DST], [WAN_SRC, WAN_DST], shares=[0.9, 0.1])


@contextmanager
def netns_fleet(plan: api.TransferPlan) -> Iterator[tuple[Any, api.GatewayFleet]]:
    prov = NetnsProvisioner(wan_grid(), scale=WAN_SCALE, idle_timeout=120)
    fleet = prov.provision(plan.vms, transfer_id=f"bw-{uuid.uuid4().hex[:8]}")
    try:
        yield prov, fleet
    finally:
        prov.deprovision(fleet)


def slope(points: list[tuple[float, int]], lo: float, hi: float) -> float:
    t0, b0 = next(p for p in points if p[1] >= lo)
    t1, b1 = next(p for p in points if p[1] >= hi)
    return (b1 - b0) / (t1 - t0)


def run(
    root: Path, mib: int, cap: str, change_to: str | None, mode: str, via_state: bool = False
) -> dict[str, Any]:
    src, dst = root / "src", root / f"dst-{uuid.uuid4().hex[:6]}"
    dst.mkdir()
    if not src.exists():
        write_dataset(src, {f"f{i:03d}": 4 * MiB for i in range(mib // 4)})
    total = mib * MiB
    tid = f"bw-{uuid.uuid4().hex[:8]}"
    points: list[tuple[float, int]] = []
    changed: list[int] = []
    state_uri = (root / "state").as_uri()

    paths: dict[str, float] = {}

    def seen(p: Progress) -> None:
        points.append((time.monotonic(), p.bytes_done))
        paths.update(p.path_gbps)
        if change_to and not changed and p.bytes_done >= 0.35 * total:
            changed.append(len(points))
            api.set_bwlimit(tid, change_to, state_uri=state_uri if via_state else None)

    if mode == "wan":
        plan, fleets = make_wan_plan(), netns_fleet
    else:
        plan = make_plan([SRC, RELAY, DST] if mode == "relay" else [SRC, DST])
        fleets = lambda p: local_fleet(p, hooks=False)  # noqa: E731
    with ExitStack() as stack:
        _, fleet = stack.enter_context(fleets(plan))
        if via_state:
            state = api.TransferState(state_uri, tid)
            stack.enter_context(CapFollower(state, live_path(tid)))
        result = copy_dirs(
            plan, fleet, (src, dst, root / "j"), part_size=MiB, bwlimit=cap,
            transfer_id=tid, progress=seen,
        )  # fmt: skip
    if not result.verified:
        raise RuntimeError(f"not verified: {result.verification}")
    row: dict[str, Any] = {"cap": cap, "cap_Bps": parse_rate(cap), "mode": mode, "MiB": mib}
    row["path_MBps"] = {k: v * 1e9 / 8 / 1e6 for k, v in paths.items()}  # averaged over the run
    if change_to:
        cut = changed[0]
        row["achieved_Bps"] = slope(points[:cut], 0.05 * total, 0.33 * total)
        row["changed_to"] = change_to
        row["changed_via"] = "state store" if via_state else "live file"
        row["changed_Bps"] = parse_rate(change_to)
        row["after_change_Bps"] = slope(points[cut:], 0.5 * total, 0.95 * total)
    else:
        row["achieved_Bps"] = slope(points, 0.1 * total, 0.9 * total)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument(
        "--caps", nargs="+", help="default 25MiB 100Mbit 50MiB; --wan: 8MiB 100Mbit 24MiB"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--relay", action="store_true", help="source -> relay -> sink")
    where.add_argument("--wan", action="store_true", help="the netns WAN with a relay (root)")
    parser.add_argument(
        "--change-via-state", action="store_true", help="the change through a state store"
    )
    args = parser.parse_args()
    mode = "wan" if args.wan else "relay" if args.relay else "loopback"
    via = args.change_via_state
    # On the WAN the direct path carries 10% of the cap over a 25 Mbit/s link.
    args.caps = args.caps or (
        ["8MiB", "100Mbit", "24MiB"] if args.wan else ["25MiB", "100Mbit", "50MiB"]
    )
    root = Path(tempfile.mkdtemp(prefix="skyplane-bwlimit-"))
    os.environ.setdefault("SKYPLANE_OPS_HOME", str(root / "home"))
    try:
        rows = [run(root, args.mib, cap, None, mode) for cap in args.caps]
        rows.append(run(root, args.mib, args.caps[0], args.caps[-1], mode, via))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"mode: {mode}, {args.mib} MiB per row")
    print(f"{'cap':>8} {'MB/s cap':>9} {'MB/s got':>9} {'error':>7}   after a change")
    for r in rows:
        err = r["achieved_Bps"] / r["cap_Bps"] - 1
        line = f"{r['cap']:>8} {r['cap_Bps'] / 1e6:9.2f} {r['achieved_Bps'] / 1e6:9.2f} {err:+7.1%}"
        if "changed_to" in r:
            err2 = r["after_change_Bps"] / r["changed_Bps"] - 1
            line += (
                f"   -> {r['changed_to']} ({r['changed_via']}): {r['changed_Bps'] / 1e6:.2f} "
                f"cap, {r['after_change_Bps'] / 1e6:.2f} got ({err2:+.1%})"
            )
        print(line)
    for name, rate in rows[0]["path_MBps"].items():
        print(f"  first row, path {name}: {rate:.2f} MB/s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "bwlimit-wan.json" if mode == "wan" else "bwlimit.json"
    (RESULTS / name).write_text(json.dumps({"mode": mode, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
