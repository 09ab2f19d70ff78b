"""``skyplane-ops provision``: start a fleet of gateways as its own step and print it as JSON.

For pipelines that provision, transfer and deprovision in separate tasks: the fleet JSON is
what ``skyplane-ops deprovision --fleet FILE`` (or ``--transfer-id``) consumes afterwards.
"""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import BACKENDS, get_provisioner
from skyplane_ops.provision.mixed import PROVIDERS, describe, format_dry_run
from skyplane_ops.provision.sweeper import load_backend_options


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "provision", help="start gateways for a plan and print the fleet", description=__doc__
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--plan", metavar="FILE", help="plan JSON whose 'vms' to provision")
    what.add_argument(
        "--vms", metavar="REGION=N", action="append", help="VMs per region (repeatable)"
    )
    p.add_argument("--backend", default="local", choices=sorted(BACKENDS))
    p.add_argument("--options", help="per-backend options file (JSON/TOML)")
    p.add_argument("--inventory", help="SSH inventory (JSON/TOML) for --backend ssh")
    p.add_argument("--transfer-id", help="id tagged on every resource (default: generated)")
    p.add_argument("--output", metavar="FILE", help="write the fleet JSON here too")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list every resource the backend(s) would create with its $/hour; create nothing",
    )
    p.set_defaults(func=run)


def _vms(args: argparse.Namespace) -> dict[str, int]:
    if args.plan:
        try:
            return {r: int(n) for r, n in json.loads(Path(args.plan).read_text())["vms"].items()}
        except (OSError, ValueError, KeyError) as exc:
            raise ProvisionError(f"cannot read VMs from plan {args.plan}: {exc}") from exc
    vms: dict[str, int] = {}
    for item in args.vms:
        region, sep, count = item.rpartition("=")
        if not sep or not region or not count.isdigit():
            raise ProvisionError(f"--vms expects REGION=N, got {item!r}")
        vms[region] = int(count)
    return vms


def run(args: argparse.Namespace) -> int:
    tables = load_backend_options(args.options)
    options = tables.get(args.backend, {})
    if args.backend == "mixed":  # one option table per provider: aws, azure, gcp
        options = {**{k: v for k, v in tables.items() if k in PROVIDERS}, **options}
    if args.inventory:
        options["inventory"] = args.inventory
    transfer_id = args.transfer_id or f"tx-{uuid.uuid4().hex[:12]}"
    if args.dry_run:
        print(format_dry_run(describe(args.backend, options, _vms(args), transfer_id)))
        return 0
    fleet = get_provisioner(args.backend, **options).provision(_vms(args), transfer_id=transfer_id)
    text = fleet.to_json()
    if args.output:
        Path(args.output).write_text(text)
    print(text)
    return 0
