"""``skyplane-ops grid``: inspect the measured throughput grid versions in a grid store.

``show`` prints the latest measurement per pair with its age and a STALE flag; ``diff`` lists
the pairs whose rate moved by more than ``--threshold`` percent between two versions;
``versions`` lists the versions; ``export`` writes a measured-grid file for
``skyplane-ops plan --measured-grid``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "grid", help="show, diff and export measured throughput grids", description=__doc__
    )
    sub = p.add_subparsers(dest="grid_command", metavar="ACTION", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", default=None, metavar="URI", help="grid store (path or URI)")
        q.add_argument("--store-options", default="{}", metavar="JSON")
        q.add_argument("--json", action="store_true", help="print JSON")

    show = sub.add_parser("show", help="latest rate per pair, its age and staleness")
    common(show)
    show.add_argument("--version", default=None, help="a version (default: latest)")
    show.add_argument("--stale-after", default="3d", help="flag pairs older than this (3d)")
    show.add_argument(
        "--pending", action="store_true", help="include measurements not yet published"
    )
    show.set_defaults(func=run_show)

    diff = sub.add_parser("diff", help="pairs that moved by more than a threshold")
    common(diff)
    diff.add_argument("version_a")
    diff.add_argument("version_b")
    diff.add_argument("--threshold", type=float, default=10.0, help="percent (10)")
    diff.set_defaults(func=run_diff)

    versions = sub.add_parser("versions", help="list versions, oldest first")
    common(versions)
    versions.set_defaults(func=run_versions)

    export = sub.add_parser("export", help="write the latest grid as .parquet or .csv")
    common(export)
    export.add_argument("output", help="file to write (.parquet or .csv)")
    export.add_argument("--version", default=None)
    export.set_defaults(func=run_export)


def _store(args: argparse.Namespace) -> Any:
    from skyplane_ops.commands.profile import _json_arg
    from skyplane_ops.profiler import GridStore
    from skyplane_ops.profiler.store import default_store_uri

    return GridStore(
        args.store or default_store_uri(), _json_arg(args.store_options, "--store-options")
    )


def _table(rows: list[tuple[str, ...]], left: int = 2) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def run_show(args: argparse.Namespace) -> int:
    from skyplane_ops.profiler import format_age, parse_duration

    store = _store(args)
    limit = parse_duration(args.stale_after)
    version = args.version or store.latest_version()
    status = store.status(limit, version=args.version, include_pending=args.pending)
    if args.json:
        print(
            json.dumps(
                {
                    "store": store.location,
                    "version": version,
                    "stale_after_s": limit,
                    "pairs": [s.to_dict() for s in status],
                    "stale": sum(s.stale for s in status),
                },
                indent=2,
            )
        )
        return 0
    if not status:
        print(f"no measurements in {store.location}")
        return 0
    rows: list[tuple[str, ...]] = [("src", "dst", "Gbit/s", "RTT ms", "age", "conns", "")]
    for s in status:
        rows.append(
            (
                s.src,
                s.dst,
                f"{s.gbps:.3f}",
                f"{s.rtt_ms:.2f}",
                format_age(s.age_s),
                str(s.connections),
                "STALE" if s.stale else "",
            )
        )
    print(_table(rows))
    stale = sum(s.stale for s in status)
    print(
        f"\n{len(status)} pair(s) in version {version or '(unpublished)'} at {store.location}; "
        f"{stale} older than {args.stale_after}"
    )
    return 0


def _moved(change: Any, threshold_pct: float) -> bool:
    """A pair moved if it appeared, disappeared, or changed by more than the threshold."""
    if change.gbps_a is None or change.gbps_b is None:
        return True
    if change.change_pct is None:  # from zero
        return bool(change.gbps_b != 0)
    return bool(abs(change.change_pct) > threshold_pct)


def run_diff(args: argparse.Namespace) -> int:
    store = _store(args)
    changes = store.diff(args.version_a, args.version_b)
    moved = [c for c in changes if _moved(c, args.threshold)]
    if args.json:
        print(
            json.dumps(
                {
                    "version_a": args.version_a,
                    "version_b": args.version_b,
                    "threshold_pct": args.threshold,
                    "pairs": len(changes),
                    "moved": [c.to_dict() for c in moved],
                },
                indent=2,
            )
        )
        return 0
    rows: list[tuple[str, ...]] = [("src", "dst", "A Gbit/s", "B Gbit/s", "change")]
    for c in moved:
        rows.append(
            (
                c.src,
                c.dst,
                "-" if c.gbps_a is None else f"{c.gbps_a:.3f}",
                "-" if c.gbps_b is None else f"{c.gbps_b:.3f}",
                "new"
                if c.gbps_a is None
                else "gone"
                if c.gbps_b is None
                else f"{c.change_pct:+.1f}%",
            )
        )
    if moved:
        print(_table(rows))
    print(
        f"{len(moved)} of {len(changes)} pair(s) moved by more than {args.threshold:g}% "
        f"from {args.version_a} to {args.version_b}"
    )
    return 0


def run_versions(args: argparse.Namespace) -> int:
    store = _store(args)
    versions = store.versions()
    latest = store.latest_version()
    if args.json:
        print(json.dumps({"versions": versions, "latest": latest}, indent=2))
        return 0
    for v in versions:
        print(f"{v}{'  (latest)' if v == latest else ''}")
    if not versions:
        print(f"no versions in {store.location}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    store = _store(args)
    rows = store.export(args.output, args.version)
    print(f"wrote {rows} pair(s) to {args.output}")
    return 0
