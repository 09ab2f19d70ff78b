"""``skyplane-ops grid``: inspect the measured throughput grid versions in a grid store.

``show`` prints the latest measurement per pair with its age and a STALE flag; ``diff`` lists
the pairs whose rate moved by more than ``--threshold`` percent between two versions;
``versions`` lists the versions; ``export`` writes a measured-grid file for
``skyplane-ops plan --measured-grid``; ``import`` reads a Skyplane-format throughput CSV as it
is (bit/s columns, GCP zones, duplicate rows: see profiles.skyplane_csv) into the store or
into a measured-grid file.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import click

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.options import (
    DURATION,
    compose,
    format_duration,
    grid_store_options,
    json_option,
)

EPILOG = """
\b
Examples:
  skyplane-ops grid show --grid-store s3://ops/grid --stale-after 3d
  skyplane-ops grid diff v20260101T000000Z v20260108T000000Z --threshold 20
  skyplane-ops grid export measured.parquet
  skyplane-ops grid import skyplane_throughput.csv --output grid.csv
"""


def _common() -> Any:
    return compose(
        grid_store_options("grid store (path or URI; default $SKYPLANE_OPS_HOME/grid)"),
        json_option(),
    )


@click.group(epilog=EPILOG)
def grid() -> None:
    """Show, diff, export and import measured throughput grids (the profiler's store).

    show prints the latest measurement per pair with its age and a STALE flag; diff lists the
    pairs whose rate moved by more than --threshold percent between two versions; versions
    lists the versions; export writes a measured-grid file for plan --measured-grid; import
    reads a Skyplane-format throughput CSV (bit/s columns, GCP zones, duplicate rows) into the
    store or into a measured-grid file.
    """


@grid.command("show", epilog=EPILOG)
@_common()
@click.option(
    "--version", "grid_version", default=None, metavar="VERSION", help="a version (default: latest)"
)
@click.option(
    "--stale-after",
    type=DURATION,
    default="3d",
    show_default=True,
    help="flag pairs measured longer ago than this (e.g. 12h, 3d, 1w)",
)
@click.option("--pending", is_flag=True, help="include measurements not yet published")
@click.pass_context
def show(ctx: click.Context, **params: Any) -> int:
    """The latest rate per pair, its age and staleness."""
    return run_show(to_args(ctx, params))


@grid.command("diff", epilog=EPILOG)
@_common()
@click.argument("version_a")
@click.argument("version_b")
@click.option(
    "--threshold",
    type=click.FloatRange(0),
    default=10.0,
    show_default=True,
    help="list pairs that moved by more than this, in percent",
)
@click.pass_context
def diff(ctx: click.Context, **params: Any) -> int:
    """The pairs that moved by more than a threshold between VERSION_A and VERSION_B."""
    return run_diff(to_args(ctx, params))


@grid.command("versions", epilog=EPILOG)
@_common()
@click.pass_context
def versions(ctx: click.Context, **params: Any) -> int:
    """List the published versions, oldest first."""
    return run_versions(to_args(ctx, params))


@grid.command("export", epilog=EPILOG)
@_common()
@click.argument("output")
@click.option(
    "--version", "grid_version", default=None, metavar="VERSION", help="a version (default: latest)"
)
@click.pass_context
def export(ctx: click.Context, **params: Any) -> int:
    """Write a grid version to OUTPUT (.parquet or .csv) for plan --measured-grid."""
    return run_export(to_args(ctx, params))


@grid.command("import", epilog=EPILOG)
@_common()
@click.argument("file")
@click.option(
    "--output", default=None, metavar="PATH", help="write a .csv/.parquet grid, not the store"
)
@click.option(
    "--column",
    type=click.Choice(["received", "sent"]),
    default="received",
    show_default=True,
    help="which of the CSV's rates to keep",
)
@click.option(
    "--tier",
    type=click.Choice(["premium", "standard"]),
    default="premium",
    show_default=True,
    help="GCP network tier the CSV was measured on",
)
@click.option(
    "--measured-at",
    default=None,
    metavar="ISO8601",
    help="when the file was measured (default: the file's modification time)",
)
@click.option("--no-publish", is_flag=True, help="leave the rows in the journal, unpublished")
@click.pass_context
def import_(ctx: click.Context, **params: Any) -> int:
    """Read a Skyplane-format throughput CSV (FILE) into the store, or --output a grid file."""
    return run_import(to_args(ctx, params))


def _store(args: SimpleNamespace) -> Any:
    return api.GridStore(args.grid_store or api.default_store_uri(), args.grid_store_options or {})


def _table(rows: list[tuple[str, ...]], left: int = 2) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    )


def run_show(args: SimpleNamespace) -> int:
    store = _store(args)
    limit = args.stale_after
    version = args.grid_version or store.latest_version()
    status = store.status(limit, version=args.grid_version, include_pending=args.pending)
    if args.as_json:
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
                api.format_age(s.age_s),
                str(s.connections),
                "STALE" if s.stale else "",
            )
        )
    print(_table(rows))
    stale = sum(s.stale for s in status)
    print(
        f"\n{len(status)} pair(s) in version {version or '(unpublished)'} at {store.location}; "
        f"{stale} older than {format_duration(limit)}"
    )
    return 0


def _moved(change: Any, threshold_pct: float) -> bool:
    """A pair moved if it appeared, disappeared, or changed by more than the threshold."""
    if change.gbps_a is None or change.gbps_b is None:
        return True
    if change.change_pct is None:  # from zero
        return bool(change.gbps_b != 0)
    return bool(abs(change.change_pct) > threshold_pct)


def run_diff(args: SimpleNamespace) -> int:
    store = _store(args)
    changes = store.diff(args.version_a, args.version_b)
    moved = [c for c in changes if _moved(c, args.threshold)]
    if args.as_json:
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


def run_versions(args: SimpleNamespace) -> int:
    store = _store(args)
    versions = store.versions()
    latest = store.latest_version()
    if args.as_json:
        print(json.dumps({"versions": versions, "latest": latest}, indent=2))
        return 0
    for v in versions:
        print(f"{v}{'  (latest)' if v == latest else ''}")
    if not versions:
        print(f"no versions in {store.location}")
    return 0


def run_export(args: SimpleNamespace) -> int:
    store = _store(args)
    rows = store.export(args.output, args.grid_version)
    print(f"wrote {rows} pair(s) to {args.output}")
    return 0


def _measured_at(args: SimpleNamespace) -> Any:
    import os
    from datetime import UTC, datetime

    if args.measured_at is None:
        return datetime.fromtimestamp(os.path.getmtime(args.file), UTC)
    try:
        stamp = datetime.fromisoformat(args.measured_at)
    except ValueError:
        raise api.ProfileError(f"--measured-at {args.measured_at!r} is not ISO 8601") from None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def run_import(args: SimpleNamespace) -> int:
    """Aggregate the CSV per region pair, keep catalog regions, write a grid or the store."""
    rates = [r for r in api.read_skyplane_csv(args.file, tier=args.tier) if r.src != r.dst]
    catalog = api.load_default_profile().catalog
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
    args: SimpleNamespace, rates: list[Any], gbps: dict[Any, float], when: Any
) -> str:
    store = _store(args)
    run_id = "import-" + when.strftime("%Y%m%dT%H%M%SZ")
    rows = [
        api.Measurement(
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
