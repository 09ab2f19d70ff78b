"""``SkyplaneTranslator``: how a replication's destinations become Dagster asset specs.

In the style of ``DagsterSlingTranslator`` and ``DagsterDbtTranslator``: subclass it and
override ``get_asset_spec`` (or one of the smaller ``get_*`` methods) to choose keys,
groups, kinds, metadata, tags and freshness policies; ``@skyplane_assets`` and the ``dg``
component build every replica's ``AssetSpec`` through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from skyplane_ops.dagster.locations import ReplicaDestination, store_kind
from skyplane_ops.dagster.spec import ReplicationSpec


class SkyplaneTranslator:
    """The default mapping; each method gets the replication and one destination."""

    def get_asset_key(self, spec: ReplicationSpec, dest: ReplicaDestination) -> dg.AssetKey:
        return dest.asset_key

    def get_group_name(self, spec: ReplicationSpec, dest: ReplicaDestination) -> str | None:
        return None

    def get_kinds(self, spec: ReplicationSpec, dest: ReplicaDestination) -> set[str]:
        return {"skyplane", store_kind(dest.uri)}

    def get_metadata(self, spec: ReplicationSpec, dest: ReplicaDestination) -> dict[str, Any]:
        return {"replica_uri": dest.uri, "region": dest.region, **dest.metadata}

    def get_tags(self, spec: ReplicationSpec, dest: ReplicaDestination) -> Mapping[str, str]:
        return {}

    def get_description(self, spec: ReplicationSpec, dest: ReplicaDestination) -> str:
        upstream = spec.source.asset_key
        what = upstream.to_user_string() if upstream else spec.source.uri
        return dest.description or f"Replica of {what} in {dest.region}"

    def get_freshness_policy(
        self, spec: ReplicationSpec, dest: ReplicaDestination
    ) -> dg.FreshnessPolicy | None:
        return None

    def get_asset_spec(self, spec: ReplicationSpec, dest: ReplicaDestination) -> dg.AssetSpec:
        """The whole spec of one replica (override this to change everything at once)."""
        upstream = spec.source.asset_key
        return dg.AssetSpec(
            key=self.get_asset_key(spec, dest),
            deps=[upstream] if upstream is not None else [],
            description=self.get_description(spec, dest),
            metadata=self.get_metadata(spec, dest),
            kinds=self.get_kinds(spec, dest),
            tags=dict(self.get_tags(spec, dest)),
            group_name=self.get_group_name(spec, dest),
            freshness_policy=self.get_freshness_policy(spec, dest),
            partitions_def=spec.partitions_def,
        )
