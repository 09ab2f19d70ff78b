"""The run sequence, written once: a ``TransferRequest`` is locked, checked, listed, planned,
provisioned, moved, finished and deprovisioned by ``CopyRun``; the faces (CLI, ``api.copy``,
Airflow, Dagster) call it, or its steps, and repeat none of it."""

from skyplane_ops.sequence.copy_run import CopyRun, Gateways, run_copy
from skyplane_ops.sequence.events import RunEvents

__all__ = ["CopyRun", "Gateways", "RunEvents", "run_copy"]
