"""Operators: plan, provision (setup), transfer, deprovision (teardown) and the one-task copy.

Each operator is a thin adapter over ``SkyplaneHook`` -> ``skyplane_ops.api`` and is usable on
its own. XCom values are small JSON summaries (see ``summaries``): the full plan lives at a URI,
the fleet reference is the secret-free ``GatewayFleet`` JSON, and nothing returns key lists.


One module per operator family (``plan``, ``fleet``, ``transfer``, ``copy``) with the shared
plumbing in ``base``; this package re-exports them so ``skyplane_ops.airflow.operators`` stays
the import path.
"""

from __future__ import annotations

from skyplane_ops.airflow.deferral import SkyplaneTransferFailed
from skyplane_ops.airflow.operators.base import default_deferrable, done_line
from skyplane_ops.airflow.operators.copy import SkyplaneCopyOperator
from skyplane_ops.airflow.operators.fleet import (
    SkyplaneDeprovisionOperator,
    SkyplaneProvisionOperator,
)
from skyplane_ops.airflow.operators.plan import SkyplanePlanOperator
from skyplane_ops.airflow.operators.transfer import SkyplaneTransferOperator, run_here

__all__ = [
    "SkyplaneCopyOperator",
    "SkyplaneDeprovisionOperator",
    "SkyplanePlanOperator",
    "SkyplaneProvisionOperator",
    "SkyplaneTransferFailed",
    "SkyplaneTransferOperator",
    "default_deferrable",
    "done_line",
    "run_here",
]
