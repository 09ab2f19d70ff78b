"""OpenLineage datasets for the copy and transfer operators, named by the OpenLineage spec.

``s3://bucket/p`` -> (``s3://bucket``, ``p``); ``gs://bucket/p`` -> (``gs://bucket``, ``p``);
``az://account/container/p`` -> (``abfss://container@account.dfs.core.windows.net``, ``p``);
``file:///abs/p`` -> (``file``, ``/abs/p``), as Airflow names the ``Asset(uri="file:///abs/p")``
outlet of the same task (``file://<host>`` only when the URI names a host), so the lineage
graph has one node for the replica, not two. The bucket root is named ``/``.
The OpenLineage provider is optional: without it the operators report no lineage.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse


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


def operator_lineage(src: str, dst: str, *more: str) -> Any:
    """An ``OperatorLineage`` with the source as input and the replica (one output per
    destination, with ``more``) as output (or None when the OpenLineage provider is not
    installed)."""
    try:
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    inputs = [Dataset(namespace=ns, name=name) for ns, name in [dataset_name(src)]]
    outputs = [Dataset(namespace=ns, name=name) for ns, name in map(dataset_name, [dst, *more])]
    return OperatorLineage(inputs=inputs, outputs=outputs)
