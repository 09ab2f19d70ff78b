"""The transfer engine: run a planned transfer on a provisioned fleet, resumably and verified.

The engine's one entry point (the run sequence, ``skyplane_ops.sequence``, calls it after
planning and provisioning)::

    from skyplane_ops.transfer import TransferRequest, run_transfer
    request = TransferRequest.build("s3://src/data/", "gs://dst/data/")
    result = run_transfer(plan, fleet, request)
    result.to_dict()   # small: ids, objects, bytes, seconds, Gbps, cost, verification

Steps: the request checked its options and that source and destination do not overlap when
it was built -> lock the journal
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
from skyplane_ops.transfer.listing import Listing, list_request, transfer_lock
from skyplane_ops.transfer.preview import Preview, preview_transfer
from skyplane_ops.transfer.progress import Progress, ProgressCallback
from skyplane_ops.transfer.request import PlanOptions, StoreLocation, TransferRequest
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
    "Listing",
    "ObjectsFailedError",
    "PartialTransferError",
    "PlanOptions",
    "Preview",
    "Progress",
    "ProgressCallback",
    "SourceChangedError",
    "StoreLocation",
    "TransferRequest",
    "TransferResult",
    "list_request",
    "preview_transfer",
    "run_transfer",
    "transfer_lock",
]
