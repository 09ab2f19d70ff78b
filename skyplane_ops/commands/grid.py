"""``skyplane-ops grid``: inspect the measured throughput grid versions in a grid store.

``show`` prints the latest measurement per pair with its age and a STALE flag; ``diff`` lists
the pairs whose rate moved by more than ``--threshold`` percent between two versions;
``versions`` lists the versions; ``export`` writes a measured-grid file for
``skyplane-ops plan --measured-grid``; ``import`` reads a Skyplane-format throughput CSV as it
is (bit/s columns, GCP zones, duplicate rows: see profiles.skyplane_csv) into the store or
into a measured-grid file.
"""

from __future__ import annotations

import argparse
import json
import sys
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

    imp = sub.add_parser(
        "import",
        help="read a Skyplane-format throughput CSV into the store (or --output a grid file)",
    )
    common(imp)
    imp.add_argument("file", help="Skyplane throughput CSV (bit/s or gbit_s columns)")
    imp.add_argument(
        "--output", default=None, metavar="PATH", help="write a .csv/.parquet grid, not the store"
    )
    imp.add_argument("--column", default="received", choices=("received", "sent"))
    imp.add_argument("--tier", default="premium", choices=("premium", "standard"))
    imp.add_argument(
        "--measured-at",
        default=None,
        metavar="ISO8601",
        help="when the file was measured (default: the file's modification time)",
    )
    imp.add_argument("--no-publish", action="store_true", help="leave the rows in the journal")
    imp.set_defaults(func=run_import)


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


def _measured_at(args: argparse.Namespace) -> Any:
    import os
    from datetime import UTC, datetime

    from skyplane_ops.errors import ProfileError

    if args.measured_at is None:
        return datetime.fromtimestamp(os.path.getmtime(args.file), UTC)
    try:
        stamp = datetime.fromisoformat(args.measured_at)
    except ValueError:
        raise ProfileError(f"--measured-at {args.measured_at!r} is not ISO 8601") from None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def run_import(args: argparse.Namespace) -> int:
    """Aggregate the CSV per region pair, keep catalog regions, write a grid or the store."""
    from skyplane_ops.profiles import load_default_profile
    from skyplane_ops.profiles.skyplane_csv import read_skyplane_csv

    rates = [r for r in read_skyplane_csv(args.file, tier=args.tier) if r.src != r.dst]
    catalog = load_default_profile().catalog
    known = [r for r in rates if r.src in catalog and r.dst in catalog]
    unknown = sorted({x for r in rates for x in (r.src, r.dst) if x not in catalog})
    when = _measured_at(args)
    if not known:
        print(f"error: no pair of {args.file} names two catalog regions", file=sys.stderr)
        return 2
    gbps = {r: r.gbps_received if args.column == "received" else r.gbps_sent for r in known}
    if args.output:
        _write_grid_file(args.output, known, gbps, when)
        where = args.output
    else:
        where = _import_into_store(args, known, gbps, when)
    print(
        f"imported {len(known)} pair(s) ({args.column} rate, {args.tier} tier, measured "
        f"{when.isoformat()}) from {args.file} into {where}"
    )
    if unknown:
        print(f"skipped pairs with regions outside the catalog: {', '.join(unknown)}")
    return 0


def _write_grid_file(path: str, rates: list[Any], gbps: dict[Any, float], when: Any) -> None:
    """A measured-grid file (the columns ``load_measured_grid`` reads), source published."""
    import pyarrow as pa

    table = pa.table(
        {
            "src": [r.src for r in rates],
            "dst": [r.dst for r in rates],
            "gbps": pa.array([gbps[r] for r in rates], pa.float64()),
            "connections": pa.array([r.connections for r in rates], pa.int32()),
            "measured_at": pa.array([when] * len(rates), pa.timestamp("us", tz="UTC")),
            "source": ["published"] * len(rates),
            "sent_gbps": [r.gbps_sent for r in rates],
            "received_gbps": [r.gbps_received for r in rates],
            "samples": [r.samples for r in rates],
        }
    )
    if path.lower().endswith(".csv"):
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, path)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, path)


def _import_into_store(
    args: argparse.Namespace, rates: list[Any], gbps: dict[Any, float], when: Any
) -> str:
    from skyplane_ops.profiler.records import Measurement

    store = _store(args)
    run_id = "import-" + when.strftime("%Y%m%dT%H%M%SZ")
    rows = [
        Measurement(
            src=r.src,
            dst=r.dst,
            gbps=gbps[r],
            sent_gbps=r.gbps_sent,
            received_gbps=r.gbps_received,
            rtt_ms=0.0,
            connections=r.connections,
            duration_s=0.0,
            measured_at=when,
            run_id=run_id,
            tier=args.tier,
            backend="skyplane-csv",
            source="published",
        )
        for r in rates
    ]
    store.append_many(rows, run_id)
    version = None if args.no_publish else store.publish()
    return f"{store.location}" + (f" (version {version})" if version else " (journal)")
