"""OpenLineage datasets for the copy and transfer operators, named by the OpenLineage spec.

``s3://bucket/p`` -> (``s3://bucket``, ``p``); ``gs://bucket/p`` -> (``gs://bucket``, ``p``);
``az://account/container/p`` -> (``abfss://container@account.dfs.core.windows.net``, ``p``);
``file:///abs/p`` -> (``file``, ``/abs/p``), as Airflow names the ``Asset(uri="file:///abs/p")``
outlet of the same task (``file://<host>`` only when the URI names a host), so the lineage
graph has one node for the replica, not two. The bucket root is named ``/``.
The OpenLineage provider is optional: without it the operators report no lineage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from skyplane_ops import api


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a store URI per the OpenLineage naming spec."""
    parsed = urlparse(uri)
    scheme = parsed.scheme
    if scheme in ("s3", "gs"):
        return f"{scheme}://{parsed.netloc}", parsed.path.strip("/") or "/"
    if scheme == "az":
        container, _, path = parsed.path.lstrip("/").partition("/")
        return (
            f"abfss://{container}@{parsed.netloc}.dfs.core.windows.net",
            path.strip("/") or "/",
        )
    if scheme == "https" and parsed.netloc.endswith(".blob.core.windows.net"):
        account = parsed.netloc.split(".", 1)[0]
        container, _, path = parsed.path.lstrip("/").partition("/")
        return f"abfss://{container}@{account}.dfs.core.windows.net", path.strip("/") or "/"
    if scheme == "file":
        return f"file://{parsed.netloc}" if parsed.netloc else "file", parsed.path.rstrip(
            "/"
        ) or "/"
    return f"{scheme}://{parsed.netloc}", parsed.path.strip("/") or "/"


def replica_facet(dst: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The replica's storage class, encryption and key (its write options: ``{}`` where the
    store's defaults apply), as the ``skyplane_replica`` output facet shows them."""
    try:
        return api.replica_properties(dst, options)
    except Exception:  # a bad option fails the task itself, not its lineage
        return {}


def operator_lineage(
    src: str, dst: str, *more: str, replica: Mapping[str, str] | None = None
) -> Any:
    """An ``OperatorLineage`` with the source as input and the replica (one output per
    destination, with ``more``) as output (or None when the OpenLineage provider is not
    installed); ``replica`` (``replica_facet``: the destinations share their connection's
    write options) becomes each output's ``skyplane_replica`` facet (``storageClass``,
    ``encryption``, ``kmsKey``)."""
    try:
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    inputs = [Dataset(namespace=ns, name=name) for ns, name in [dataset_name(src)]]
    facets = {"skyplane_replica": _facet(replica)} if replica else {}
    outputs = [
        Dataset(namespace=ns, name=name, facets=facets)
        for ns, name in map(dataset_name, [dst, *more])
    ]
    return OperatorLineage(inputs=inputs, outputs=outputs)


def _facet(replica: Mapping[str, str]) -> Any:
    """A custom OpenLineage dataset facet (attrs class, as the client's own facets are)."""
    import attr
    from airflow.providers.common.compat.openlineage.facet import DatasetFacet

    @attr.define
    class SkyplaneReplicaDatasetFacet(DatasetFacet):  # type: ignore[misc]
        storageClass: str | None = attr.field(default=None)
        encryption: str | None = attr.field(default=None)
        kmsKey: str | None = attr.field(default=None)

    return SkyplaneReplicaDatasetFacet(
        storageClass=replica.get("storage_class"),
        encryption=replica.get("encryption"),
        kmsKey=replica.get("kms_key"),
    )
