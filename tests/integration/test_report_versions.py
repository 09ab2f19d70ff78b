"""The report names the destination version each copy wrote (issue 41), on real emulators:
S3's VersionId in a versioned moto bucket (a whole object and a multipart one), GCS's
generation, Azurite's ETag (Azurite keeps no versions). The version comes from the write's own
answer: a second copy over the same keys records the new versions, each of which the store
lists, and the older ones stay listed beside them."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest

from gateway_agent.stores import open_store
from skyplane_ops import api
from skyplane_ops.testing.emulators import MOTO_ENV
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan, write_dataset
from skyplane_ops.transfer import run_transfer

MiB = 1024 * 1024
pytestmark = [pytest.mark.emulator, pytest.mark.slow]
SIZES = {"big.bin": 11 * MiB + 5, "a.txt": 10, "d/b": 900}


def _versions(tmp_path: Path, dst_uri: str, dst_options: dict[str, Any], run: int) -> dict:
    """Copy a fresh dataset to ``dst_uri`` (over the last run's) and read the report's
    ``dst_version`` per key."""
    src = tmp_path / f"src{run}"
    write_dataset(src, SIZES)
    reports = tmp_path / "reports"
    plan = make_plan([SRC, DST])
    request = api.TransferRequest.build(
        str(src),
        dst_uri,
        dst_options=dst_options,
        journal_dir=str(tmp_path / f"journal{run}"),
        part_size=5 * MiB,
        report_uri=str(reports),
    )
    with local_fleet(plan, hooks=False) as (_, fleet):
        result = run_transfer(plan, fleet, request)
    assert result.verified
    summary = api.load_summary(result.uris["report"], {})
    folder, _, name = summary["objects_uri"].rpartition("/")
    rows = pq.read_table(io.BytesIO(open_store(folder, {}).read(name))).to_pylist()
    assert {r["key"] for r in rows} == set(SIZES)
    return {r["key"]: r["dst_version"] for r in rows}


def test_s3_versioned_bucket_reports_version_ids(tmp_path: Path, moto_s3: Any) -> None:
    bucket = f"v{uuid.uuid4().hex[:10]}"
    moto_s3.make_bucket(bucket)
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_s3.options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id=MOTO_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    dst = moto_s3.uri_for(bucket)
    first = _versions(tmp_path, dst, moto_s3.options, 1)
    second = _versions(tmp_path, dst, moto_s3.options, 2)
    listed = s3.list_object_versions(Bucket=bucket)["Versions"]
    latest = {v["Key"]: v["VersionId"] for v in listed if v["IsLatest"]}
    older = {v["Key"]: v["VersionId"] for v in listed if not v["IsLatest"]}
    assert second == latest  # the big one came from CompleteMultipartUpload's answer
    assert first == older  # what the first run wrote, now the previous version
    assert all(first[k] != second[k] for k in SIZES)


def test_gcs_reports_generations(tmp_path: Path, gcs_emulator: Any) -> None:
    bucket = f"v{uuid.uuid4().hex[:10]}"
    dst = gcs_emulator.make_bucket(bucket)
    first = _versions(tmp_path, dst, gcs_emulator.options, 1)
    second = _versions(tmp_path, dst, gcs_emulator.options, 2)
    store = open_store(dst, gcs_emulator.options)
    assert second == {k: store.head(k).version for k in SIZES}
    assert all(first[k] and first[k] != second[k] for k in SIZES)


def test_azure_without_versioning_reports_etags(tmp_path: Path, azurite: Any) -> None:
    container = f"v{uuid.uuid4().hex[:10]}"
    dst = azurite.make_bucket(container)
    got = _versions(tmp_path, dst, azurite.options, 1)
    store = open_store(dst, azurite.options)
    assert got == {k: store.head(k).etag for k in SIZES}
