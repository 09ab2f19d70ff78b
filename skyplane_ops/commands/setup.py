"""``skyplane-ops setup``: the one-time, administrator-run setup a backend needs.

Kept out of every run on purpose: what it creates needs permissions the control plane must not
hold. Today only ``azure`` needs one: the custom role each gateway VM's identity is assigned
on that VM to delete itself. Defining it needs ``roleDefinitions/write``, which would let the
control plane rewrite the one role its ``roleAssignments/write`` condition allows (see
docs/cloud-permissions.md). Without ``--apply`` it prints what it would create.
"""

from __future__ import annotations

import json
from typing import Any

import click

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.options import backend_option, backend_options_option

EPILOG = """
\b
Examples:
  skyplane-ops setup --backend azure --backend-options '{"subscription_id": "SUB"}'
  skyplane-ops setup --backend azure --backend-options azure.toml --apply
"""


@click.command(epilog=EPILOG)
@backend_option(default="azure")
@backend_options_option()
@click.option("--apply", is_flag=True, help="create it (as an administrator); default: print it")
@click.pass_context
def setup(ctx: click.Context, **params: Any) -> int:
    """One-time administrator setup of a backend (Azure: the gateways' self-delete role).

    Prints, as JSON, what the backend needs created once per account; with --apply creates
    it. Run it with an administrator's identity, not the control plane's.
    """
    args = to_args(ctx, params)
    if args.backend not in api.BACKENDS:
        raise click.BadParameter(
            f"unknown backend {args.backend}; choose from {', '.join(sorted(api.BACKENDS))}",
            param_hint="--backend",
        )
    options = api.backend_options_for(args.backend_options, args.backend)
    print(json.dumps(api.setup_backend(args.backend, options, apply=args.apply), indent=2))
    return 0
