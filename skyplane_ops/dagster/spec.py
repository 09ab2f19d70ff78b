"""``ReplicationSpec``: everything a replication was declared with (by the factory, the
decorator or the component), the partitions a run targets, its deterministic transfer id, and
the registry ``SkyplaneResource.replicate(context)`` finds a decorated op's spec in.

The leaf of the Dagster face: it imports only ``locations``, so steps, checks, translator,
factory, decorator and resource all depend on it and never on each other in a circle."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from skyplane_ops.dagster.locations import PartitionPrefix, ReplicaDestination, ReplicaSource


@dataclass(frozen=True)
class ReplicationSpec:
    """Everything the factory was told: one source, its replicas and the partition layout."""

    name: str
    source: ReplicaSource
    destinations: tuple[ReplicaDestination, ...]
    partitions_def: dg.PartitionsDefinition[Any] | None
    partition_prefix: PartitionPrefix


def transfer_id_for(run_id: str, spec_name: str) -> str:
    """Deterministic per (run, dataset): the sweeper sensor recomputes it after a crash."""
    digest = hashlib.sha256(spec_name.encode("utf-8")).hexdigest()[:8]
    return f"dg-{run_id.replace('-', '')[:32]}-{digest}"


def run_partition_keys(
    context: Any, partitions_def: dg.PartitionsDefinition[Any] | None
) -> list[str | None]:
    """The partitions this run targets ([None] when unpartitioned or not partition-scoped)."""
    if partitions_def is None:
        return [None]
    tags: Mapping[str, str] = context.run.tags
    single = tags.get("dagster/partition")
    if single is not None:
        return [single]
    start = tags.get("dagster/asset_partition_range_start")
    end = tags.get("dagster/asset_partition_range_end")
    if start is not None and end is not None:
        keys = partitions_def.get_partition_keys_in_range(dg.PartitionKeyRange(start, end))
        return list(keys)
    return [None]


# Replication specs by op name, for ``SkyplaneResource.replicate(context)``.
_SPECS: dict[str, ReplicationSpec] = {}


def spec_for(context: Any) -> ReplicationSpec:
    """The replication the running ``@skyplane_assets`` op was defined with."""
    name = context.op_def.name
    if name not in _SPECS:
        raise dg.DagsterInvariantViolationError(
            f"op {name!r} is not a @skyplane_assets definition; call replicate() from one"
        )
    return _SPECS[name]


def register_spec(op_name: str, spec: ReplicationSpec) -> None:
    """Record the spec of a ``@skyplane_assets`` op, for :func:`spec_for`."""
    _SPECS[op_name] = spec


def make_spec(
    name: str,
    source: ReplicaSource,
    destinations: ReplicaDestination | Sequence[ReplicaDestination],
    *,
    partitions_def: dg.PartitionsDefinition[Any] | None = None,
    partition_prefix: PartitionPrefix = "{partition_key}/",
) -> ReplicationSpec:
    """Validate a replication and fix its partitioning (default: the upstream asset's)."""
    dests = (destinations,) if isinstance(destinations, ReplicaDestination) else tuple(destinations)
    if not dests:
        raise dg.DagsterInvalidDefinitionError("replicated_dataset needs at least one destination")
    names = [d.output_name for d in dests]
    if len(set(names)) != len(names):
        raise dg.DagsterInvalidDefinitionError(f"duplicate replica asset keys in {names}")
    parts = partitions_def if partitions_def is not None else source.partitions_def
    return ReplicationSpec(
        name=name,
        source=source,
        destinations=dests,
        partitions_def=parts,
        partition_prefix=partition_prefix,
    )
