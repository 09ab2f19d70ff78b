"""``@skyplane_assets``: replica assets as a decorated function, like ``@sling_assets``.

::

    @skyplane_assets(source=ReplicaSource(...), destinations=[ReplicaDestination(...)])
    def events_replicas(context: dg.AssetExecutionContext, skyplane: SkyplaneResource):
        yield from skyplane.replicate(context)

The result is a standard ``AssetsDefinition`` (one step: plan, provision, transfer; see
:mod:`.steps`); the body may add its own work before or after ``replicate``. Keys, groups,
kinds and metadata come from a :class:`~.translator.SkyplaneTranslator`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from skyplane_ops.dagster.locations import PartitionPrefix, ReplicaDestination, ReplicaSource
from skyplane_ops.dagster.spec import make_spec, register_spec
from skyplane_ops.dagster.translator import SkyplaneTranslator


def skyplane_assets(
    *,
    source: ReplicaSource,
    destinations: ReplicaDestination | Sequence[ReplicaDestination],
    name: str | None = None,
    translator: SkyplaneTranslator | None = None,
    partitions_def: dg.PartitionsDefinition[Any] | None = None,
    partition_prefix: PartitionPrefix = "{partition_key}/",
    backfill_policy: dg.BackfillPolicy | None = None,
    retry_policy: dg.RetryPolicy | None = None,
    op_tags: Mapping[str, Any] | None = None,
    pool: str | None = None,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """Decorate a function whose body calls ``skyplane.replicate(context)``."""
    translate = translator or SkyplaneTranslator()

    def wrap(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        op_name = name or fn.__name__
        spec = make_spec(
            op_name,
            source,
            destinations,
            partitions_def=partitions_def,
            partition_prefix=partition_prefix,
        )
        policy = backfill_policy
        if policy is None and spec.partitions_def is not None:
            policy = dg.BackfillPolicy.single_run()
        asset_specs = [translate.get_asset_spec(spec, d) for d in spec.destinations]
        # The run reports under the translated keys.
        register_spec(
            op_name,
            dataclasses.replace(
                spec,
                destinations=tuple(
                    dataclasses.replace(d, key=s.key)
                    for d, s in zip(spec.destinations, asset_specs, strict=True)
                ),
            ),
        )
        return dg.multi_asset(
            name=op_name,
            specs=asset_specs,
            partitions_def=spec.partitions_def,
            backfill_policy=policy,
            retry_policy=retry_policy,
            op_tags=dict(op_tags or {}),
            pool=pool,
            can_subset=False,
        )(fn)

    return wrap
