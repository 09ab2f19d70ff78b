"""The CLI's vocabulary: one click option per concept, defined once and used by every command.

Each concept has one name, shared with the Python API and the Airflow connection extra
(``backend``, ``backend_options``, ``max_vms_per_region``, ``max_connections_per_vm``,
``grid_store``...). Old spellings stay for one release as hidden aliases that print a
deprecation line (``deprecated_alias``). Durations go through one parser
(``api.parse_duration``: ``90``, ``90s``, ``30m``, ``2h``, ``3d``, ``1w``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from skyplane_ops import api

Decorator = Callable[[Any], Any]  # a click option decorator (or a stack of them)


class Duration(click.ParamType):
    """``90``, ``90s``, ``30m``, ``2h``, ``3d``, ``1w`` -> seconds (float)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float):
            return float(value)
        try:
            return api.parse_duration(str(value))
        except api.SkyplaneOpsError as exc:
            self.fail(str(exc), param, ctx)


class JsonObject(click.ParamType):
    """A JSON object given inline (``{"endpoint_url": ...}``) or as a JSON/TOML file path."""

    name = "JSON|FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        text = str(value).strip()
        if not text.startswith("{") and Path(text).is_file():
            try:
                data = api.read_document(text)
            except (OSError, ValueError) as exc:
                self.fail(f"cannot read {text}: {exc}", param, ctx)
        else:
            try:
                data = api.parse_document(text)
            except ValueError as exc:
                self.fail(f"not a JSON object or an existing file ({exc})", param, ctx)
        if not isinstance(data, dict):
            self.fail("must be a JSON object", param, ctx)
        return data


