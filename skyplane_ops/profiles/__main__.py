"""``python -m skyplane_ops.profiles``: export the throughput grid or show one pair.

python -m skyplane_ops.profiles export grid.parquet [--measured-grid m.csv] [--gcp-tier standard]
python -m skyplane_ops.profiles show aws:us-east-1 gcp:us-central1
"""

from __future__ import annotations

import argparse
import sys

from skyplane_ops.errors import SkyplaneOpsError
from skyplane_ops.profiles.loader import load_profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m skyplane_ops.profiles")
    parser.add_argument("--overrides", help="partial prices.json with your prices/VM classes")
    parser.add_argument("--measured-grid", help="CSV or Parquet measured grid to merge")
    parser.add_argument("--gcp-tier", default="premium", choices=("premium", "standard"))
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write every pair (CSV or Parquet by extension)")
    export.add_argument("path")
    show = sub.add_parser("show", help="price and throughput of one ordered pair")
    show.add_argument("src")
    show.add_argument("dst")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(
            overrides=args.overrides, measured_grid=args.measured_grid, gcp_tier=args.gcp_tier
        )
        grid = profile.throughput
        if args.command == "export":
            grid.write(args.path)
            print(f"wrote {len(grid)} pairs to {args.path}")
            return 0
        src, dst = profile.catalog.get(args.src).id, profile.catalog.get(args.dst).id
        link = grid.link(src, dst)
        stamp = f" {link.measured_at}" if link.measured_at else ""
        print(
            f"{src} -> {dst}: {grid.gbps(src, dst):.2f} Gbps ({link.source}{stamp}; "
            f"{grid.connections} connections), "
            f"${profile.prices.egress_usd_per_gb(src, dst):.4f}/GB egress"
        )
        return 0
    except SkyplaneOpsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
