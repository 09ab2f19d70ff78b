"""Dagster face of skyplane-ops: a resource, replica assets (the ``replicated_dataset`` factory,
the ``@skyplane_assets`` decorator with a ``SkyplaneTranslator``, and the YAML ``dg`` component
``SkyplaneReplicationComponent``), blocking partitioned "replica matches source" checks,
leftover-sweeper sensors, the grid refresh and a ``Definitions`` helper.

A thin adapter over :mod:`skyplane_ops.api`; nothing here moves bytes itself.
"""

from skyplane_ops.dagster.checks import CHECK_NAME, build_replica_checks
from skyplane_ops.dagster.compare import Comparison, compare_stores
from skyplane_ops.dagster.component import SkyplaneReplicationComponent
from skyplane_ops.dagster.decorator import skyplane_assets
from skyplane_ops.dagster.definitions import skyplane_definitions
from skyplane_ops.dagster.factory import ReplicatedDataset, replicated_dataset
from skyplane_ops.dagster.grid import EVERY_THREE_DAYS, GridRefresh, build_grid_refresh
from skyplane_ops.dagster.locations import ReplicaDestination, ReplicaSource, prefix_for
from skyplane_ops.dagster.resource import SkyplaneResource
from skyplane_ops.dagster.sensors import build_leftover_sweepers
from skyplane_ops.dagster.spec import transfer_id_for
from skyplane_ops.dagster.translator import SkyplaneTranslator

__all__ = [
    "CHECK_NAME",
    "EVERY_THREE_DAYS",
    "Comparison",
    "GridRefresh",
    "ReplicaDestination",
    "ReplicaSource",
    "ReplicatedDataset",
    "SkyplaneReplicationComponent",
    "SkyplaneResource",
    "SkyplaneTranslator",
    "build_grid_refresh",
    "build_leftover_sweepers",
    "build_replica_checks",
    "compare_stores",
    "prefix_for",
    "replicated_dataset",
    "skyplane_assets",
    "skyplane_definitions",
    "transfer_id_for",
]
