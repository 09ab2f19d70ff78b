"""``skyplane-ops deprovision``: delete the gateways and resources of finished or lost transfers.

Use it after a crash, from cron, or as an Airflow/Dagster clean-up step. ``--transfer-id``
targets one transfer, ``--older-than 2h`` everything older, ``--all`` everything we created.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Any

import click

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.options import (
    DURATION,
    backend_option,
    backend_options_option,
    fleet_option,
    inventory_option,
    transfer_id_option,
)

EPILOG = """
\b
Examples:
  skyplane-ops deprovision --older-than 1w
  skyplane-ops deprovision --transfer-id cp-3f2a9c1d0b7e
  skyplane-ops deprovision --fleet fleet.json --backend-options backends.toml
  skyplane-ops deprovision --all --backend ssh --inventory hosts.toml
"""


@click.command(epilog=EPILOG)
@click.option("--all", "everything", is_flag=True, help="everything skyplane-ops created")
@transfer_id_option("only this transfer's resources")
@click.option(
    "--older-than",
    type=DURATION,
    default=None,
    help="resources older than this (e.g. 30m, 2h, 1d, 1w)",
)
@fleet_option("exactly the fleet in this JSON file")
@backend_option(default=None, multiple=True)
@backend_options_option()
@inventory_option()
@click.option("--aws-regions", metavar="REGIONS", help="comma-separated AWS regions to sweep")
@click.option("--aws-endpoint-url", hidden=True)  # emulators only
@click.pass_context
def deprovision(ctx: click.Context, **params: Any) -> int:
    """Delete the gateways and resources of finished or lost transfers.

    Use it after a crash, from cron, or as an Airflow/Dagster clean-up step. Give exactly one
    of --transfer-id (one transfer), --older-than (everything older), --all (everything we
    created) or --fleet (a fleet JSON). By default it sweeps local, netns (when root) and
    every backend --backend-options configures.
    """
    args = to_args(ctx, params)
    chosen = [
        name
        for name, value in (
            ("--all", args.everything),
            ("--transfer-id", args.transfer_id),
            ("--older-than", args.older_than),
            ("--fleet", args.fleet),
        )
        if value not in (None, False)
    ]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --all, --transfer-id, --older-than and --fleet"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    unknown = [b for b in args.backend if b not in api.BACKENDS]
    if unknown:
        raise click.BadParameter(
            f"unknown backend {', '.join(unknown)}; choose from {', '.join(sorted(api.BACKENDS))}",
            param_hint="--backend",
        )
    return run(args)


def _tables(value: str | None) -> dict[str, dict[str, Any]]:
    """Per-backend option tables from ``--backend-options`` (a file, or inline JSON)."""
    if value is None:
        return {}
    text = value.strip()
    if text.startswith("{"):
        import json

        try:
            data = json.loads(text)
        except ValueError as exc:
            raise api.ProvisionError(f"backend options are not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise api.ProvisionError(
                "deprovision sweeps several backends: --backend-options must map backend "
                'names to option tables, e.g. {"ssh": {"inventory": "hosts.toml"}}'
            )
        return data
    return api.load_backend_options(text)


def run(args: SimpleNamespace) -> int:
    options = _tables(args.backend_options)
    if args.fleet:
        return _deprovision_fleet(args.fleet, options)
    if args.inventory:
        options.setdefault("ssh", {})["inventory"] = args.inventory
    if args.aws_regions:
        aws = options.setdefault("aws", {})
        aws["sweep_regions"] = [r.strip() for r in args.aws_regions.split(",") if r.strip()]
        if args.aws_endpoint_url:
            aws["endpoint_url"] = args.aws_endpoint_url
    clouds = {k: v for k, v in options.items() if k in api.PROVIDERS}
    if clouds:  # mixed fleets are deprovisioned part by part with the providers' options
        options.setdefault("mixed", clouds)
    backends = list(args.backend) or _default_backends(options)
    for backend in backends:
        if backend == "ssh" and "inventory" not in options.get("ssh", {}):
            raise api.ProvisionError(
                "sweeping ssh hosts needs --inventory (or 'ssh' in --backend-options)"
            )
        if (
            backend == "aws"
            and "sweep_regions" not in options.get("aws", {})
            and not api.load_fleets(transfer_id=args.transfer_id, backend="aws")
        ):  # a fleet record (a pending one too) names its regions
            raise api.ProvisionError(
                "sweeping AWS needs --aws-regions (or 'aws' in --backend-options)"
            )
    report = api.sweep(
        backends,
        transfer_id=args.transfer_id,
        older_than_seconds=args.older_than,
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
    if api.load_fleets(backend="mixed"):
        backends.insert(0, "mixed")  # first: its record names the parts in every cloud
    return backends


def _deprovision_fleet(fleet: api.GatewayFleet, options: dict[str, dict[str, object]]) -> int:
    """Deprovision one fleet (``--fleet``: what ``skyplane-ops provision`` printed)."""
    backend_options = dict(options.get(fleet.backend, {}))
    if fleet.backend == "mixed":
        backend_options = {k: v for k, v in options.items() if k in api.PROVIDERS}
    if fleet.backend == "ssh":
        backend_options.setdefault("inventory", {})  # the fleet itself says where the hosts are
    api.get_provisioner(fleet.backend, **backend_options).deprovision(fleet)
    print(
        f"deprovisioned {len(fleet.gateways)} gateway(s) of {fleet.transfer_id} ({fleet.backend})"
    )
    return 0
