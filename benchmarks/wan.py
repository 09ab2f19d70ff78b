"""The planner's own plan on an emulated 4-site WAN, through the public CLI only, vs rclone.

The netns testbed (root only) emulates four sites: the source, the destination and two relays,
each with its own tbf-shaped links (``netns.wan_grid``): the direct link is the slowest, each
relay's two links are faster and independent of the other relay's, and tbf links fill with a
connection or two. Then, exactly as a user would:

1. ``skyplane-ops profile --backend netns`` measures every pair at 4 and 64 connections into a
   scratch grid store;
2. ``skyplane-ops cp --backend netns --grid-store ...`` plans on it (the testbed's sites are the
   planning universe), provisions, copies >= 500 MB file:// -> file://, verifies and tears down;
   the whole command (listing to teardown) is timed;
3. ``rclone copy`` sends the same data over the direct link (a WebDAV server in the destination
   site's namespace, the client in the source's), in the same run.

Printed: the plan's paths with predicted vs achieved rates (and when each path's last chunk
landed), the whole copy as a fraction of the max-flow between source and destination (the
target is >= 0.8), where the whole copy's time went (interpreter start and imports, the CLI's
list/plan/provision/teardown phases, the engine's steps from ``TransferResult.steps``: listing,
manifest, data movement, commit, verification, passive record; and the rest: output and exit),
the rate while data moved, and rclone on the direct path. Writes ``benchmarks/results/wan.json``.

Usage: ``sudo .venv/bin/python benchmarks/wan.py [--mib 512] [--file-mib 8] [--direct 60
--relay 100]``; ``--grid-store DIR`` keeps the profile in DIR and reuses it on later runs (for
iterating; the figures to report profile afresh).
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
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops.provision.netns.testbed import Testbed, wan_grid  # noqa: E402

MiB = 1024 * 1024
RESULTS = REPO / "benchmarks" / "results"
SRC, DST, R1, R2 = "site:src", "site:dst", "site:relay-1", "site:relay-2"
SITES = [SRC, DST, R1, R2]


def generate(root: Path, total_mib: int, file_mib: int = 64) -> int:
    """Files of ``file_mib`` MiB (distinct contents, one urandom block reused) adding up to
    ``total_mib``; returns the bytes written."""
    root.mkdir(parents=True)
    block = os.urandom(4 * MiB)
    written = 0
    for i in range(max(1, total_mib // file_mib)):
        with open(root / f"f{i:04d}.bin", "wb") as fh:
            tag = i.to_bytes(8, "big")
            for _ in range(file_mib // 4):
                fh.write(tag + block[8:])
                written += len(block)
    return written


def max_flow_mbit(grid: dict[str, float], src: str, dst: str) -> float:
    """Max-flow between ``src`` and ``dst`` over the shaped links (OR-Tools), in Mbit/s."""
    from ortools.graph.python import max_flow

    names = sorted({n.strip() for key in grid for n in key.split("->")})
    index = {n: i for i, n in enumerate(names)}
    flow = max_flow.SimpleMaxFlow()
    for key, gbps in grid.items():
        a, b = (n.strip() for n in key.split("->"))
        flow.add_arc_with_capacity(index[a], index[b], int(gbps * 1e6))  # kbit/s, integral
    status = flow.solve(index[src], index[dst])
    if status != flow.OPTIMAL:
        raise RuntimeError(f"max-flow failed: {status}")
    return flow.optimal_flow() / 1000.0


def cli(args: list[str], env: dict[str, str], timeout: float) -> tuple[float, dict[str, Any]]:
    """Run ``skyplane-ops ARGS --json``: (wall seconds, parsed JSON stdout)."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "skyplane_ops.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"skyplane-ops {args[0]} failed ({proc.returncode}):\n{proc.stderr}")
    return seconds, json.loads(proc.stdout)


def import_seconds(env: dict[str, str]) -> float:
    """Interpreter start plus ``import skyplane_ops.cli``: what every CLI run pays first."""
    code = "import skyplane_ops.cli"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.monotonic() - t0


STEP_NAMES = {
    "list": "listing again (engine)",
    "prepare": "manifest, journal, multipart create",
    "move": "data movement (jobs start to last chunk)",
    "check_source": "source re-listed (changed objects)",
    "commit": "multipart completion",
    "verify": "verification",
    "record": "passive measurements, costs",
}


