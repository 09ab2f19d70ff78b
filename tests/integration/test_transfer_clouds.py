"""Cloud-to-cloud transfers between real emulator servers, through a relay gateway.

S3 (moto_server) -> Azure Blob (Azurite) and GCS (gcp-storage-emulator) -> S3, each with a
multipart-sized object and small batched objects, checked byte for byte at the destination.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops.testing.transfer import DST, RELAY, SRC, local_fleet, make_plan
from skyplane_ops.transfer import run_transfer

MiB = 1024 * 1024
pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def _fill(uri: str, options: dict[str, Any]) -> dict[str, bytes]:
    store = open_store(uri, options)
    data = {"big.bin": os.urandom(11 * MiB + 17), "dir/a.txt": b"alpha", "empty": b""}
    data.update({f"small/{i:03d}": os.urandom(3000) for i in range(40)})
    for key, blob in data.items():
        store.write(key, blob)
    return data


def _read_all(uri: str, options: dict[str, Any]) -> dict[str, bytes]:
    store = open_store(uri, options)
    return {o.key: store.read(o.key) for o in store.list()}


def _copy(tmp_path: Path, src: Any, dst: Any) -> None:
    bucket = f"b{uuid.uuid4().hex[:10]}"
    src_uri = src.make_bucket(bucket + "src")
    dst_uri = dst.make_bucket(bucket + "dst")
    data = _fill(src_uri, src.options)
    plan = make_plan([SRC, RELAY, DST])
    with local_fleet(plan, hooks=False) as (_, fleet):
        result = run_transfer(
            plan,
            fleet,
            src_uri,
            dst_uri,
            src_options=src.options,
            dst_options=dst.options,
            journal_dir=tmp_path / "journal",
            part_size=5 * MiB,
        )
    assert result.verified, result.verification
    assert result.objects == len(data)
    assert _read_all(dst_uri, dst.options) == data


def test_s3_to_azure_through_relay(tmp_path: Path, moto_s3: Any, azurite: Any) -> None:
    _copy(tmp_path, moto_s3, azurite)


def test_gcs_to_s3_through_relay(tmp_path: Path, gcs_emulator: Any, moto_s3: Any) -> None:
    _copy(tmp_path, gcs_emulator, moto_s3)
