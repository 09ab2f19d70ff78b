"""``skyplane-ops provision``: start a fleet of gateways as its own step and print it as JSON.

For pipelines that provision, transfer and deprovision in separate tasks: the fleet JSON is
what ``skyplane-ops deprovision --fleet FILE`` (or ``--transfer-id``) consumes afterwards.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.options import (
    backend_option,
    backend_options_option,
    dry_run_option,
    inventory_option,
    transfer_id_option,
)

EPILOG = """
\b
Examples:
  skyplane-ops plan --src aws:us-east-1 --dst aws:eu-west-1 --volume-gb 100 --json > plan.json
  skyplane-ops provision --plan plan.json --backend aws --dry-run
  skyplane-ops provision --vms lab:a=1 --vms lab:b=2 --backend ssh --inventory hosts.toml \\
      --output fleet.json
  skyplane-ops deprovision --fleet fleet.json
"""


@click.command(epilog=EPILOG)
@click.option(
    "--plan", "plan_file", metavar="FILE", default=None, help="plan JSON whose 'vms' to provision"
)
@click.option(
    "--vms", metavar="REGION=N", multiple=True, help="VMs in a region (repeat per region)"
)
@backend_option(default="local")
@backend_options_option()
@inventory_option()
@transfer_id_option("id tagged on every resource (default: generated)")
@click.option("--output", metavar="FILE", help="also write the fleet JSON to this file")
@dry_run_option("list every resource the backend(s) would create with its $/hour; create nothing")
@click.pass_context
def provision(ctx: click.Context, **params: Any) -> int:
    """Start a fleet of gateways as its own step and print it as JSON.

    For pipelines that provision, transfer and deprovision in separate tasks: the fleet JSON
    is what deprovision --fleet FILE (or --transfer-id) consumes afterwards.
    """
    args = to_args(ctx, params)
    if bool(args.plan_file) == bool(args.vms):
        raise click.UsageError("give exactly one of --plan and --vms")
    if args.backend not in api.BACKENDS:
        raise click.BadParameter(
            f"unknown backend {args.backend}; choose from {', '.join(sorted(api.BACKENDS))}",
            param_hint="--backend",
        )
    return run(args)


def _vms(args: SimpleNamespace) -> dict[str, int]:
    if args.plan_file:
        try:
            return {
                r: int(n) for r, n in json.loads(Path(args.plan_file).read_text())["vms"].items()
            }
        except (OSError, ValueError, KeyError) as exc:
            raise api.ProvisionError(f"cannot read VMs from plan {args.plan_file}: {exc}") from exc
    vms: dict[str, int] = {}
    for item in args.vms:
        region, sep, count = item.rpartition("=")
        if not sep or not region or not count.isdigit():
            raise api.ProvisionError(f"--vms expects REGION=N, got {item!r}")
        vms[region] = int(count)
    return vms


def run(args: SimpleNamespace) -> int:
    # Flat options or one table per backend (mixed takes the providers' tables).
    options = api.backend_options_for(args.backend_options, args.backend)
    if args.inventory:
        options["inventory"] = args.inventory
    transfer_id = args.transfer_id or f"tx-{uuid.uuid4().hex[:12]}"
    if args.dry_run:
        print(
            api.format_dry_run(
                api.describe_resources(args.backend, options, _vms(args), transfer_id)
            )
        )
        return 0
    fleet = api.get_provisioner(args.backend, **options).provision(
        _vms(args), transfer_id=transfer_id
    )
    text = fleet.to_json()
    if args.output:
        Path(args.output).write_text(text)
    print(text)
    return 0