def breakdown(cp_s: float, copy: dict[str, Any], start_s: float) -> list[tuple[str, float]]:
    """The whole copy's seconds by phase: the CLI's own phases (list, plan, provision,
    transfer, teardown), the transfer split into the engine's steps, and what is left over
    (interpreter start and imports, measured apart; output and exit)."""
    phases = {k: float(v) for k, v in copy.get("phases", {}).items()}
    steps = {k: float(v) for k, v in copy.get("steps", {}).items()}
    rows = [("CLI start: interpreter + imports", start_s)]
    rows += [(f"{k} (CLI phase)", phases[k]) for k in ("list", "plan", "provision") if k in phases]
    if "transfer" in phases:
        rows += [(f"  {STEP_NAMES.get(k, k)}", v) for k, v in steps.items()]
        rows.append(
            ("  engine other (journal lock, open stores)", phases["transfer"] - sum(steps.values()))
        )
    if "teardown" in phases:
        rows.append(("teardown (CLI phase)", phases["teardown"]))
    rows.append(("CLI other: arguments, lock, output, exit", cp_s - start_s - sum(phases.values())))
    return [(name, round(secs, 2)) for name, secs in rows]


def rclone_direct(grid: dict[str, float], src: Path, dst: Path, env: dict[str, str]) -> float:
    """Seconds for ``rclone copy`` of ``src`` to a WebDAV server across the direct link."""
    testbed = Testbed.plan(f"wanrc-{uuid.uuid4().hex[:6]}", [SRC, DST], grid, scale=1.0)
    testbed.build()
    server = None
    try:
        addr = f"{testbed.address(DST)}:18080"
        dst.mkdir(parents=True)
        server = subprocess.Popen(
            testbed.exec_argv(DST, ["rclone", "serve", "webdav", str(dst), "--addr", addr]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            probe = subprocess.run(
                testbed.exec_argv(SRC, ["rclone", "lsd", ":webdav:"]),
                env={**env, "RCLONE_WEBDAV_URL": f"http://{addr}"},
                capture_output=True,
                check=False,
            )
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"rclone webdav server did not start: {probe.stderr!r}")
            time.sleep(0.2)
        t0 = time.monotonic()
        subprocess.run(
            testbed.exec_argv(
                SRC, ["rclone", "copy", str(src), ":webdav:", "--transfers", "8", "--checkers", "8"]
            ),
            env={**env, "RCLONE_WEBDAV_URL": f"http://{addr}"},
            check=True,
            capture_output=True,
        )
        return time.monotonic() - t0
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        testbed.teardown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="data to copy, MiB (512)")
    parser.add_argument("--file-mib", type=int, default=8, help="size of each file, MiB (8)")
    parser.add_argument("--chunk-mib", type=int, default=8, help="cp --chunk-mib (8)")
    parser.add_argument("--direct", type=float, default=60.0, help="direct link, Mbit/s (60)")
    parser.add_argument("--relay", type=float, default=100.0, help="relay links, Mbit/s (100)")
    parser.add_argument("--cross", type=float, default=20.0, help="relay-relay, Mbit/s (20)")
    parser.add_argument("--probe-seconds", type=float, default=3.0)
    parser.add_argument("--no-rclone", action="store_true")
    parser.add_argument(
        "--grid-store",
        metavar="DIR",
        help="profile into DIR and keep it; reuse it (no profiling) when it exists (iterating)",
    )
    args = parser.parse_args()
    if args.file_mib < 4 or args.file_mib % 4:
        parser.error("--file-mib must be a multiple of 4")
    if os.geteuid() != 0:
        print("the netns testbed needs root", file=sys.stderr)
        return 2
    grid = wan_grid(SITES, args.direct, args.relay, args.cross)
    options = json.dumps({"grid": grid, "scale": 1.0})
    work = Path(tempfile.mkdtemp(prefix="wan-bench-"))
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(work / "home"), "PYTHONPATH": str(REPO)}
    env.pop("AWS_CA_BUNDLE", None)
    # Byte-code caches as any installed package has them (without, every CLI process compiles
    # pandas/pyarrow from source: seconds of the whole copy that no user pays).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        nbytes = generate(work / "src", args.mib, args.file_mib)
        store = args.grid_store or str(work / "grid")
        backend = ["--backend", "netns", "--backend-options", options]
        profile_s, profile = 0.0, {}
        if not (args.grid_store and Path(store).exists()):
            profile_s, profile = cli(
                [
                    "profile",
                    *backend,
                    "--grid-store",
                    store,
                    "--probe-connections",
                    "4,64",
                    "--probe-duration",
                    str(args.probe_seconds),
                ],
                env,
                timeout=900,
            )
        start_s = import_seconds(env)
        cp_s, copy = cli(
            [
                "cp",
                f"file://{work / 'src'}",
                f"file://{work / 'dst'}",
                "--src-region",
                SRC,
                "--dst-region",
                DST,
                *backend,
                "--grid-store",
                store,
                "--chunk-mib",
                str(args.chunk_mib),
                "--no-progress",
            ],
            env,
            timeout=1800,
        )
        rclone_s = None
        if not args.no_rclone and shutil.which("rclone"):
            rclone_s = rclone_direct(grid, work / "src", work / "rclone-dst", env)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mbit = nbytes * 8 / 1e6
    flow = max_flow_mbit(grid, SRC, DST)
    # While data moved: from the jobs' start to the last chunk (the engine's "move" step).
    moving_s = float(
        copy.get("steps", {}).get("move")
        or copy.get("verification", {}).get("transfer_seconds")
        or copy["seconds"]
    )
    rows = []
    for path in copy.get("paths", []):
        rows.append(
            {
                "path": " -> ".join(path["regions"]),
                "share": round(path["share"], 3),
                "predicted_mbit": round(path["predicted_gbps"] * 1000, 1),
                "achieved_mbit": round(path["achieved_gbps"] * 1000, 1),
                "seconds": path.get("seconds"),
                "ratio": path["ratio"],
            }
        )
    useful = {(SRC, DST), (SRC, R1, DST), (SRC, R2, DST)}
    used = {tuple(p["regions"]) for p in copy["plan_summary"]["paths"] if p["share"] > 0}
    result: dict[str, Any] = {
        "sites": SITES,
        "links_mbit": {k: round(v * 1000, 3) for k, v in grid.items()},
        "bytes": nbytes,
        "file_mib": args.file_mib,
        "chunk_mib": args.chunk_mib,
        "max_flow_mbit": flow,
        "profile_seconds": round(profile_s, 2),
        "profile": {k: profile.get(k) for k in ("measured", "failed", "connections", "seconds")},
        "plan": copy["plan_summary"],
        "paths": rows,
        "uses_every_useful_path": useful <= used,
        "whole_copy_seconds": round(cp_s, 2),
        "whole_copy_mbit": round(mbit / cp_s, 1),
        "whole_copy_fraction_of_max_flow": round(mbit / cp_s / flow, 3),
        "run_transfer_seconds": copy["seconds"],  # listing, moving, commit, verify, record
        "moving_seconds": round(moving_s, 2),
        "moving_mbit": round(mbit / moving_s, 1),
        "moving_fraction_of_max_flow": round(mbit / moving_s / flow, 3),
        "breakdown_seconds": dict(breakdown(cp_s, copy, start_s)),
        "rclone_direct_seconds": None if rclone_s is None else round(rclone_s, 2),
        "rclone_direct_mbit": None if rclone_s is None else round(mbit / rclone_s, 1),
        "speedup_vs_rclone": None if rclone_s is None else round(rclone_s / cp_s, 2),
    }
    print(f"4-site WAN: {', '.join(f'{k} {v:g}' for k, v in result['links_mbit'].items())}")
    print(
        f"max-flow {flow:.1f} Mbit/s; data {nbytes / 1e6:.0f} MB in {args.file_mib} MiB files, "
        f"{args.chunk_mib} MiB chunks; profile {profile_s:.1f} s"
    )
    print(f"{'path':42} {'share':>6} {'predicted':>10} {'achieved':>9} {'ratio':>6} {'last':>10}")
    for row in rows:
        print(
            f"{row['path']:42} {row['share']:>6.2f} {row['predicted_mbit']:>10.1f} "
            f"{row['achieved_mbit']:>9.1f} {row['ratio'] if row['ratio'] is not None else '-':>6}"
            f" {row['seconds'] or 0:>9.1f}s"
        )
    print(
        f"whole copy (cp, listing to teardown): {cp_s:.1f} s = {result['whole_copy_mbit']} Mbit/s"
        f" = {result['whole_copy_fraction_of_max_flow']:.2f} of max-flow (target >= 0.8)"
    )
    print("  where the whole copy's time went:")
    for name, secs in result["breakdown_seconds"].items():
        print(f"    {name:48} {secs:6.2f} s")
    print(
        f"while data moved: {moving_s:.1f} s = {result['moving_mbit']} Mbit/s = "
        f"{result['moving_fraction_of_max_flow']:.2f} of max-flow"
    )
    if rclone_s is not None:
        print(
            f"rclone on the direct link: {rclone_s:.1f} s = {result['rclone_direct_mbit']} "
            f"Mbit/s; skyplane-ops whole copy is {result['speedup_vs_rclone']}x faster"
        )
    print(f"plan uses every useful path: {result['uses_every_useful_path']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "wan.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS / 'wan.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
