"""The issue's scenario as a user runs it: ``skyplane-ops cp s3://src/data/ s3://dst/data/``
on moto keeps Content-Type, -Encoding, Cache-Control, user metadata, tags and the source time,
through real gateway processes, and writes the replica in the storage class asked for;
``--no-metadata`` copies bytes only; a storage class S3 lacks is refused before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

MiB = 1024 * 1024
REGIONS = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]
pytestmark = [pytest.mark.emulator]


def _cli(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "SKYPLANE_OPS_HOME": str(home)},
        timeout=300,
    )


def _s3(moto_s3: Any) -> Any:
    return boto3.client("s3", endpoint_url=moto_s3.options["endpoint_url"], region_name="us-east-1")


@pytest.fixture
def buckets(moto_s3: Any) -> tuple[str, str]:
    name = f"m{uuid.uuid4().hex[:10]}"
    s3 = _s3(moto_s3)
    s3.create_bucket(Bucket=name + "src")
    s3.create_bucket(Bucket=name + "dst")
    for key, body in (("data/r.json", b"{}" * 100), ("data/big.bin", os.urandom(6 * MiB))):
        s3.put_object(
            Bucket=name + "src",
            Key=key,
            Body=body,
            ContentType="application/json",
            ContentEncoding="gzip",
            CacheControl="max-age=60",
            Metadata={"owner": "etl", "run-id": "42"},
            Tagging="team=data",
            StorageClass="STANDARD_IA",
        )
    return name + "src", name + "dst"


def test_cp_keeps_metadata_and_sets_storage_class(
    tmp_path: Path, moto_s3: Any, buckets: tuple[str, str]
) -> None:
    src, dst = buckets
    options = json.dumps(moto_s3.options)
    done = _cli(
        tmp_path,
        moto_s3.env,
        "cp",
        f"s3://{src}/data/",
        f"s3://{dst}/data/",
        *REGIONS,
        "--src-options",
        options,
        "--dst-options",
        options,
        "--chunk-mib",
        "5",
        "--storage-class",
        "glacier_ir",
        "--metadata-set",
        "copied-by=skyplane",
        "--json",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    s3 = _s3(moto_s3)
    for key in ("data/r.json", "data/big.bin"):  # whole, and multipart (6 MiB in 5 MiB parts)
        head = s3.head_object(Bucket=dst, Key=key)
        source = s3.head_object(Bucket=src, Key=key)
        assert head["ContentType"] == "application/json", key
        assert head["ContentEncoding"] == "gzip" and head["CacheControl"] == "max-age=60"
        assert head["Metadata"]["owner"] == "etl" and head["Metadata"]["run-id"] == "42"
        assert head["Metadata"]["copied-by"] == "skyplane"
        kept = head["Metadata"]["mtime"]  # the source's time, kept where S3 cannot set it
        assert kept.startswith(source["LastModified"].strftime("%Y-%m-%dT%H:%M:%S")), kept
        assert head["StorageClass"] == "GLACIER_IR", key
        tags = s3.get_object_tagging(Bucket=dst, Key=key)["TagSet"]
        assert tags == [{"Key": "team", "Value": "data"}], key


def test_no_metadata_copies_bytes_only(
    tmp_path: Path, moto_s3: Any, buckets: tuple[str, str]
) -> None:
    src, dst = buckets
    options = json.dumps(moto_s3.options)
    done = _cli(
        tmp_path, moto_s3.env, "cp", f"s3://{src}/data/", f"s3://{dst}/data/", *REGIONS,
        "--src-options", options, "--dst-options", options, "--chunk-mib", "5",
        "--no-metadata", "--json", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    s3 = _s3(moto_s3)
    head = s3.head_object(Bucket=dst, Key="data/r.json")
    assert head["ContentType"] != "application/json" and not head["Metadata"]
    assert s3.get_object_tagging(Bucket=dst, Key="data/r.json")["TagSet"] == []


def test_a_storage_class_s3_lacks_fails_before_any_work(
    tmp_path: Path, moto_s3: Any, buckets: tuple[str, str]
) -> None:
    src, dst = buckets
    done = _cli(
        tmp_path, moto_s3.env, "cp", f"s3://{src}/data/", f"s3://{dst}/data/", *REGIONS,
        "--dst-options", json.dumps(moto_s3.options), "--storage-class", "NEARLINE",
    )  # fmt: skip
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert "storage_class 'NEARLINE' is not one this provider has" in line
    assert "Traceback" not in done.stderr
    assert _s3(moto_s3).list_objects_v2(Bucket=dst).get("KeyCount", 0) == 0


def test_sync_sees_a_tag_change_and_verify_checks_metadata(
    tmp_path: Path, moto_s3: Any, buckets: tuple[str, str]
) -> None:
    """A tag changed at the source (same bytes, same ETag) is a change for ``sync``: the dry
    run says so, the sync copies it."""
    src, dst = buckets
    options = json.dumps(moto_s3.options)
    common = [
        f"s3://{src}/data/", f"s3://{dst}/data/", *REGIONS, "--src-options", options,
        "--dst-options", options, "--chunk-mib", "5", "--no-progress",
    ]  # fmt: skip
    done = _cli(tmp_path, moto_s3.env, "cp", *common, "--json")
    assert done.returncode == 0, done.stderr
    s3 = _s3(moto_s3)
    etag = s3.head_object(Bucket=src, Key="data/r.json")["ETag"]
    s3.put_object_tagging(
        Bucket=src, Key="data/r.json", Tagging={"TagSet": [{"Key": "team", "Value": "ml"}]}
    )
    assert s3.head_object(Bucket=src, Key="data/r.json")["ETag"] == etag  # bytes unchanged
    preview = _cli(tmp_path, moto_s3.env, "sync", *common, "--dry-run")
    assert preview.returncode == 0, preview.stderr
    assert "would copy r.json (200 bytes): metadata differs (tags)" in preview.stdout
    assert "big.bin" not in preview.stdout
    done = _cli(tmp_path, moto_s3.env, "sync", *common, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["objects"] == 1 and result["objects_skipped"] == 1
    tags = s3.get_object_tagging(Bucket=dst, Key="data/r.json")["TagSet"]
    assert tags == [{"Key": "team", "Value": "ml"}]
    again = _cli(tmp_path, moto_s3.env, "sync", *common, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["objects"] == 0
