"""The ``skyplane-ops`` command line, built on click: one module per command in ``commands``.

Click (not typer, not argparse): Dagster's and Airflow's own CLIs are click, so the help,
completion and error style match the tools our users already run; options are plain
decorators that one module (``commands.options``) defines once for every command; and it is
already a dependency of both faces, so the CLI adds nothing to install.

Errors the user can cause (``SkyplaneOpsError``) are printed as one line and exit with
status 2 (as do usage errors); anything else is a bug and keeps its traceback.

The CLI installs its own SIGINT and SIGTERM handlers instead of relying on Python's default:
a shell running a job in the background starts it with SIGINT *ignored*, and Python then
leaves it ignored. The first signal unwinds the command (so fleets are torn down) and exits
with 128 + signal number; a second one says cleanup is running; a third exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

import click

from skyplane_ops import __version__
from skyplane_ops.api import SkyplaneOpsError
from skyplane_ops.commands import COMMANDS

PROG = "skyplane-ops"
COMPLETE_VAR = "_SKYPLANE_OPS_COMPLETE"
EXAMPLES = """
\b
Examples:
  skyplane-ops plan --src aws:us-east-1 --dst gcp:europe-west4 --volume-gb 500
  skyplane-ops cp ./data s3://bucket/data --src-region aws:us-east-1 --dst-region aws:eu-west-1
  skyplane-ops deprovision --older-than 1w
  eval "$(skyplane-ops completion bash)"
"""


class _Ordered(click.Group):
    """Lists the commands in the order they were added (the order of a user's workflow)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(
    cls=_Ordered,
    name=PROG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXAMPLES,
)
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="more log output on stderr (-vv: debug)")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Plan and run cloud-aware overlay transfers of bulk data between regions and clouds."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # paramiko logs a failed handshake's traceback from its transport thread; the same failure
    # reaches the user as one line (an SSH error of ours), so its log is for -vv only.
    logging.getLogger("paramiko").setLevel(logging.DEBUG if verbose >= 2 else logging.CRITICAL)


for _command in COMMANDS:
    cli.add_command(_command)


@cli.command(
    epilog='\b\nExamples:\n  eval "$(skyplane-ops completion bash)"\n'
    "  skyplane-ops completion zsh > ~/.zfunc/_skyplane-ops"
)
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # the Choice above only admits supported shells
    click.echo(cls(cli, {}, PROG, COMPLETE_VAR).source())


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


def _command_name(argv: Sequence[str]) -> str:
    """The sub-command named in ``argv`` (for one-line error messages)."""
    names = set(cli.commands)
    return next((a for a in argv if a in names), PROG)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    name = _command_name(args)
    previous = install_signal_handlers()
    try:
        status = cli.main(args, prog_name=PROG, complete_var=COMPLETE_VAR, standalone_mode=False)
        return int(status or 0)
    except click.exceptions.Exit as exc:  # --help, --version
        return exc.exit_code
    except click.ClickException as exc:  # usage errors: one line, like every other error
        where = f"{PROG} {name}" if name != PROG else PROG
        hint = f" (see {where} --help)" if isinstance(exc, click.UsageError) else ""
        print(f"{where}: error: {exc.format_message()}{hint}", file=sys.stderr)
        return exc.exit_code
    except click.Abort as exc:  # click wraps KeyboardInterrupt (our signals) in Abort
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return _interrupted(name, exc.__cause__)
        return 1
    except SkyplaneOpsError as exc:
        print(f"skyplane-ops {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return _interrupted(name, exc)
    finally:
        restore_signal_handlers(previous)  # in-process callers (tests) get theirs back


def _interrupted(name: str, exc: KeyboardInterrupt) -> int:
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    print(f"skyplane-ops {name}: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
    return 128 + signum


def build_parser() -> Any:
    """Deprecated (argparse era): an object whose ``parse_args(argv)`` gives a command's args."""
    from skyplane_ops.commands.base import ArgsParser

    return ArgsParser(cli)


if __name__ == "__main__":
    sys.exit(main())
