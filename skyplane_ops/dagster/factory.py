"""``replicated_dataset``: the asset factory for "this dataset, replicated to those regions".

Each replica is a Dagster asset that depends on the upstream asset writing the source. The
replicas of one source are one standard ``@multi_asset`` whose single step plans, provisions
and transfers (:func:`.steps.replicate`): no IO manager, nothing on a filesystem shared by
steps, Dagster's own ``retry_policy`` for retries (the journal makes a retry resume) and run
termination for cancellation (the fleet is deleted in ``finally``).

Partitions: a partitioned source maps each partition key to a prefix under the source and
replica URIs. The default backfill policy is ``BackfillPolicy.single_run()``: a backfill of many
partitions becomes one run, planned once for the whole volume, on one fleet, with one transfer
per partition (resumable per partition through its journal). The "replica matches source"
checks are partitioned like the replicas, so a failed partition is red on its own.
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from skyplane_ops.dagster.checks import build_replica_checks
from skyplane_ops.dagster.locations import PartitionPrefix, ReplicaDestination, ReplicaSource
from skyplane_ops.dagster.resource import SkyplaneResource
from skyplane_ops.dagster.spec import ReplicationSpec, make_spec
from skyplane_ops.dagster.steps import replicate
from skyplane_ops.dagster.translator import SkyplaneTranslator

RESOURCE_KEY = "skyplane"


@dataclass
class ReplicatedDataset:
    """What the factory built: standard Dagster definitions (iterate it, or use its fields)."""

    spec: ReplicationSpec
    assets_def: dg.AssetsDefinition
    checks: list[dg.AssetChecksDefinition] = field(default_factory=list)

    @property
    def keys(self) -> list[dg.AssetKey]:
        return [d.asset_key for d in self.spec.destinations]

    def __iter__(self) -> Iterator[dg.AssetsDefinition | dg.AssetChecksDefinition]:
        """``dg.Definitions(assets=[...], asset_checks=[...])`` take these as they are."""
        yield self.assets_def
        yield from self.checks


def replicated_dataset(
    name: str,
    source: ReplicaSource,
    destinations: ReplicaDestination | Sequence[ReplicaDestination],
    *,
    partitions_def: dg.PartitionsDefinition[Any] | None = None,
    partition_prefix: PartitionPrefix = "{partition_key}/",
    backfill_policy: dg.BackfillPolicy | None = None,
    group_name: str | None = None,
    description: str | None = None,
    op_tags: Mapping[str, Any] | None = None,
    check_blocking: bool = True,
    retry_policy: dg.RetryPolicy | None = None,
    freshness_policy: dg.FreshnessPolicy | None = None,
) -> ReplicatedDataset:
    """Define the replica asset(s) of ``source`` and their verification checks.

    ``name`` names the multi-asset's op and must be unique in the code location.
    ``partitions_def`` defaults to the upstream asset's. ``freshness_policy`` is set on every
    replica (e.g. ``dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=26))``). The
    resource is taken from the ``skyplane`` key (a :class:`SkyplaneResource`).
    """
    spec = make_spec(
        name, source, destinations, partitions_def=partitions_def, partition_prefix=partition_prefix
    )
    if backfill_policy is None and spec.partitions_def is not None:
        backfill_policy = dg.BackfillPolicy.single_run()
    translator = _Translator(group_name, freshness_policy)
    specs = [translator.get_asset_spec(spec, d) for d in spec.destinations]

    @dg.multi_asset(
        name=name,
        specs=specs,
        partitions_def=spec.partitions_def,
        backfill_policy=backfill_policy,
        op_tags=dict(op_tags or {}),
        retry_policy=retry_policy,
        description=description or f"Replicate {spec.source.uri} with skyplane-ops.",
        can_subset=False,
    )
    def _replicas(
        context: dg.AssetExecutionContext, skyplane: SkyplaneResource
    ) -> Iterator[dg.MaterializeResult]:
        yield from replicate(context, skyplane, spec)

    checks = build_replica_checks(spec, blocking=check_blocking)
    return ReplicatedDataset(spec=spec, assets_def=_replicas, checks=checks)


class _Translator(SkyplaneTranslator):
    """The factory's keyword arguments, as a translator."""

    def __init__(self, group_name: str | None, freshness: dg.FreshnessPolicy | None) -> None:
        self.group_name = group_name
        self.freshness = freshness

    def get_group_name(self, spec: ReplicationSpec, dest: ReplicaDestination) -> str | None:
        return self.group_name

    def get_freshness_policy(
        self, spec: ReplicationSpec, dest: ReplicaDestination
    ) -> dg.FreshnessPolicy | None:
        return self.freshness


def replica_resource_key() -> str:
    """The resource key replica assets, checks and sensors read (``skyplane``)."""
    return RESOURCE_KEY


__all__ = [
    "ReplicatedDataset",
    "SkyplaneResource",
    "replicated_dataset",
]
