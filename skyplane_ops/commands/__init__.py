"""The sub-commands of ``skyplane-ops``, in the order ``--help`` lists them.

Each module builds its click command from the shared options in ``commands.options`` and
reaches the core only through ``skyplane_ops.api``.
"""

from __future__ import annotations

import click

from skyplane_ops.commands.cp import bwlimit, cp, mv, sync
from skyplane_ops.commands.deprovision import deprovision
from skyplane_ops.commands.grid import grid
from skyplane_ops.commands.plan import plan
from skyplane_ops.commands.profile import profile
from skyplane_ops.commands.provision import provision
from skyplane_ops.commands.report import report
from skyplane_ops.commands.setup import setup

COMMANDS: list[click.Command] = [
    plan, cp, sync, mv, bwlimit, profile, grid, provision, deprovision, report, setup,
]  # fmt: skip
