"""Deprecated option spellings: the old one warns and works, the new one never warns."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from skyplane_ops.commands.options import deprecated_alias, merge_aliases


@click.command()
@click.option("--probe-connections", "connections", default="4,64")
@deprecated_alias("--connections", "--probe-connections", "connections")
@click.pass_context
def _command(ctx: click.Context, **params: str) -> None:
    click.echo(merge_aliases(ctx, params)["connections"])


@pytest.mark.parametrize(
    ("argv", "value", "warns"),
    [
        ([], "4,64", False),
        # The old spelling is also the destination's name: click used to hand the alias's
        # callback the new option's value, so the new spelling was called deprecated.
        (["--probe-connections", "4,16"], "4,16", False),
        (["--connections", "8"], "8", True),
        (["--connections", "8", "--probe-connections", "2"], "2", True),
    ],
)
def test_only_the_old_spelling_warns(argv: list[str], value: str, warns: bool) -> None:
    result = CliRunner().invoke(_command, argv)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == value
    assert ("deprecated" in result.stderr) is warns


def test_cp_and_profile_new_spellings_do_not_warn() -> None:
    from skyplane_ops.cli import cli

    for argv in (
        ["cp", "a", "b", "--src-region", "x", "--dst-region", "y", "--connections-per-hop", "1"],
        ["profile", "--probe-connections", "4,16", "--probe-duration", "3", "--regions", "x"],
    ):
        result = CliRunner().invoke(cli, [*argv, "--backend", "no-such-backend"])
        assert "deprecated" not in result.stderr, (argv, result.stderr)
