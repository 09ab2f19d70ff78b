"""Upstream dataset -> its replica in another region -> a downstream asset that reads the replica.

Locations are store URIs, so the same code runs against ``file://`` directories (the default:
two "regions" on this machine, served by local gateways) or ``s3://`` / ``gs://`` buckets: set
``SKYPLANE_EXAMPLE_SOURCE`` and ``SKYPLANE_EXAMPLE_REPLICA``. pyarrow reads and writes all of
them through ``pyarrow.fs.FileSystem.from_uri``.
"""

import os
import tempfile

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from skyplane_ops.dagster import ReplicaDestination, ReplicaSource, replicated_dataset

DATA_ROOT = os.environ.get(
    "SKYPLANE_EXAMPLE_DATA", os.path.join(tempfile.gettempdir(), "skyplane-dagster-example")
)
SOURCE_URI = os.environ.get("SKYPLANE_EXAMPLE_SOURCE", f"file://{DATA_ROOT}/us-east-1/events/")
REPLICA_URI = os.environ.get("SKYPLANE_EXAMPLE_REPLICA", f"file://{DATA_ROOT}/eu-west-1/events/")
SOURCE_REGION = os.environ.get("SKYPLANE_EXAMPLE_SOURCE_REGION", "aws:us-east-1")
REPLICA_REGION = os.environ.get("SKYPLANE_EXAMPLE_REPLICA_REGION", "aws:eu-west-1")
ROWS_PER_FILE = int(os.environ.get("SKYPLANE_EXAMPLE_ROWS", "50000"))
FILES_PER_PARTITION = 4

daily = dg.DailyPartitionsDefinition(start_date="2026-11-01", end_offset=1)


def partition_uri(base: str, partition_key: str) -> str:
    """One folder per day: the layout the replica factory maps partitions to (its default)."""
    return base.rstrip("/") + f"/{partition_key}/"


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, path.rstrip("/")


@dg.asset(
    partitions_def=daily,
    backfill_policy=dg.BackfillPolicy.single_run(),
    kinds={"parquet"},
    metadata={"uri": SOURCE_URI, "region": SOURCE_REGION},
)
def events(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """A day of synthetic click events, written as a few Parquet files (the upstream data)."""
    rows = 0
    for day in context.partition_keys:
        filesystem, folder = _fs(partition_uri(SOURCE_URI, day))
        filesystem.create_dir(folder, recursive=True)
        seed = sum(map(ord, day))
        for part in range(FILES_PER_PARTITION):
            n = ROWS_PER_FILE
            ids = pa.array(range(part * n, (part + 1) * n), pa.int64())
            table = pa.table(
                {
                    "event_id": ids,
                    "user_id": pc.bit_wise_and(pc.multiply(ids, seed + 7919), 0xFFFF),
                    "kind": pa.array(["view", "click", "buy", "view"] * (n // 4), pa.string()),
                    "amount": pc.divide(pc.cast(pc.bit_wise_and(ids, 1023), pa.float64()), 7.0),
                    "day": pa.array([day] * n, pa.string()),
                }
            )
            pq.write_table(table, f"{folder}/part-{part:04d}.parquet", filesystem=filesystem)
            rows += n
    return dg.MaterializeResult(metadata={"rows": rows, "files": FILES_PER_PARTITION})


events_replicas = replicated_dataset(
    "events_replication",
    source=ReplicaSource(uri=SOURCE_URI, region=SOURCE_REGION, asset=events),
    destinations=[ReplicaDestination(key="events_eu", uri=REPLICA_URI, region=REPLICA_REGION)],
)


@dg.asset(
    deps=["events_eu"],
    partitions_def=daily,
    backfill_policy=dg.BackfillPolicy.single_run(),
    kinds={"parquet"},
)
def events_eu_summary(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """Reads the replica (not the source): events and revenue per kind, for the EU team."""
    tables = []
    for day in context.partition_keys:
        filesystem, folder = _fs(partition_uri(REPLICA_URI, day))
        tables.append(ds.dataset(folder, format="parquet", filesystem=filesystem).to_table())
    table = pa.concat_tables(tables)
    by_kind = table.group_by("kind").aggregate([("event_id", "count"), ("amount", "sum")])
    counts = {
        str(k): int(c)
        for k, c in zip(
            by_kind.column("kind").to_pylist(),
            by_kind.column("event_id_count").to_pylist(),
            strict=True,
        )
    }
    context.log.info(f"replica rows per kind: {counts}")
    return dg.MaterializeResult(
        metadata={"rows": table.num_rows, **{f"rows_{k}": v for k, v in counts.items()}}
    )
