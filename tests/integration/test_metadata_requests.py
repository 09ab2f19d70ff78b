"""A copy keeps each object's metadata without a HEAD per object at the source (issue 37): S3's
GetObject and Azure's Get Blob answer the metadata with the bytes, GCS's objects.list gives a
chunk's objects at once. Real gateway processes copy from moto, Azurite and
gcp-storage-emulator, each behind a counting HTTP proxy that records every request the control
plane and the gateways send; the destination is a local folder, whose extended attributes show
that the metadata arrived."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.base import LIST_METADATA_MIN
from skyplane_ops.testing.emulators import AZURITE_ACCOUNT, azurite_connection_string, environ
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan
from skyplane_ops.transfer import run_transfer
from tests.integration.http_proxy import CountingProxy

pytestmark = [pytest.mark.emulator]

N = 12  # small objects: a few batched chunks
# GCS lists a chunk's metadata from 16 objects on (fewer are asked one by one: a listing costs
# 12.5 gets), and a copy's first chunks hold 8 objects (``todo.batch_limit``): 96 objects make
# chunks of 16 after the first 64.
N_GCS = 96
TAGGED = 3  # the first three carry a tag: one tag request each where the store keeps tags apart
META = {"content_type": "application/json", "cache_control": "max-age=60"}


@contextlib.contextmanager
def _behind_proxy(name: str, emu: Any) -> Iterator[tuple[CountingProxy, dict[str, Any]]]:
    """A counting proxy in front of ``emu``, and the source options that go through it."""
    if name == "s3":
        with CountingProxy(emu.options["endpoint_url"]) as proxy:
            yield proxy, {**emu.options, "endpoint_url": proxy.endpoint}
    elif name == "azure":
        conn = emu.env["AZURE_STORAGE_CONNECTION_STRING"]
        blob = next(p for p in conn.split(";") if p.startswith("BlobEndpoint="))
        upstream = urlsplit(blob.split("=", 1)[1])
        with CountingProxy(f"{upstream.scheme}://{upstream.netloc}") as proxy:
            port = urlsplit(proxy.endpoint).port
            assert port is not None
            with environ({"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(port)}):
                yield proxy, dict(emu.options)
    else:
        with CountingProxy(emu.env["STORAGE_EMULATOR_HOST"]) as proxy:
            with environ({"STORAGE_EMULATOR_HOST": proxy.endpoint}):
                yield proxy, dict(emu.options)


def _per_object(name: str, proxy: CountingProxy, bucket: str) -> tuple[list[str], list[str]]:
    """(metadata reads of one object: HEAD / Get Blob Properties / objects.get as JSON,
    tag reads) among the recorded requests."""
    heads, tags = [], []
    for method, target in proxy.requests:
        path, query = unquote(urlsplit(target).path), urlsplit(target).query
        if name == "s3" and path.startswith(f"/{bucket}/"):
            if method == "HEAD":
                heads.append(path)
            elif "tagging" in query:
                tags.append(path)
        elif name == "azure" and path.startswith(f"/{AZURITE_ACCOUNT}/{bucket}/"):
            if method == "HEAD":
                heads.append(path)
            elif "comp=tags" in query:
                tags.append(path)
        elif (
            name == "gcs"
            and path.startswith(f"/storage/v1/b/{bucket}/o/")
            and method == "GET"
            and "alt=media" not in query
        ):
            heads.append(path)  # objects.get of the JSON resource: GCS's HEAD
    return heads, tags


@pytest.mark.parametrize("name", ["s3", "azure", "gcs"])
def test_a_copy_reads_no_metadata_per_object(
    name: str, request: pytest.FixtureRequest, dirs: tuple[Path, Path, Path]
) -> None:
    emu = request.getfixturevalue(
        {"s3": "moto_s3", "azure": "azurite", "gcs": "gcs_emulator"}[name]
    )
    _, dst, journal = dirs
    bucket = f"md{uuid.uuid4().hex[:10]}"
    src_uri = emu.make_bucket(bucket)
    store: Any = open_store(src_uri, emu.options)
    count = N_GCS if name == "gcs" else N
    for i in range(count):
        meta: dict[str, Any] = {**META, "user": {"owner": "etl", "batch": str(i)}}
        if i < TAGGED:
            meta["tags"] = {"team": "data"}
        store.write(f"d/{i:02d}.json", os.urandom(500 + i), meta=meta)
    try:
        os.setxattr(dst, "user.probe", b"1")
        os.removexattr(dst, "user.probe")
    except OSError as exc:  # pragma: no cover - the file system of the test machine
        pytest.skip(f"no user extended attributes here: {exc}")

    plan = make_plan([SRC, DST])
    with _behind_proxy(name, emu) as (proxy, options):
        with local_fleet(plan, hooks=False) as (_, fleet):
            result = run_transfer(
                plan, fleet, src_uri, f"file://{dst}", src_options=options, journal_dir=journal
            )
        assert result.objects == count
        heads, tags = _per_object(name, proxy, bucket)
        requests = list(proxy.requests)
    if name == "gcs":
        # gcp-storage-emulator sends no x-goog-generation with the bytes, so the store's pinned
        # read asks the object's generation once after it (``GCSStore.read``; real GCS sends
        # it and this request is not made): one objects.get per object. A second one is a
        # metadata read: none for the objects of chunks of 16 or more, one listing each.
        per_key = Counter(heads)
        assert set(per_key) == {f"/storage/v1/b/{bucket}/o/d/{i:02d}.json" for i in range(count)}
        listed = [k for k, n in per_key.items() if n == 1]
        assert len(listed) >= LIST_METADATA_MIN, per_key
        chunk_lists = [t for m, t in requests if m == "GET" and "startOffset=" in t]
        assert 1 <= len(chunk_lists) <= len(listed) // LIST_METADATA_MIN, chunk_lists
    else:
        assert heads == [], f"{name}: metadata read per object: {heads}"
    # Tags where the store keeps them apart (S3, Azure): asked only of the objects that have
    # some (the GET's tag count); GCS keeps them in the resource the listing carries.
    assert len(tags) == (TAGGED if name in ("s3", "azure") else 0), tags
    for i in range(count):  # and the metadata arrived with every object
        path = dst / f"d/{i:02d}.json"
        assert os.getxattr(path, "user.batch").decode() == str(i)
        assert os.getxattr(path, "user.skyplane.cache_control") == b"max-age=60"
        tag = os.getxattr(path, "user.skyplane.tag.team") if i < TAGGED else None
        assert tag == (b"data" if i < TAGGED else None)


def test_verify_full_checks_metadata_by_head_only(
    moto_s3: Any, dirs: tuple[Path, Path, Path]
) -> None:
    """``--verify full`` between two S3 buckets (moto, every request recorded): a multipart
    replica (no write vouched for it) is checked by HEAD and its tags, never by reading bytes
    back; the small objects' checked PUTs stored their metadata atomically and are not asked
    again. The source's small objects are read without a HEAD each."""
    _, _, journal = dirs
    bucket = f"vf{uuid.uuid4().hex[:10]}"
    src_uri, dst_uri = moto_s3.make_bucket(bucket + "s"), moto_s3.make_bucket(bucket + "d")
    store: Any = open_store(src_uri, moto_s3.options)
    meta = {**META, "user": {"owner": "etl"}, "tags": {"team": "data"}}
    for i in range(4):
        store.write(f"s/{i}.json", b"{}" * (100 + i), meta=meta)
    upload = store.create_multipart("big.bin", meta=meta)
    store.upload_part("big.bin", upload, 1, os.urandom(5 * 1024 * 1024))
    store.upload_part("big.bin", upload, 2, b"tail")
    store.complete_multipart("big.bin", upload, [1, 2])

    plan = make_plan([SRC, DST])
    with CountingProxy(moto_s3.options["endpoint_url"]) as proxy:
        options = {**moto_s3.options, "endpoint_url": proxy.endpoint}
        with local_fleet(plan, hooks=False) as (_, fleet):
            result = run_transfer(
                plan,
                fleet,
                src_uri,
                dst_uri,
                src_options=options,
                dst_options=options,
                journal_dir=journal,
                part_size=5 * 1024 * 1024,
                verify="full",
            )
        sent = list(proxy.requests)
    assert result.verified, result.verification
    dst_reads = [t for m, t in sent if m == "GET" and t.startswith(f"/{bucket}d/") and "?" not in t]
    assert dst_reads == [], f"verify read replica bytes back: {dst_reads}"
    dst_heads = [t for m, t in sent if m == "HEAD" and t.startswith(f"/{bucket}d/")]
    assert dst_heads and all(t.startswith(f"/{bucket}d/big.bin") for t in dst_heads), dst_heads
    src_heads = [t for m, t in sent if m == "HEAD" and t.startswith(f"/{bucket}s/s/")]
    assert src_heads == [], src_heads
    replica: Any = open_store(dst_uri, moto_s3.options)
    for key in ("s/0.json", "big.bin"):
        got = replica.head_meta(key)
        assert got["tags"] == {"team": "data"} and got["cache_control"] == "max-age=60", key
