"""``skyplane-ops deprovision``: delete the gateways and resources of finished or lost transfers.

Use it after a crash, from cron, or as an Airflow/Dagster clean-up step. ``--transfer-id``
targets one transfer, ``--older-than 2h`` everything older, ``--all`` everything we created.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import BACKENDS, get_provisioner, records
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.mixed import PROVIDERS
from skyplane_ops.provision.sweeper import load_backend_options, parse_duration, sweep


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "deprovision",
        help="delete leftover gateways and cloud resources by transfer id or age",
        description=__doc__,
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="everything skyplane-ops created")
    which.add_argument("--transfer-id", help="only this transfer's resources")
    which.add_argument("--older-than", metavar="AGE", help="resources older than AGE (30m, 2h, 1d)")
    which.add_argument("--fleet", metavar="FILE", help="exactly the fleet in this JSON file")
    p.add_argument(
        "--backend",
        action="append",
        choices=sorted(BACKENDS),
        help="backend(s) to sweep (repeatable; default: local, netns when root, and ssh/aws "
        "when configured)",
    )
    p.add_argument("--inventory", help="SSH inventory (JSON/TOML) whose hosts are swept")
    p.add_argument("--aws-regions", help="comma-separated AWS regions to sweep")
    p.add_argument("--aws-endpoint-url", help=argparse.SUPPRESS)  # emulators only
    p.add_argument("--options", help="per-backend options file (JSON/TOML)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = load_backend_options(args.options)
    if args.fleet:
        return _deprovision_fleet(args.fleet, options)
    if args.inventory:
        options.setdefault("ssh", {})["inventory"] = args.inventory
    if args.aws_regions:
        aws = options.setdefault("aws", {})
        aws["sweep_regions"] = [r.strip() for r in args.aws_regions.split(",") if r.strip()]
        if args.aws_endpoint_url:
            aws["endpoint_url"] = args.aws_endpoint_url
    clouds = {k: v for k, v in options.items() if k in PROVIDERS}
    if clouds:  # mixed fleets are deprovisioned part by part with the providers' options
        options.setdefault("mixed", clouds)
    backends = args.backend or _default_backends(options)
    for backend in backends:
        if backend == "ssh" and "inventory" not in options.get("ssh", {}):
            raise ProvisionError("sweeping ssh hosts needs --inventory (or 'ssh' in --options)")
        if backend == "aws" and "sweep_regions" not in options.get("aws", {}):
            raise ProvisionError("sweeping AWS needs --aws-regions (or 'aws' in --options)")
    report = sweep(
        backends,
        transfer_id=args.transfer_id,
        older_than_seconds=parse_duration(args.older_than) if args.older_than else None,
        options=options,
    )
    for backend in backends:
        for item in report.deleted.get(backend, []):
            print(f"deleted {item}")
    for backend, error in report.errors.items():
        print(f"skyplane-ops deprovision: {backend}: {error}", file=sys.stderr)
    print(f"{report.total} resource(s) deleted from {', '.join(backends)}")
    return 1 if report.errors else 0


def _default_backends(options: dict[str, dict[str, object]]) -> list[str]:
    backends = ["local"]
    if os.geteuid() == 0:
        backends.append("netns")
    if "inventory" in options.get("ssh", {}):
        backends.append("ssh")
    if "sweep_regions" in options.get("aws", {}):
        backends.append("aws")
    backends += [b for b in ("azure", "gcp") if b in options]  # configured clouds
    if records.load_fleets(backend="mixed"):
        backends.insert(0, "mixed")  # first: its record names the parts in every cloud
    return backends


def _deprovision_fleet(path: str, options: dict[str, dict[str, object]]) -> int:
    """Deprovision one fleet from its JSON (what ``skyplane-ops provision`` printed)."""
    try:
        fleet = GatewayFleet.from_json(Path(path).read_text())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProvisionError(f"cannot read fleet {path}: {exc}") from exc
    backend_options = dict(options.get(fleet.backend, {}))
    if fleet.backend == "mixed":
        backend_options = {k: v for k, v in options.items() if k in PROVIDERS}
    if fleet.backend == "ssh":
        backend_options.setdefault("inventory", {})  # the fleet itself says where the hosts are
    get_provisioner(fleet.backend, **backend_options).deprovision(fleet)
    print(
        f"deprovisioned {len(fleet.gateways)} gateway(s) of {fleet.transfer_id} ({fleet.backend})"
    )
    return 0
