"""From click's parsed parameters to the ``args`` object the command bodies read."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import click

from skyplane_ops.commands.options import merge_aliases


def to_args(ctx: click.Context, params: dict[str, Any]) -> SimpleNamespace:
    """The command's options as attributes (deprecated spellings merged), plus ``command``."""
    return SimpleNamespace(command=ctx.info_name, **merge_aliases(ctx, dict(params)))


class ArgsParser:
    """``parse_args(argv)`` -> the ``args`` a command would run with (for tests and tools)."""

    def __init__(self, group: click.Group) -> None:
        self.group = group

    def parse_args(self, argv: Sequence[str]) -> SimpleNamespace:
        ctx = self.group.make_context(self.group.name, list(argv), resilient_parsing=False)
        name, command, rest = self.group.resolve_command(ctx, [*ctx.protected_args, *ctx.args])
        assert command is not None and name is not None
        sub = command.make_context(name, rest, parent=ctx)
        return to_args(sub, sub.params)
