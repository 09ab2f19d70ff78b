"""The ``skyplane-ops`` command line: one sub-command per module in ``skyplane_ops.commands``.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``func(args) -> int``. Errors the user can cause (``SkyplaneOpsError``) are printed as one
line and exit with status 2; anything else is a bug and keeps its traceback.

The CLI installs its own SIGINT and SIGTERM handlers instead of relying on Python's default:
a shell running a job in the background starts it with SIGINT *ignored*, and Python then
leaves it ignored. The first signal unwinds the command (so fleets are torn down) and exits
with 128 + signal number; a second one says cleanup is running; a third exits at once.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def install_signal_handlers() -> dict[int, Any]:
    """SIGINT/SIGTERM raise ``Interrupted`` once; later ones wait for cleanup, then force.

    Returns the previous handlers (for ``restore_signal_handlers``); does nothing outside the
    main thread, where Python cannot set handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    seen: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        if len(seen) == 1:
            raise Interrupted(signum)
        if len(seen) == 2:
            print("skyplane-ops: cleaning up, signal again to quit at once", file=sys.stderr)
            return
        os._exit(128 + signum)

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = install_signal_handlers()
    try:
        return _run(args)
    finally:
        restore_signal_handlers(previous)  # in-process callers (tests) get theirs back


def _run(args: argparse.Namespace) -> int:
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
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        print(f"skyplane-ops {args.command}: interrupted ({name})", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
