"""The code location: ``dagster dev -m skyplane_example.definitions`` (or ``dg dev``).

The ``skyplane`` resource chooses where gateways run. The default, ``local``, starts real
gateway processes on this machine (no cloud account). For VMs, set ``SKYPLANE_BACKEND=aws`` (or
``ssh`` with an inventory in ``SKYPLANE_BACKEND_OPTIONS``, JSON); store credentials come from
the usual SDK environment variables, never from this file.
"""

import json
import os

import dagster as dg

from skyplane_example.assets import (
    DATA_ROOT,
    REPLICA_REGION,
    SOURCE_REGION,
    events,
    events_eu_summary,
    events_replicas,
)
from skyplane_ops.dagster import SkyplaneResource, build_grid_refresh, skyplane_definitions

GRID_STORE = os.environ.get("SKYPLANE_GRID_STORE", f"file://{DATA_ROOT}/grid/")

skyplane = SkyplaneResource(
    backend=os.environ.get("SKYPLANE_BACKEND", "local"),
    backend_options=json.loads(os.environ.get("SKYPLANE_BACKEND_OPTIONS", "{}")),
    # Ceiling on each replication's predicted cost; the planner maximises throughput under it.
    max_cost_usd=float(os.environ.get("SKYPLANE_MAX_COST_USD", "5.0")),
    max_vms_per_region=int(os.environ.get("SKYPLANE_MAX_VMS_PER_REGION", "1")),
    # Plans use the latest grid the refresh below published here (the model until then).
    grid_store=GRID_STORE,
)

# The throughput grid the planner can use, re-measured every three days (schedule off by default).
grid = build_grid_refresh(
    [SOURCE_REGION, REPLICA_REGION],
    duration_s=2.0,
    budget_usd=1.0,
)

defs: dg.Definitions = skyplane_definitions(
    [events_replicas],
    skyplane=skyplane,
    assets=[events, events_eu_summary],
    grid=grid,
)
