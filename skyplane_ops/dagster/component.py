"""``SkyplaneReplicationComponent``: replications declared in YAML, as a ``dg`` component.

Like the Sling replication component: ``dg scaffold defs
skyplane_ops.dagster.SkyplaneReplicationComponent my_replicas`` (or a hand-written
``defs.yaml``), then::

    type: skyplane_ops.dagster.SkyplaneReplicationComponent
    attributes:
      skyplane: {backend: local, max_cost_usd: 5.0}
      replications:
        - name: events_replication
          source: {uri: "s3://raw/events/", region: "aws:us-east-1", asset: events}
          destinations:
            - {key: events_eu, uri: "gs://lake-eu/events/", region: "gcp:europe-west4"}
          daily_partitions_start: "2026-11-01"
          freshness_hours: 26

Each replication becomes a standard multi-asset (one step) with its partitioned "replica
matches source" checks; ``skyplane`` configures the ``SkyplaneResource`` the definitions bind
(secrets as ``{env: NAME}`` in ``backend_secrets``, resolved by Dagster at run time).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import dagster as dg

from skyplane_ops.dagster.factory import RESOURCE_KEY, replicated_dataset
from skyplane_ops.dagster.locations import ReplicaDestination, ReplicaSource
from skyplane_ops.dagster.resource import SkyplaneResource


class SourceModel(dg.Model):
    """Where the dataset is: its URI, its region and the asset that writes it (optional)."""

    uri: str
    region: str
    asset: str | None = None


class DestinationModel(dg.Model):
    """One replica: its asset key (``a/b`` for a multi-part key), URI and region."""

    key: str
    uri: str
    region: str
    description: str | None = None
    metadata: dict[str, Any] = {}


class ReplicationModel(dg.Model):
    """One source and its replicas, optionally daily-partitioned, with a freshness target."""

    name: str
    source: SourceModel
    destinations: list[DestinationModel]
    daily_partitions_start: str | None = None
    partition_prefix: str = "{partition_key}/"
    group_name: str | None = None
    freshness_hours: float | None = None
    retries: int = 0


class SkyplaneReplicationComponent(dg.Component, dg.Resolvable, dg.Model):
    """Replicated datasets from YAML: assets, partitioned checks and the skyplane resource."""

    replications: list[ReplicationModel]
    skyplane: dict[str, Any] = {}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        assets: list[dg.AssetsDefinition] = []
        checks: list[dg.AssetChecksDefinition] = []
        for rep in self.replications:
            parts = (
                dg.DailyPartitionsDefinition(start_date=rep.daily_partitions_start)
                if rep.daily_partitions_start
                else None
            )
            source = ReplicaSource(
                uri=rep.source.uri,
                region=rep.source.region,
                asset=dg.AssetKey.from_user_string(rep.source.asset) if rep.source.asset else None,
            )
            dests = [
                ReplicaDestination(
                    key=dg.AssetKey.from_user_string(d.key),
                    uri=d.uri,
                    region=d.region,
                    description=d.description,
                    metadata=dict(d.metadata),
                )
                for d in rep.destinations
            ]
            freshness = (
                dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=rep.freshness_hours))
                if rep.freshness_hours
                else None
            )
            ds = replicated_dataset(
                rep.name,
                source,
                dests,
                partitions_def=parts,
                partition_prefix=rep.partition_prefix,
                group_name=rep.group_name,
                freshness_policy=freshness,
                retry_policy=dg.RetryPolicy(max_retries=rep.retries) if rep.retries else None,
            )
            assets.append(ds.assets_def)
            checks.extend(ds.checks)
        return dg.Definitions(
            assets=assets,
            asset_checks=checks,
            resources={RESOURCE_KEY: SkyplaneResource(**self.skyplane)},
        )
