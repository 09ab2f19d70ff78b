"""``--verify full`` trusts the store's own CRC32C where the store keeps one, on real emulators.

S3 (moto_server): the destination is reached through a small counting HTTP proxy in front of
moto, so the test sees every request the gateways and the control plane make. After a copy with
``verify="full"`` no GET of object bytes may have reached the destination (HEADs only), and a
corrupted stored object must still be caught. moto stores and returns the CRC32C it is given
(PutObject) or computes (FULL_OBJECT multipart); it does NOT check a ChecksumCRC32C against the
body it receives (real S3 refuses such a request with BadDigest), so transit protection by S3
is not tested here.

GCS (gcp-storage-emulator) reports a crc32c in its listings, so verification reads nothing back;
Azure (Azurite): see test_azure_checksums.py; here only its ``checksums=off`` read-back.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.checksum import crc32c
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan
from skyplane_ops.transfer import run_transfer
from skyplane_ops.transfer.checksum import crc32c_b64
from skyplane_ops.transfer.verify import verify_objects
from tests.integration.http_proxy import CountingProxy

MiB = 1024 * 1024
pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.fixture
def s3_proxy(moto_s3: Any) -> Iterator[CountingProxy]:
    with CountingProxy(moto_s3.options["endpoint_url"]) as proxy:
        yield proxy


def _dataset() -> dict[str, bytes]:
    data = {"big.bin": os.urandom(11 * MiB + 17), "dir/a.txt": b"alpha"}
    data.update({f"small/{i:02d}": os.urandom(3000) for i in range(12)})
    return data


def _expected(data: dict[str, bytes]) -> dict[str, tuple[int, int]]:
    return {k: (len(v), crc32c(v)) for k, v in data.items()}


def test_s3_verify_full_reads_nothing_back_and_catches_corruption(
    tmp_path: Path, moto_s3: Any, s3_proxy: CountingProxy
) -> None:
    bucket = f"n{uuid.uuid4().hex[:10]}"
    src_dir = tmp_path / "src"
    data = _dataset()
    for key, blob in data.items():
        (src_dir / key).parent.mkdir(parents=True, exist_ok=True)
        (src_dir / key).write_bytes(blob)
    moto_s3.make_bucket(bucket)
    dst_uri = moto_s3.uri_for(bucket)
    dst_options = {**moto_s3.options, "endpoint_url": s3_proxy.endpoint}

    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, fleet):
        result = run_transfer(
            plan,
            fleet,
            f"file://{src_dir}/",
            dst_uri,
            dst_options=dst_options,
            journal_dir=tmp_path / "journal",
            part_size=5 * MiB,
            verify="full",
        )
    assert result.verified, result.verification
    assert result.verification["method"] == "native crc32c", result.verification
    assert s3_proxy.object_gets(bucket) == [], "verify read object bytes back"
    heads = [p for m, p in s3_proxy.requests if m == "HEAD" and p.startswith(f"/{bucket}/")]
    # PutObject's answer carried the CRC32C S3 stored, equal to the source's: those writes are
    # vouched for and not asked again; the multipart object's checksum is asked for with a HEAD.
    assert f"/{bucket}/big.bin" in heads
    assert not [h for h in heads if "/small/" in h], heads

    # The multipart object carries a full-object CRC32C equal to the source's.
    dst = open_store(dst_uri, dst_options)
    expected = _expected(data)
    assert dst.head("big.bin").checksums["crc32c"] == crc32c_b64(expected["big.bin"][1])

    # Corruption 1: same size, rewritten with a (correct) CRC32C of the wrong bytes: the
    # store's checksum no longer matches the source's, caught without a read-back.
    bad = bytearray(data["small/03"])
    bad[100] ^= 0xFF
    dst.write("small/03", bytes(bad))
    # Corruption 2: same size, rewritten by another tool without any checksum: the store cannot
    # vouch, so verification falls back to reading it back, and catches it.
    raw = moto_s3_client(moto_s3)
    worse = bytearray(data["dir/a.txt"])
    worse[0] ^= 0x01
    raw.put_object(Bucket=bucket, Key="dir/a.txt", Body=bytes(worse))

    before = len(s3_proxy.object_gets(bucket))
    check = verify_objects(dst, expected, "full")
    assert check.status == "failed"
    assert sorted(check.failures) == [
        "dir/a.txt: crc32c mismatch on read-back",
        "small/03: crc32c mismatch",
    ]
    assert check.method == "native crc32c+read-back crc32c"
    gets = s3_proxy.object_gets(bucket)[before:]
    assert gets and all(p == f"/{bucket}/dir/a.txt" for p in gets)


def moto_s3_client(moto_s3: Any) -> Any:
    """A plain boto3 client straight to moto (no proxy), writing as another tool would."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto_s3.options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id=moto_s3.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=moto_s3.env["AWS_SECRET_ACCESS_KEY"],
    )


