"""Dispatch: send the chunks along the plan's paths to the fleet's gateways, follow their progress.

``dispatcher`` (the ``Dispatcher``: start, the poll loop, stop), ``options`` (its options, the
chunk totals and its stats), ``spec`` (the plan's routes and the job spec), ``submit`` (where
each chunk goes, and sending it), ``liveness`` (status polls and dead paths) and ``flight``
(objects done, for progress). The names callers use are importable from here.
"""

from __future__ import annotations

from skyplane_ops.transfer.dispatch.dispatcher import POLL_GAPS, Dispatcher
from skyplane_ops.transfer.dispatch.options import ChunkTotals, DispatchOptions, DispatchStats
from skyplane_ops.transfer.dispatch.spec import LOOPBACK_CONNECTIONS, check_fleet, plan_routes

__all__ = [
    "LOOPBACK_CONNECTIONS",
    "POLL_GAPS",
    "ChunkTotals",
    "DispatchOptions",
    "DispatchStats",
    "Dispatcher",
    "check_fleet",
    "plan_routes",
]
