"""Big files of random data: ``skyplane-ops cp`` next to ``rclone copy`` in the same run.

For each size of ``--sizes`` (GiB; default ``4,32``) one file of random bytes (AES-CTR
keystream from ``openssl``, not sparse, no repeats) is written once under ``--work``, then
copied ``file:// -> file://`` on each network of ``--nets``:

* ``loopback``: the CLI with the local backend (one gateway process per region on 127.0.0.1)
  next to ``rclone copy --transfers 16 --checkers 16`` between the two folders;
* ``wan`` (root): the CLI with the netns backend, its source and destination gateways in two
  network namespaces joined by a tbf-shaped veth link of ``--wan-mbit`` Mbit/s each way, next to
  rclone across a link shaped the same way (``bigfile_wan.py``: ``rclone serve webdav`` in the
  destination's namespace, ``rclone copy`` in the source's). rclone cannot run in two places
  itself, and a WebDAV server writing straight to the destination folder is its lightest way
  to receive across a link: the same bytes cross the same shaped link, from the same disk to
  the same disk. Our time is the whole command (planning, provisioning the two namespaces and
  gateways, teardown); rclone's starts once its server answers;
* ``relays`` (root): the emulated WAN of ``wan.py``: the same direct link, plus two relay sites
  with links of ``--relay-mbit`` to both ends (and 20 Mbit/s between them). Ours plans on its
  profile of the four sites and may split the file over the relays; rclone, a point-to-point
  tool, copies over the direct link exactly as in ``wan``.

Gateways run with a byte budget of ``--buffer-mib``; checksums and end verification are on,
as a user gets them. Reported per run: seconds, MB/s, peak RSS of the CLI (or the rclone
client) and of every gateway (VmRSS and anonymous memory, sampled every 50 ms from
``/proc``) against the target "byte budget + 150 MiB". Only one copy exists at a time: ours
is deleted before rclone runs, and the source after its last run (peak disk: 2x the size).

Usage: ``python benchmarks/bigfile.py [--sizes 4,32] [--nets loopback,wan,relays]
[--buffer-mib 512] [--wan-mbit 800] [--relay-mbit 400] [--repeat 1] [--warmup 1] [--cold]
[--ours-args ARGS] [--work DIR]``.

- ``--repeat N``: the tools alternate N times, who goes first alternating too, and the median
  run of each is shown (all times and the highest RSS of any run are kept).
- ``--warmup N`` rounds run first and are not counted: right after the source is written,
  copying it ran up to 1.8x slower for both tools for a few runs (ours 14.4 s, then 10.7 and
  8.8; rclone 11.2, then 8.2), so without them whichever tool went first paid most.
- ``--cold`` (root) empties the page cache before every run: each tool then reads a source that
  is not cached and writes into a cache holding nothing of the run before, the usual case for
  a big file. Without it the source stays cached.
- Before every run of either tool, dirty pages are written back and the free memory is left to
  settle (see ``_settle``): the same state for both.

Writes ``benchmarks/results/bigfile.json``.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bigfile_wan import SRC_SITE, WAN_DST, net_grid, profile, rclone_over_link, wan_backend
from scale import REGIONS, RESULTS, bench_env, cli_command, timed, timed_cli, where_it_went

MiB = 1024 * 1024
SETTLE_S = 5.0  # past the kernel's free page reporting delay (2 s) and its batches
GiB = 1024 * MiB


def generate(path: Path, gib: float) -> int:
    """``gib`` GiB of AES-128-CTR keystream under a random key (random, not sparse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    total = int(gib * GiB)
    key, iv = os.urandom(16).hex(), os.urandom(16).hex()
    enc = ["openssl", "enc", "-aes-128-ctr", "-K", key, "-iv", iv, "-nosalt", "-in", "/dev/zero"]
    with open(path, "wb") as out:
        gen = subprocess.Popen(enc, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert gen.stdout is not None
        subprocess.run(["head", "-c", str(total)], stdin=gen.stdout, stdout=out, check=True)
        gen.stdout.close()
        gen.kill()
        gen.wait()
    if path.stat().st_size != total:
        raise RuntimeError(f"generated {path.stat().st_size} bytes, wanted {total}")
    return total


def _check(side: str, copy: Path, nbytes: int, run: dict[str, Any]) -> None:
    """The copy is whole; then it is deleted (only one copy on disk at a time)."""
    size = copy.stat().st_size if copy.exists() else -1
    shutil.rmtree(copy.parent, ignore_errors=True)
    if size != nbytes:
        raise RuntimeError(f"{side}: the copy has {size} bytes, not {nbytes}")
    run.pop("stdout_tail", None)
    run["mb_s"] = round(nbytes / 1e6 / run["seconds"], 1)
    run["gbps"] = round(nbytes * 8 / 1e9 / run["seconds"], 3)


def _settle(cold: bool) -> None:
    """The same memory state before either tool runs: dirty pages written back (with
    ``cold``, the page cache emptied, root only), then :data:`SETTLE_S` seconds for the
    kernel's free page reporting.

    On a VM with free page reporting (``dmesg``: "Free page reporting enabled"; this machine,
    a nested VM, has it) memory freed by the previous copy is handed back to the host ~2 s
    later, and writing into a handed-back page costs up to 8x a reused one (4 GiB into the
    page cache: 1.0 s right after a 4 GiB file was deleted, 7.5-9 s six seconds later).
    Without the wait, a tool that starts writing at once reuses the previous copy's pages and
    one that plans first does not: each run now starts from handed-back memory.
    """
    os.sync()
    if cold:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    time.sleep(SETTLE_S)


def run_net(net: str, src: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Ours, then rclone, on one network; each copy checked and deleted before the next."""
    env = bench_env(work)
    ours, theirs, state = work / "dst-ours", work / "dst-rclone", work / "state"
    nbytes = (src / "big.bin").stat().st_size
    row: dict[str, Any] = {"net": net, "gib": round(nbytes / GiB, 2)}
    cli = [*cli_command(), "cp", f"file://{src}", f"file://{ours}"]
    cli += ["--journal-dir", str(state), "--no-progress", "--json", *args.ours_args.split()]
    if net == "loopback":
        cli += [*REGIONS, "--backend-options", json.dumps({"buffer_mib": args.buffer_mib})]
    else:
        links = net_grid(net, args.wan_mbit, args.relay_mbit)
        store = work / f"grid-{net}"
        if not store.exists():
            profile(links, store, env)
        cli += wan_backend(links, args.buffer_mib, store)
        row["link_mbit"] = args.wan_mbit
        if net == "relays":
            row["relay_mbit"] = args.relay_mbit

    def run_ours() -> dict[str, Any]:
        ours.mkdir(parents=True)
        run = timed_cli(cli, env, state)
        shutil.rmtree(state, ignore_errors=True)
        _check("ours", ours / "big.bin", nbytes, run)
        return run

    def run_rclone() -> dict[str, Any]:
        theirs.mkdir(parents=True)
        if net == "loopback":
            rclone = ["rclone", "copy", str(src), str(theirs), "--transfers", "16"]
            rclone += ["--checkers", "16", "--config", "/dev/null"]
            run = timed(rclone, env)
        else:
            run = rclone_over_link(args.wan_mbit, src, theirs, env)
        _check("rclone", theirs / "big.bin", nbytes, run)
        return run

    tools = {"ours": run_ours, "rclone": run_rclone}
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "rclone": []}
    for i in range(args.warmup + args.repeat):
        # Alternating, so load from others falls on both alike; who goes first alternates too
        # (a freshly written source runs slower for a while, whoever reads it first).
        for side in sorted(tools, reverse=i % 2 == 1):
            _settle(args.cold)
            run = tools[side]()
            if i >= args.warmup:
                runs[side].append(run)
    for side, all_runs in runs.items():  # the median run (by seconds), and every time
        ranked = sorted(all_runs, key=lambda r: r["seconds"])
        row[side] = {**ranked[len(ranked) // 2], "all_seconds": [r["seconds"] for r in all_runs]}
        if side == "ours":  # the byte budget must hold in every run, not only the median
            row[side]["gateway_rss_mib"] = [
                max(v) for v in zip(*(r["gateway_rss_mib"] for r in all_runs), strict=False)
            ]
            row[side]["gateway_anon_mib"] = [
                max(v) for v in zip(*(r["gateway_anon_mib"] for r in all_runs), strict=False)
            ]
    row["ratio"] = round(row["rclone"]["seconds"] / row["ours"]["seconds"], 3)
    limit = args.buffer_mib + 150
    row["gateway_limit_mib"] = limit
    row["within_limit"] = all(v <= limit for v in row["ours"]["gateway_rss_mib"])
    return row


def paths_line(paths: list[dict[str, Any]]) -> str:
    """Each path of a run: its hops (site names without ``site:``), share and achieved Mbit/s."""
    return ", ".join(
        f"{'>'.join(r.removeprefix('site:') for r in p['regions'])} "
        f"{p['share']:.2f} at {(p['achieved_gbps'] or 0) * 1000:.0f} Mbit/s"
        for p in paths
    )


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'net':>9} {'file':>6} {'ours s':>7} {'rc s':>7} {'ours MB/s':>9} {'rc MB/s':>8} "
        f"{'x rc':>5} {'CLI MiB':>7} {'gateways RSS (anon) MiB':>26} {'limit':>5} {'rc MiB':>6}"
    )
    for row in rows:
        o, c = row["ours"], row["rclone"]
        gws = "/".join(
            f"{v:.0f}({a:.0f})"
            for v, a in zip(o["gateway_rss_mib"], o["gateway_anon_mib"], strict=False)
        )
        print(
            f"{row['net']:>9} {row['gib']:>4.0f}Gi {o['seconds']:7.1f} {c['seconds']:7.1f} "
            f"{o['mb_s']:9.1f} {c['mb_s']:8.1f} {row['ratio']:5.2f} {o['main_rss_mib']:7.0f} "
            f"{gws:>26} {row['gateway_limit_mib']:5d} {c['main_rss_mib']:6.0f}"
        )
        if o.get("phases"):
            print(f"{'':>17} ours: {where_it_went(o)}")
        if len(o.get("paths", [])) > 1:
            print(f"{'':>17} paths: {paths_line(o['paths'])}")
        if len(o.get("all_seconds", [])) > 1:
            print(f"{'':>17} all runs (s): ours {o['all_seconds']}, rclone {c['all_seconds']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="4,32", help="file sizes, GiB, comma-separated")
    parser.add_argument(
        "--nets", default="loopback,wan,relays", help="loopback, wan, relays (the WANs: root)"
    )
    parser.add_argument("--buffer-mib", type=int, default=512, help="gateway byte budget")
    parser.add_argument("--wan-mbit", type=float, default=800.0, help="direct link, Mbit/s")
    parser.add_argument(
        "--relay-mbit", type=float, default=400.0, help="each relay link (relays), Mbit/s"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each tool per case")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed runs of each tool first (like hyperfine)"
    )
    parser.add_argument(
        "--cold", action="store_true", help="empty the page cache before every run (root)"
    )
    parser.add_argument(
        "--ours-args", default="", help="more arguments for our CLI, e.g. '--connections 2'"
    )
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--out", default=str(RESULTS / "bigfile.json"))
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",") if s]
    nets = [n for n in args.nets.split(",") if n]
    if set(nets) - {"loopback", "wan", "relays"}:
        parser.error("--nets takes loopback, wan and relays")
    if set(nets) & {"wan", "relays"} and os.geteuid() != 0:
        parser.error("the netns WANs need root")
    if args.cold and os.geteuid() != 0:
        parser.error("--cold empties the page cache: it needs root")
    base = Path(args.work) if args.work else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for gib in sizes:
        need = 2 * gib * GiB + GiB
        if shutil.disk_usage(base).free < need:
            raise SystemExit(f"{gib} GiB needs {need / GiB:.0f} GiB free under {base}")
        work = Path(tempfile.mkdtemp(prefix="skyplane-big-", dir=base))
        try:
            generate(work / "src" / "big.bin", gib)
            for net in nets:
                rows.append(run_net(net, work / "src", work, args))
                print_table(rows[-1:])
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print_table(rows)
    out = {
        "buffer_mib": args.buffer_mib,
        "cold": args.cold,
        "wan_site": [SRC_SITE, WAN_DST],
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
