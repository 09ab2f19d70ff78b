"""The ``skyplane-ops`` command line: one sub-command per module in ``skyplane_ops.commands``.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``func(args) -> int``. Errors the user can cause (``SkyplaneOpsError``) are printed as one
line and exit with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from skyplane_ops import __version__
from skyplane_ops.errors import SkyplaneOpsError

# Add a module here to add a sub-command; keep the order the one shown in --help.
COMMAND_MODULES: list[str] = [
    "skyplane_ops.commands.plan",
    "skyplane_ops.commands.cp",
    "skyplane_ops.commands.profile",
    "skyplane_ops.commands.grid",
    "skyplane_ops.commands.provision",
    "skyplane_ops.commands.deprovision",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skyplane-ops",
        description="Plan and run cloud-aware overlay transfers of bulk data.",
    )
    parser.add_argument("--version", action="version", version=f"skyplane-ops {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except SkyplaneOpsError as exc:
        print(f"skyplane-ops {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"skyplane-ops {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
