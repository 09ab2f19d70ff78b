"""Where a replicated dataset lives: its source, its destinations and partition prefixes.

A partition of a partitioned dataset is a "folder" under the dataset's URI. The default maps a
partition key ``2026-11-20`` to the prefix ``2026-11-20/``; pass a template such as
``"dt={partition_key}/"`` or any callable to match an existing layout (Hive-style, nested dates).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

PartitionPrefix = str | Callable[[str], str]

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_]+")


@dataclass(frozen=True)
class ReplicaSource:
    """The dataset to replicate: its store URI, its region and (usually) the asset writing it."""

    uri: str
    region: str
    asset: dg.AssetKey | str | Sequence[str] | dg.AssetsDefinition | dg.AssetSpec | None = None

    @property
    def asset_key(self) -> dg.AssetKey | None:
        if self.asset is None:
            return None
        if isinstance(self.asset, dg.AssetsDefinition):
            return self.asset.key
        if isinstance(self.asset, dg.AssetSpec):
            return self.asset.key
        return dg.AssetKey.from_coercible(self.asset)

    @property
    def partitions_def(self) -> dg.PartitionsDefinition[Any] | None:
        if isinstance(self.asset, dg.AssetsDefinition):
            return self.asset.partitions_def
        if isinstance(self.asset, dg.AssetSpec):
            return self.asset.partitions_def
        return None


@dataclass(frozen=True)
class ReplicaDestination:
    """One replica: the asset key Dagster shows, its store URI and its region."""

    key: dg.AssetKey | str | Sequence[str]
    uri: str
    region: str
    description: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def asset_key(self) -> dg.AssetKey:
        return dg.AssetKey.from_coercible(self.key)

    @property
    def output_name(self) -> str:
        """A valid Dagster output name derived from the asset key."""
        return _SAFE_NAME.sub("_", "__".join(self.asset_key.path))


def prefix_for(partition_key: str, template: PartitionPrefix) -> str:
    """The folder of one partition, always ending with ``/`` (the stores' folder convention)."""
    prefix = (
        template(partition_key)
        if callable(template)
        else template.format(partition_key=partition_key)
    )
    prefix = prefix.lstrip("/")
    if ".." in prefix.split("/"):
        raise ValueError(f"partition prefix must not contain '..': {prefix!r}")
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def join_uri(base: str, prefix: str) -> str:
    """``base`` with ``prefix`` appended as a sub-folder (``base`` is a folder URI)."""
    if not prefix:
        return base
    return base.rstrip("/") + "/" + prefix


def store_kind(uri: str) -> str:
    """A Dagster ``kinds`` tag for a store URI (shown as an icon in the UI)."""
    scheme = uri.split("://", 1)[0].lower()
    if scheme == "https" or scheme == "az":
        return "azure"
    return {"s3": "s3", "gs": "gcs", "file": "file", "mem": "memory"}.get(scheme, scheme)