def test_s3_store_reports_full_object_crc32c(moto_s3: Any) -> None:
    """Single PutObject and multipart both end with the whole object's CRC32C."""
    store = open_store(moto_s3.make_bucket(f"c{uuid.uuid4().hex[:10]}"), moto_s3.options)
    small = os.urandom(1000)
    info = store.write("one", small)
    head = store.head("one")
    assert head.checksums["crc32c"] == info.checksums["crc32c"]
    parts = [os.urandom(5 * MiB), os.urandom(123)]
    upload = store.create_multipart("multi")
    for n, part in enumerate(parts, 1):
        store.upload_part("multi", upload, n, part)
    done = store.complete_multipart("multi", upload, [1, 2])
    whole = b"".join(parts)
    check = verify_objects(
        store, {"one": (1000, crc32c(small)), "multi": (len(whole), crc32c(whole))}
    )
    assert check.status == "passed" and check.method == "native crc32c", check.to_dict()
    assert "crc32c" in done.checksums


def test_gcs_verify_uses_listed_crc32c(gcs_emulator: Any) -> None:
    """gcp-storage-emulator lists crc32c (single uploads and composed objects)."""
    store = open_store(gcs_emulator.make_bucket(f"g{uuid.uuid4().hex[:10]}"), gcs_emulator.options)
    data = {"one": os.urandom(1000)}
    store.write("one", data["one"])
    parts = [os.urandom(300_000), os.urandom(77)]
    upload = store.create_multipart("multi")
    for n, part in enumerate(parts, 1):
        store.upload_part("multi", upload, n, part)
    store.complete_multipart("multi", upload, [1, 2])
    data["multi"] = b"".join(parts)
    check = verify_objects(store, _expected(data))
    assert check.status == "passed" and check.method == "native crc32c", check.to_dict()
    store.write("one", bytes(b ^ 1 for b in data["one"]))
    check = verify_objects(store, _expected(data))
    assert check.failures == ["one: crc32c mismatch"]


def test_azure_checksums_off_falls_back_to_read_back(azurite: Any) -> None:
    """With ``checksums=off`` the Azure store sends no MD5 and records no CRC32C: verification
    reads back (as for any blob another tool wrote; see test_azure_checksums.py)."""
    uri = azurite.make_bucket(f"a{uuid.uuid4().hex[:10]}")
    store = open_store(uri, {**azurite.options, "checksums": "off"})
    data = {"one": os.urandom(1000)}
    store.write("one", data["one"])
    assert "crc32c" not in store.head("one").checksums
    check = verify_objects(store, _expected(data))
    assert check.status == "passed" and check.method == "read-back crc32c", check.to_dict()
    store.write("one", bytes(b ^ 1 for b in data["one"]))
    check = verify_objects(store, _expected(data))
    assert check.failures == ["one: crc32c mismatch on read-back"]
    with pytest.raises(ValueError, match="checksums"):
        open_store(uri, {**azurite.options, "checksums": "crc64"})


def test_s3_checksums_off_reads_back(moto_s3: Any) -> None:
    """``checksums=off`` (for S3-compatible services without additional checksums) sends none
    and verification falls back to reading back."""
    uri = moto_s3.make_bucket(f"o{uuid.uuid4().hex[:10]}")
    store = open_store(uri, {**moto_s3.options, "checksums": "off"})
    data = {"one": os.urandom(1000)}
    store.write("one", data["one"])
    assert "crc32c" not in store.head("one").checksums
    check = verify_objects(store, _expected(data))
    assert check.status == "passed" and check.method == "read-back crc32c", check.to_dict()
    with pytest.raises(ValueError, match="checksums"):
        open_store(uri, {**moto_s3.options, "checksums": "md5"})
