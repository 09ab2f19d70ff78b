"""The Airflow face of skyplane-ops: hook, operators, trigger and the transfer task group.

Names resolve lazily so that importing a submodule that does not need Airflow (the settings
parser, the detached transfer driver, the provider metadata) never imports Airflow.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "SkyplaneHook": "skyplane_ops.airflow.hooks",
    "SkyplanePlanOperator": "skyplane_ops.airflow.operators",
    "SkyplaneProvisionOperator": "skyplane_ops.airflow.operators",
    "SkyplaneTransferOperator": "skyplane_ops.airflow.operators",
    "SkyplaneDeprovisionOperator": "skyplane_ops.airflow.operators",
    "SkyplaneCopyOperator": "skyplane_ops.airflow.operators",
    "SkyplaneTransferTrigger": "skyplane_ops.airflow.triggers",
    "skyplane_transfer_group": "skyplane_ops.airflow.task_group",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