class FleetFile(click.ParamType):
    """A fleet JSON file (what ``skyplane-ops provision --output`` wrote) -> ``GatewayFleet``."""

    name = "FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, api.GatewayFleet):
            return value
        try:
            return api.GatewayFleet.from_dict(api.read_document(str(value)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.fail(f"cannot read fleet {value}: {exc}", param, ctx)


DURATION = Duration()
JSON_OBJECT = JsonObject()
FLEET_FILE = FleetFile()


def compose(*decorators: Decorator) -> Decorator:
    """Apply click decorators in reading order (the first one listed shows first in --help)."""

    def apply(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def deprecated_alias(old: str, new: str, dest: str, **kwargs: Any) -> Decorator:
    """A hidden ``old`` spelling of ``new``: warns once, then fills ``dest`` if ``new`` is unset.

    The value is parked in ``ctx.meta`` and merged by ``merge_aliases`` so that the order of
    the two flags on the command line does not matter.
    """

    def remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None or value == () or value is False:
            return
        print(
            f"skyplane-ops: {old} is deprecated and will be removed; use {new}",
            file=sys.stderr,
        )
        ctx.meta.setdefault("skyplane_aliases", {})[dest] = value

    # A name of its own: one shared with ``dest`` makes click hand this callback the value
    # given under ``new``, and a user of the new spelling is told it is deprecated.
    name = "deprecated_" + old.lstrip("-").replace("-", "_")
    return click.option(old, name, hidden=True, expose_value=False, callback=remember, **kwargs)


def merge_aliases(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the values given through deprecated spellings (new names win when
    given; their defaults do not)."""
    for dest, value in ctx.meta.get("skyplane_aliases", {}).items():
        if ctx.get_parameter_source(dest) in (None, ParameterSource.DEFAULT):
            params[dest] = value  # the new spelling was not given: its default gives way
    return params


# ---- one definition per concept ----------------------------------------------------------------


def backend_option(default: str | None = "local", multiple: bool = False) -> Decorator:
    help_text = (
        "provisioning backend: local (gateway processes here), ssh (your hosts), netns "
        "(test bed), aws, azure, gcp, mixed"
    )
    if multiple:
        help_text += "; repeat for several"
    return click.option(
        "--backend",
        default=default,
        metavar="NAME",
        multiple=multiple,
        show_default=default is not None,
        help=help_text,
    )


def backend_options_option() -> Decorator:
    return compose(
        click.option(
            "--backend-options",
            metavar="JSON|FILE",
            default=None,
            help="backend options: inline JSON or a JSON/TOML file, flat or one table per "
            'backend ({"ssh": {"inventory": ...}, "aws": {...}}); same keys as the Airflow '
            "connection's backend_options",
        ),
        deprecated_alias("--options", "--backend-options", "backend_options"),
    )


def grid_store_options(help_text: str) -> Decorator:
    """``--grid-store`` (the profiler's measured grid) and its store options."""
    return compose(
        click.option("--grid-store", metavar="PATH|URI", default=None, help=help_text),
        click.option(
            "--grid-store-options",
            type=JSON_OBJECT,
            default=None,
            help="object-store options of the grid store (endpoint_url, region, project)",
        ),
        deprecated_alias("--store", "--grid-store", "grid_store"),
        deprecated_alias(
            "--store-options", "--grid-store-options", "grid_store_options", type=JSON_OBJECT
        ),
    )


def store_options(side: str) -> Decorator:
    """``--src-options`` / ``--dst-options``: one store's settings (same keys as Airflow)."""
    return click.option(
        f"--{side}-options",
        type=JSON_OBJECT,
        default=None,
        help=f"{'source' if side == 'src' else 'destination'} store options, inline JSON or "
        "a JSON/TOML file: endpoint_url, region, project, addressing_style, anonymous, "
        "max_attempts, links (local). Credentials come from the SDK's own chain "
        "(AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_CONNECTION_STRING), "
        "never from here",
    )


def json_option(what: str = "the result") -> Decorator:
    return click.option("--json", "as_json", is_flag=True, help=f"print {what} as JSON")


def fleet_option(help_text: str) -> Decorator:
    return click.option("--fleet", type=FLEET_FILE, default=None, help=help_text)


def dry_run_option(what: str) -> Decorator:
    return click.option("--dry-run", is_flag=True, help=what)


def transfer_id_option(help_text: str) -> Decorator:
    return click.option("--transfer-id", metavar="ID", default=None, help=help_text)


def inventory_option() -> Decorator:
    return click.option(
        "--inventory",
        metavar="FILE",
        default=None,
        help="SSH inventory (JSON/TOML) for the ssh backend; short for "
        '--backend-options \'{"ssh": {"inventory": FILE}}\'',
    )


def plan_options() -> Decorator:
    """The bound (at most one), the limits and the grid a plan is made on (plan, cp, sync)."""
    return compose(
        click.option(
            "--min-throughput-gbps",
            type=float,
            default=None,
            metavar="GBIT/S",
            help="bound: the cheapest plan at least this fast, in Gbit/s",
        ),
        click.option(
            "--max-cost-usd",
            type=float,
            default=None,
            metavar="USD",
            help="bound: the fastest plan costing at most this much, in US$ (egress + VMs)",
        ),
        click.option(
            "--deadline",
            "deadline_seconds",
            type=DURATION,
            default=None,
            help="bound: the cheapest plan done within this time, VM start-up included "
            "(e.g. 90s, 15m, 2h)",
        ),
        deprecated_alias("--deadline-seconds", "--deadline", "deadline_seconds", type=DURATION),
        click.option(
            "--max-vms-per-region",
            type=int,
            default=None,
            metavar="N",
            help="VMs per region at most (per region; default: the provider's limit)",
        ),
        deprecated_alias("--max-vms", "--max-vms-per-region", "max_vms_per_region", type=int),
        click.option(
            "--max-connections-per-vm",
            type=int,
            default=None,
            metavar="N",
            help="TCP connections per VM at most, summed over all its hops (per VM)",
        ),
        deprecated_alias(
            "--max-conns", "--max-connections-per-vm", "max_connections_per_vm", type=int
        ),
        click.option(
            "--max-relays",
            type=click.IntRange(0, 2),
            metavar="N",
            default=1,
            show_default=True,
            help="relay regions per path (0..2)",
        ),
        grid_store_options("plan on this profiler grid store's latest version"),
        click.option(
            "--provisioning-time",
            "provisioning_seconds",
            type=DURATION,
            default=None,
            help="VM start-up time t0 (e.g. 45s; default: measured per backend, 60s for cloud VMs)",
        ),
        deprecated_alias(
            "--provisioning-seconds", "--provisioning-time", "provisioning_seconds", type=DURATION
        ),
        click.option(
            "--relays",
            metavar="PATTERNS",
            default=None,
            help="only these relay regions: comma-separated ids or patterns, e.g. 'aws:*'",
        ),
        click.option(
            "--no-relays-in", metavar="PATTERNS", default=None, help="never relay through these"
        ),
        click.option(
            "--measured-only", is_flag=True, help="use only measured edges (no modelled values)"
        ),
        click.option(
            "--mip-gap",
            type=click.FloatRange(0, 1),
            default=None,
            metavar="FRACTION",
            help="relative MIP gap to stop at, a fraction (default 0.001)",
        ),
        click.option(
            "--no-vms",
            "vms",
            flag_value="none",
            help="VM-less paths only (the worker: this machine copies): start no VM",
        ),
        click.option(
            "--vms-only",
            "vms",
            flag_value="only",
            help="the overlay's VMs only, even where the worker alone would be done sooner",
        ),
        click.option(
            "--worker-region",
            metavar="REGION",
            default=None,
            help="region of the machine running the job (default: the source's)",
        ),
        click.option(
            "--worker-gbps",
            type=click.FloatRange(0, min_open=True),
            default=None,
            metavar="GBIT/S",
            help="NIC limit of the machine running the job, in Gbit/s (default 5)",
        ),
        click.option(
            "--completion-tolerance",
            type=click.FloatRange(0),
            default=None,
            metavar="FRACTION",
            help="plans finishing within this fraction of the fastest count as fast; the "
            "cheapest of them is taken (default 0.05; 0 = fastest)",
        ),
    )


def _patterns(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


def plan_arguments(args: Any) -> dict[str, Any]:
    """``api.plan`` keyword arguments from the options ``plan_options`` defines."""
    bounds = [
        name
        for name, value in (
            ("--min-throughput-gbps", args.min_throughput_gbps),
            ("--max-cost-usd", args.max_cost_usd),
            ("--deadline", args.deadline_seconds),
        )
        if value is not None
    ]
    if len(bounds) > 1:
        raise click.UsageError(f"give at most one bound, not {' and '.join(bounds)}")
    return {
        "min_throughput_gbps": args.min_throughput_gbps,
        "max_cost_usd": args.max_cost_usd,
        "deadline_seconds": args.deadline_seconds,
        "max_vms_per_region": args.max_vms_per_region,
        "max_connections_per_vm": args.max_connections_per_vm,
        "max_relays": args.max_relays,
        "grid_store": args.grid_store,
        "grid_store_options": args.grid_store_options,
        "provisioning_seconds": args.provisioning_seconds,
        "relays_allow": _patterns(args.relays),
        "relays_deny": _patterns(args.no_relays_in),
        "measured_only": args.measured_only,
        "mip_gap": args.mip_gap,
        "completion_tolerance": args.completion_tolerance,
        "vms": args.vms or "auto",
        "worker_region": args.worker_region,
        "worker_gbps": args.worker_gbps,
        "backend": getattr(args, "backend", None),
    }


def to_uri(path_or_uri: str) -> str:
    """A path without a scheme is a local path (``./data`` -> ``file:///abs/data``)."""
    if "://" in path_or_uri:
        return path_or_uri
    return Path(path_or_uri).expanduser().absolute().as_uri()


def format_duration(seconds: float) -> str:
    """The shortest exact spelling the duration parser reads back (259200 -> ``3d``)."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
