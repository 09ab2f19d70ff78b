"""``replicated_dataset``: the asset factory for "this dataset, replicated to those regions".

Each replica is a Dagster asset that depends on the upstream asset writing the source. The
replicas of one source are one graph-backed multi-asset with three ops, so a run shows
**plan**, **provision** and **transfer** as their own steps (with their own logs, timings and
metadata), the way Dagster users read a run's Gantt chart. The transfer step always
deprovisions (``finally``); see :mod:`.steps`.

Partitions: a partitioned source maps each partition key to a prefix under the source and
replica URIs. The default backfill policy is ``BackfillPolicy.single_run()``: a backfill of many
partitions becomes one run, planned once for the whole volume, on one fleet, with one transfer
per partition (resumable per partition through its journal).
"""

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from skyplane_ops.dagster.checks import build_replica_checks
from skyplane_ops.dagster.locations import (
    PartitionPrefix,
    ReplicaDestination,
    ReplicaSource,
    store_kind,
)
from skyplane_ops.dagster.resource import SkyplaneResource
from skyplane_ops.dagster.steps import (
    ReplicationSpec,
    plan_step,
    provision_step,
    transfer_step,
)

RESOURCE_KEY = "skyplane"
STEP_IO_MANAGER_KEY = "skyplane_step_io_manager"
# One shared instance: several datasets in one Definitions must not conflict on this key.
_STEP_IO_MANAGER = dg.FilesystemIOManager().get_resource_definition()


@dataclass
class ReplicatedDataset:
    """What the factory built: the replicas' assets and their "replica matches source" checks."""

    spec: ReplicationSpec
    assets_def: dg.AssetsDefinition
    checks: list[dg.AssetChecksDefinition] = field(default_factory=list)

    @property
    def keys(self) -> list[dg.AssetKey]:
        return [d.asset_key for d in self.spec.destinations]


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
) -> ReplicatedDataset:
    """Define the replica asset(s) of ``source`` and their verification checks.

    ``name`` names the graph and its ops (``<name>__plan`` ...) and must be unique in the
    code location. ``partitions_def`` defaults to the upstream asset's. The resource is taken
    from the ``skyplane`` key (a :class:`SkyplaneResource`).
    """
    dests = (destinations,) if isinstance(destinations, ReplicaDestination) else tuple(destinations)
    if not dests:
        raise dg.DagsterInvalidDefinitionError("replicated_dataset needs at least one destination")
    names = [d.output_name for d in dests]
    if len(set(names)) != len(names):
        raise dg.DagsterInvalidDefinitionError(f"duplicate replica asset keys in {names}")
    parts = partitions_def if partitions_def is not None else source.partitions_def
    spec = ReplicationSpec(
        name=name,
        source=source,
        destinations=dests,
        partitions_def=parts,
        partition_prefix=partition_prefix,
    )
    if backfill_policy is None and parts is not None:
        backfill_policy = dg.BackfillPolicy.single_run()
    assets_def = _build_assets(spec, backfill_policy, group_name, description, op_tags)
    checks = build_replica_checks(spec, blocking=check_blocking)
    return ReplicatedDataset(spec=spec, assets_def=assets_def, checks=checks)


def _build_assets(
    spec: ReplicationSpec,
    backfill_policy: dg.BackfillPolicy | None,
    group_name: str | None,
    description: str | None,
    op_tags: Mapping[str, Any] | None,
) -> dg.AssetsDefinition:
    tags = dict(op_tags or {})
    step_out = dg.Out(io_manager_key=STEP_IO_MANAGER_KEY)
    upstream = spec.source.asset_key

    @dg.op(
        name=f"{spec.name}__plan",
        ins={"after": dg.In(dg.Nothing)} if upstream is not None else {},
        out=step_out,
        required_resource_keys={RESOURCE_KEY},
        tags=tags,
        description="List the source and plan the overlay route for every replica.",
    )
    def plan_op(context: dg.OpExecutionContext) -> Iterator[Any]:
        yield from plan_step(context, getattr(context.resources, RESOURCE_KEY), spec)

    @dg.op(
        name=f"{spec.name}__provision",
        out=step_out,
        required_resource_keys={RESOURCE_KEY},
        tags=tags,
        description="Start the gateways the plans need (one fleet for the whole run).",
    )
    def provision_op(context: dg.OpExecutionContext, planned: dict[str, Any]) -> Iterator[Any]:
        yield from provision_step(context, getattr(context.resources, RESOURCE_KEY), spec, planned)

    @dg.op(
        name=f"{spec.name}__transfer",
        out={d.output_name: dg.Out(dg.Nothing, is_required=True) for d in spec.destinations},
        required_resource_keys={RESOURCE_KEY},
        tags=tags,
        description="Transfer and verify every partition on the fleet; always deprovision.",
    )
    def transfer_op(
        context: dg.OpExecutionContext, planned: dict[str, Any], fleet: dict[str, Any]
    ) -> Iterator[Any]:
        yield from transfer_step(
            context, getattr(context.resources, RESOURCE_KEY), spec, planned, fleet
        )

    outs = {
        d.output_name: dg.AssetOut(
            key=d.asset_key,
            description=d.description
            or f"Replica of {upstream.to_user_string() if upstream else spec.source.uri} "
            f"in {d.region}",
            metadata={"replica_uri": d.uri, "region": d.region, **d.metadata},
            kinds={"skyplane", store_kind(d.uri)},
            group_name=group_name,
        )
        for d in spec.destinations
    }
    ins = (
        {"upstream": dg.AssetIn(key=upstream, dagster_type=dg.Nothing)}
        if upstream is not None
        else None
    )

    def compose(**kwargs: Any) -> Any:
        planned = plan_op(kwargs["upstream"]) if upstream is not None else plan_op()
        fleet = provision_op(planned)
        return transfer_op(planned, fleet)

    compose.__name__ = spec.name
    compose.__doc__ = description or f"Replicate {spec.source.uri} with skyplane-ops."
    if upstream is not None:

        def body(upstream: Any) -> Any:
            return compose(upstream=upstream)

    else:

        def body() -> Any:  # type: ignore[misc]
            return compose()

    body.__name__ = spec.name
    body.__doc__ = compose.__doc__
    with warnings.catch_warnings():
        # resource_defs on graph assets is "beta" in 1.13; we only bind our own step IO manager.
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _graph_multi_asset(spec, outs, ins, backfill_policy, body)


def _graph_multi_asset(
    spec: ReplicationSpec,
    outs: dict[str, dg.AssetOut],
    ins: dict[str, dg.AssetIn] | None,
    backfill_policy: dg.BackfillPolicy | None,
    body: Any,
) -> dg.AssetsDefinition:
    return dg.graph_multi_asset(
        name=spec.name,
        outs=outs,
        ins=ins,
        partitions_def=spec.partitions_def,
        backfill_policy=backfill_policy,
        resource_defs={STEP_IO_MANAGER_KEY: _STEP_IO_MANAGER},
        can_subset=False,
    )(body)


def replica_resource_key() -> str:
    """The resource key replica assets, checks and sensors read (``skyplane``)."""
    return RESOURCE_KEY


__all__ = [
    "ReplicatedDataset",
    "SkyplaneResource",
    "replicated_dataset",
]
