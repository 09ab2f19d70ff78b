"""Example ETL DAG: produce a Parquet dataset, replicate it with skyplane-ops, use the replica.

Copy this file into your ``dags/`` folder. Three steps:

1. ``produce_dataset`` writes a Parquet dataset (pyarrow) at the source;
2. ``replicate`` is one call to ``skyplane_transfer_group``: plan >> provision (setup) >>
   transfer >> deprovision (teardown), with the destination as an Asset outlet whose event
   carries bytes, objects, Gbit/s, cost and route;
3. ``check_replica`` reads the replica and checks it against what was produced.

As shipped it runs on one machine with no cloud account: the ``skyplane_default``
connection may be absent (local backend: gateways are local processes) and the source and
destination are ``file://`` folders standing in for two regions. For real clouds, point
``SKYPLANE_EXAMPLE_SRC`` / ``SKYPLANE_EXAMPLE_DST`` at ``s3://``, ``gs://`` or ``az://`` URIs,
set the regions, and give ``src_conn_id`` / ``dst_conn_id`` (aws, google_cloud_platform or
wasb connections) and a ``skyplane`` connection with your provisioner backend, e.g.::

    AIRFLOW_CONN_SKYPLANE_DEFAULT='{"conn_type": "skyplane",
      "extra": {"backend": "local", "max_vms_per_region": 1}}'
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Asset, dag, task

from skyplane_ops.airflow import skyplane_transfer_group

BASE = os.environ.get("SKYPLANE_EXAMPLE_DIR", "/tmp/skyplane-etl-example")
SRC = os.environ.get("SKYPLANE_EXAMPLE_SRC", f"file://{BASE}/source/events/")
DST = os.environ.get("SKYPLANE_EXAMPLE_DST", f"file://{BASE}/replica/events/")
SRC_REGION = os.environ.get("SKYPLANE_EXAMPLE_SRC_REGION", "aws:us-east-1")
DST_REGION = os.environ.get("SKYPLANE_EXAMPLE_DST_REGION", "gcp:europe-west4")

REPLICA = Asset(name="events_replica", uri=DST)


def _local_dir(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


@dag(
    dag_id="skyplane_etl_example",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    params={"rows": 200_000, "files": 8},
    tags=["skyplane-ops", "example"],
    doc_md=__doc__,
)
def skyplane_etl_example() -> None:
    @task
    def produce_dataset(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write ``files`` Parquet files with ``rows`` rows in total; return their totals."""
        import shutil

        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = int((params or {}).get("rows", 200_000))
        files = int((params or {}).get("files", 8))
        src_dir = _local_dir(SRC)
        # A fresh demo run: start from empty folders (a real pipeline would not do this).
        for folder in (src_dir, _local_dir(DST)):
            if not folder.startswith(("s3:", "gs:", "az:")):
                shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(src_dir, exist_ok=True)
        per_file = -(-rows // files)
        total_bytes = 0
        amount_sum = 0
        for index in range(files):
            start = index * per_file
            ids = list(range(start, min(rows, start + per_file)))
            amounts = [(i * 7919) % 10_000 for i in ids]
            table = pa.table(
                {
                    "event_id": pa.array(ids, pa.int64()),
                    "user": pa.array([f"user-{i % 977}" for i in ids]),
                    "amount_cents": pa.array(amounts, pa.int64()),
                }
            )
            path = os.path.join(src_dir, f"part-{index:05d}.parquet")
            pq.write_table(table, path)
            total_bytes += os.path.getsize(path)
            amount_sum += sum(amounts)
        return {"rows": rows, "files": files, "bytes": total_bytes, "amount_sum": amount_sum}

    produced = produce_dataset()

    replicate = skyplane_transfer_group(
        "replicate",
        src=SRC,
        dst=DST,
        src_region=SRC_REGION,
        dst_region=DST_REGION,
        # Bounds and sizes are templated: the volume comes from the upstream task's XCom.
        volume_gb="{{ ti.xcom_pull(task_ids='produce_dataset')['bytes'] / 1e9 }}",
        include=["*.parquet"],
        dst_asset=REPLICA,
        # Defers when the deployment sets [operators] default_deferrable = True (the usual
        # Airflow switch); pass deferrable=True/False to decide here instead.
        timeout=timedelta(minutes=30),
        poll_interval=1.0,
        transfer_kwargs={"retries": 2, "retry_delay": timedelta(seconds=2)},
    )

    @task(inlets=[REPLICA])
    def check_replica(expected: dict[str, Any]) -> dict[str, Any]:
        """Read the replica with pyarrow and compare it with what was produced."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds
        from airflow.sdk import get_current_context

        table = ds.dataset(_local_dir(DST), format="parquet").to_table()
        got = {
            "rows": table.num_rows,
            "amount_sum": pc.sum(table["amount_cents"]).as_py() or 0,
            "files": len(ds.dataset(_local_dir(DST), format="parquet").files),
        }
        for key in ("rows", "amount_sum", "files"):
            if got[key] != expected[key]:
                raise ValueError(f"replica {key} = {got[key]}, expected {expected[key]}")
        summary = get_current_context()["ti"].xcom_pull(task_ids="replicate.transfer") or {}
        print(
            "transfer summary: "
            + ", ".join(
                f"{k}={summary.get(k)}"
                for k in ("transfer_id", "objects", "bytes", "seconds", "gbps", "route")
            )
        )
        return {**got, "ok": True, "transfer_id": summary.get("transfer_id")}

    produced >> replicate >> check_replica(produced)


etl_dag = skyplane_etl_example()

if __name__ == "__main__":
    etl_dag.test()
