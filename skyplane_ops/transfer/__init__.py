"""The transfer engine: run a planned transfer on a provisioned fleet, resumably and verified.

The one call the CLI, Airflow and Dagster faces use::

    from skyplane_ops.transfer import run_transfer
    result = run_transfer(plan, fleet, "s3://src/data/", "gs://dst/data/")
    result.to_dict()   # small: ids, objects, bytes, seconds, Gbps, cost, verification

Steps: check the options and that source and destination do not overlap -> lock the journal
-> list the source (include/exclude globs) -> manifest (parts aligned to the destination's part
size, small objects batched) -> skip what the journal says is finished (and, with ``sync=True``,
what the destination already has) -> create/reuse multipart uploads -> dispatch chunks along
the plan's paths -> check the source did not change -> complete multipart uploads -> verify
every object (size + CRC32C) -> with ``delete=True`` (``sync --delete``) remove destination
objects absent from the source, only if nothing failed. Nothing partial becomes visible: parts
stay staged until completion, small objects are written whole, and no destination object is
ever deleted except by that mirror delete. An object that cannot be read or changes during the
run is a per-object outcome: the rest is copied and ``PartialTransferError`` names it. On
failure the journal is kept and re-running the same call resumes; on success it is deleted.
"""

from __future__ import annotations

from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.preview import Preview, preview_transfer
from skyplane_ops.transfer.progress import Progress, ProgressCallback
from skyplane_ops.transfer.request import check_request, transfer_lock
from skyplane_ops.transfer.result import (
    EXIT_PARTIAL,
    ObjectsFailedError,
    PartialTransferError,
    SourceChangedError,
    TransferResult,
)
from skyplane_ops.transfer.run import run_transfer

__all__ = [
    "EXIT_PARTIAL",
    "DispatchOptions",
    "ObjectsFailedError",
    "PartialTransferError",
    "Preview",
    "Progress",
    "ProgressCallback",
    "SourceChangedError",
    "TransferResult",
    "check_request",
    "preview_transfer",
    "run_transfer",
    "transfer_lock",
]
