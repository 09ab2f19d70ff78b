"""Metadata conformance (``objmeta``, ``docs/metadata.md``): every backend keeps what it is
given, and every store pair carries it from one to the other as the table says, for whole
objects and multipart/block/compose uploads, with odd keys and values. Real servers: moto,
Azurite and gcp-storage-emulator (``tests/stores/conftest.py``)."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest

from gateway_agent.stores import ObjectStore
from gateway_agent.stores.base import ListsMetadata, ReadsWithMetadata, SupportsMetadata
from gateway_agent.stores.errors import ObjectNotFoundError, SourceChangedError
from gateway_agent.stores.objmeta import (
    MetadataNotSupportedError,
    azure_key,
    differs,
    policy,
    travelling,
)
from tests.stores.conftest import PREFIX, Backend

OLD_NS = 1_600_000_000_123_456_789

RICH: dict[str, Any] = {
    "content_type": "application/json",
    "content_encoding": "gzip",
    "content_disposition": 'attachment; filename="r.json"',
    "content_language": "de",
    "cache_control": "max-age=60",
    "user": {"owner": "etl", "run-id": "42", "note": "für 🚀 " + "x" * 300},
    "tags": {"team": "data", "cost center": "a/b"},
    "mtime_ns": OLD_NS,
}


def meta_store(store: ObjectStore) -> Any:
    assert isinstance(store, SupportsMetadata)
    return cast(Any, store)


def expected(meta: dict[str, Any], backend: str) -> dict[str, Any]:
    """What ``backend`` gives back of ``meta``, by the documented table."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in meta.items()}
    if backend in ("s3", "azure"):  # header names: case-insensitive, kept lowercased
        rename = azure_key if backend == "azure" else (lambda k: k)
        out["user"] = {rename(k).lower(): v for k, v in out.get("user", {}).items()}
    if backend == "local":
        out.pop("content_type", None)  # from the extension (the keys below have none)
    return out


def same(want: dict[str, Any], have: dict[str, Any], backend: str) -> None:
    """``have`` holds ``want`` (times: S3/Azure/GCS keep the source's in metadata exactly;
    local files to the nanosecond)."""
    assert differs(want, have) == [], (want, have)
    assert have.get("mtime_ns") == want.get("mtime_ns"), backend


def test_metadata_round_trip(backend: Backend, store: ObjectStore) -> None:
    """Whole object and multipart upload: what is written is what ``head_meta`` reads."""
    s = meta_store(store)
    s.write("whole", b"{}", meta=RICH)
    same(expected(RICH, backend.name), travelling(s.head_meta("whole")), backend.name)
    part = max(store.capabilities.min_part_size, 1024)
    upload = s.create_multipart("multi", meta=RICH)
    store.upload_part("multi", upload, 1, b"a" * part)
    store.upload_part("multi", upload, 2, b"b" * 10)
    if getattr(store, "META_AT_COMPLETE", False):
        s.complete_multipart("multi", upload, [1, 2], meta=RICH)
    else:
        store.complete_multipart("multi", upload, [1, 2])
    if backend.name != "gcs":
        # gcp-storage-emulator drops the connection when it serves an object whose custom
        # metadata is not ASCII (it echoes it as x-goog-meta-* headers); GCS sends metadata in
        # the JSON resource only. The bytes of composed objects: test_conformance.
        assert store.read("multi") == b"a" * part + b"b" * 10
    same(expected(RICH, backend.name), travelling(s.head_meta("multi")), backend.name)


def test_an_object_without_metadata_reads_as_little(backend: Backend, store: ObjectStore) -> None:
    """No empty fields travel; a plain write has only its time (and a local Content-Type
    from the extension)."""
    store.write("plain.csv", b"x")
    meta = travelling(meta_store(store).head_meta("plain.csv"))
    assert set(meta) - {"content_type", "mtime_ns"} == set()
    if backend.name == "local":
        assert meta["content_type"] == "text/csv"


def test_overwrite_replaces_metadata(store: ObjectStore) -> None:
    s = meta_store(store)
    s.write("k", b"1", meta={"user": {"a": "1"}, "tags": {"t": "1"}})
    s.write("k", b"2", meta={"user": {"b": "2"}})
    meta = s.head_meta("k")
    assert meta.get("user") == {"b": "2"} and not meta.get("tags")


def test_pair_carries_metadata(backend: Backend, dst_backend: Backend, store: ObjectStore) -> None:
    """Source -> destination for every pair, as a gateway does it: ``head_meta`` at the
    source, ``travelling``, ``policy`` with an override, ``write(meta=)`` at the sink."""
    src = meta_store(store)
    src.write("obj", b"payload", meta=RICH)
    dst = meta_store(dst_backend.open(dst_backend.new_bucket(), PREFIX))
    sent = policy(travelling(src.head_meta("obj")), True, {"reviewed": "yes"})
    dst.write("obj", b"payload", meta=sent)
    want = expected(expected(RICH, backend.name), dst_backend.name)
    want["user"] = {**want["user"], "reviewed": "yes"}
    if backend.name == "local" or dst_backend.name == "local":
        want.pop("content_type", None)
    same(want, travelling(dst.head_meta("obj")), f"{backend.name}->{dst_backend.name}")


def test_what_a_store_cannot_hold_fails_the_object(backend: Backend, store: ObjectStore) -> None:
    """Never dropped silently: too much S3 user metadata, too many tags, keys Azure would make
    one, or a key S3 cannot send fail the write with a one-line error."""
    s = meta_store(store)
    cases: dict[str, list[dict[str, Any]]] = {
        "s3": [
            {"user": {"big": "x" * 2100}},
            {"tags": {f"t{i}": "v" for i in range(11)}},
            {"user": {"bad key": "v"}},
        ],
        "azure": [{"user": {"a-b": "1", "a_b": "2"}}, {"tags": {f"t{i}": "v" for i in range(11)}}],
        # gcp-storage-emulator has no limit; GCS refuses over 8 KiB of custom metadata.
        "gcs": [{"user": {"a": "x" * 4000, "b": "y" * 4000}, "tags": {"t": "z" * 300}}],
    }
    if backend.name == "local" and not _xattrs_here(store):
        cases["local"] = [{"user": {"a": "1"}}]
    for meta in cases.get(backend.name, []):
        with pytest.raises(MetadataNotSupportedError):
            s.write("refused", b"x", meta=meta)
    if backend.name in cases:
        with pytest.raises(ObjectNotFoundError):
            store.head("refused")
    if backend.name == "gcs":  # a multipart object fails before any part is sent
        with pytest.raises(MetadataNotSupportedError):
            s.create_multipart("refused", meta=cases["gcs"][0])


def _xattrs_here(store: ObjectStore) -> bool:
    root = store.uri.removeprefix("file://")
    os.makedirs(root, exist_ok=True)
    probe = os.path.join(root, ".probe")
    open(probe, "w").close()
    try:
        os.setxattr(probe, "user.x", b"1")
        return True
    except OSError:
        return False
    finally:
        os.unlink(probe)


# ---- destination write options -------------------------------------------------------------


def test_s3_storage_class_and_sse_kms_with_motos_kms(moto_s3: Any) -> None:
    """``storage_class``, ``kms_key_id`` (SSE-KMS with a key made in moto's KMS) and
    ``bucket_key``: HEAD of a whole and a multipart object shows them."""
    import boto3

    from gateway_agent.stores import open_store

    kms = boto3.client("kms", endpoint_url=moto_s3.options["endpoint_url"], region_name="us-east-1")
    key_id = kms.create_key(Description="replicas")["KeyMetadata"]["Arn"]
    bucket = f"wo-{os.urandom(4).hex()}"
    moto_s3.make_bucket(bucket)
    options = {"storage_class": "standard_ia", "kms_key_id": key_id, "bucket_key": True}
    store = meta_store(open_store(moto_s3.uri_for(bucket), {**moto_s3.options, **options}))
    store.write("whole", b"x", meta={"content_type": "text/plain", "user": {"k": "v"}})
    # A small object with metadata and write options still goes by the fast PutObject path
    # (the headers signed with the rest), not through boto3's pipeline.
    assert store._fast is not None and store._fast.sent == 1
    upload = store.create_multipart("multi")
    store.upload_part("multi", upload, 1, b"y" * 5 * 1024 * 1024)
    store.upload_part("multi", upload, 2, b"z")
    store.complete_multipart("multi", upload, [1, 2])
    for key in ("whole", "multi"):
        meta = store.head_meta(key)
        assert meta["storage_class"] == "STANDARD_IA", key
        assert meta["encryption"] == "aws:kms" and meta["kms_key"] == key_id, key
    assert store.head_meta("whole")["content_type"] == "text/plain"
    assert store.head_meta("whole")["user"] == {"k": "v"}


@pytest.mark.parametrize(
    ("scheme", "options", "message"),
    [
        ("s3", {"storage_class": "NEARLINE"}, "storage_class 'NEARLINE' is not one"),
        ("s3", {"sse": "rot13"}, "sse 'rot13' is not one"),
        ("s3", {"acl": "everyone"}, "acl 'everyone' is not one"),
        ("s3", {"sse": "s3", "kms_key_id": "k"}, "kms_key_id needs sse 'aws:kms'"),
        ("gcs", {"storage_class": "GLACIER"}, "storage_class 'GLACIER' is not one"),
        ("azure", {"storage_class": "STANDARD_IA"}, "storage_class 'STANDARD_IA' is not one"),
        ("local", {"storage_class": "Hot"}, "unknown store option"),
    ],
)
def test_a_write_option_the_provider_lacks_is_refused_when_opened(
    scheme: str, options: dict[str, Any], message: str, request: pytest.FixtureRequest
) -> None:
    """Before any work: opening the store refuses it with a one-line error."""
    from gateway_agent.stores import open_store
    from gateway_agent.stores.errors import InvalidURIError

    uri = {
        "s3": "s3://bucket/",
        "gcs": "gs://bucket/",
        "azure": "az://acct/container/",
        "local": f"file://{request.path.parent}/x/",
    }[scheme]
    extra = {"anonymous": True} if scheme in ("gcs", "azure") else {}
    with pytest.raises(InvalidURIError, match=message):
        open_store(uri, {**extra, **options})


def test_azure_tier_and_gcs_class_are_sent(azurite: Any, gcs_emulator: Any) -> None:
    """Azure ``storage_class`` is the access tier of the Put Blob / Put Block List (Azurite
    keeps it); gcp-storage-emulator ignores a storage class on upload and compose, so the test
    checks the resource the store sent instead."""
    from gateway_agent.stores import open_store

    bucket = f"wo-{os.urandom(4).hex()}"
    azurite.make_bucket(bucket)
    az = meta_store(
        open_store(azurite.uri_for(bucket), {**azurite.options, "storage_class": "cool"})
    )
    az.write("whole", b"x")
    upload = az.create_multipart("multi")
    az.upload_part("multi", upload, 1, b"y")
    az.complete_multipart("multi", upload, [1])
    for key in ("whole", "multi"):
        assert az.head_meta(key)["storage_class"] == "Cool", key

    gcs_emulator.make_bucket(bucket)
    options = {"storage_class": "nearline", "kms_key_name": "projects/p/keyRings/r/cryptoKeys/k"}
    gs = open_store(gcs_emulator.uri_for(bucket), {**gcs_emulator.options, **options})
    from gateway_agent.stores.gcs.meta import prepare

    blob = prepare(
        cast(Any, gs)._bucket.blob("k"), {"content_type": "a/b"}, cast(Any, gs)._write_opts
    )
    assert blob._properties["storageClass"] == "NEARLINE"
    assert blob.kms_key_name == options["kms_key_name"] and blob.content_type == "a/b"


def test_verify_full_compares_metadata_and_write_options_by_head(moto_s3: Any) -> None:
    """``--verify full``'s metadata pass (``transfer.metadata.verify_metadata``): a replica
    whose tags, user metadata or storage class are not what was asked fails, by name."""
    from gateway_agent.stores import open_store
    from skyplane_ops.transfer.metadata import verify_metadata

    bucket = f"vm-{os.urandom(4).hex()}"
    moto_s3.make_bucket(bucket)
    src = meta_store(open_store(moto_s3.uri_for(bucket, "src/"), moto_s3.options))
    plain = meta_store(open_store(moto_s3.uri_for(bucket, "dst/"), moto_s3.options))
    asked = {"storage_class": "STANDARD_IA"}
    dst = meta_store(open_store(moto_s3.uri_for(bucket, "dst/"), {**moto_s3.options, **asked}))
    meta = {"content_type": "text/csv", "user": {"a": "1"}, "tags": {"t": "1"}}
    for key in ("good", "tags", "class"):
        src.write(key, b"x", meta=meta)
    sent = travelling(src.head_meta("good"))
    dst.write("good", b"x", meta=sent)
    dst.write("tags", b"x", meta={**sent, "tags": {"t": "2"}})
    plain.write("class", b"x", meta=sent)  # written without the storage class asked
    looked, bad = verify_metadata(
        src, dst, ["good", "tags", "class"], metadata=True, metadata_set={}, dst_options=asked
    )
    assert looked == 3
    assert bad == [
        "tags: metadata differs (tags)",
        "class: metadata differs (storage_class STANDARD (asked STANDARD_IA))",
    ]


# ASCII only: gcp-storage-emulator drops the connection serving an object whose custom
# metadata is not ASCII (see test_metadata_round_trip).
PLAIN_RICH: dict[str, Any] = {**RICH, "user": {"owner": "etl", "run-id": "42"}}


def test_metadata_comes_with_the_bytes(backend: Backend, store: ObjectStore) -> None:
    """The source gateway's sources of metadata without a HEAD per object: S3's GetObject and
    Azure's Get Blob answer it with the bytes (``read_meta``), GCS's objects.list for a chunk
    of objects (``metas_of``): the same as ``head_meta``, and of the version read (another
    version is a ``SourceChangedError``, never the new metadata with the old bytes)."""
    s = meta_store(store)
    bodies = {"a.json": b"{}", "b": b"xyz", "empty": b""}
    s.write("a.json", bodies["a.json"], meta=PLAIN_RICH)
    s.write("b", bodies["b"], meta={"user": {"k": "v"}, "tags": {"t": "1"}})
    s.write("empty", b"", meta=PLAIN_RICH)
    listed = {info.key: info.version for info in store.list()}
    if isinstance(store, ReadsWithMetadata):
        for key, body in bodies.items():
            data, meta = store.read_meta(key, 0, len(body), listed[key])
            assert data == body, key
            assert travelling(meta) == travelling(s.head_meta(key)), key
        s.write("b", b"new", meta={"user": {"k": "w"}})
        with pytest.raises(SourceChangedError):
            store.read_meta("b", 0, 3, listed["b"])
    elif isinstance(store, ListsMetadata):
        got = store.metas_of([(key, listed[key]) for key in bodies])
        assert set(got) == set(bodies)
        for key in bodies:
            assert travelling(got[key]) == travelling(s.head_meta(key)), key
        s.write("b", b"new", meta={"user": {"k": "w"}})
        assert isinstance(store.metas_of([("b", listed["b"])])["b"], SourceChangedError)
        with pytest.raises(SourceChangedError):
            s.head_meta("b", listed["b"])
    else:
        assert backend.name in ("local", "memory")  # local calls: head_meta is a stat


def test_gcs_requester_pays_bills_the_project_on_every_request(gcs_emulator: Any) -> None:
    """``requester_pays`` on a GCS end: every request the store sends (list, get, download,
    upload, compose, rewrite, delete) names ``project`` as ``userProject``. gcp-storage-emulator
    ignores ``userProject`` (it has no requester-pays buckets), so the test checks the requests
    the store sent, through a recording proxy. Without a project it is refused before any work."""
    from gateway_agent.stores import open_store
    from gateway_agent.stores.errors import InvalidURIError
    from skyplane_ops.errors import TransferError
    from skyplane_ops.testing.emulators import environ
    from skyplane_ops.transfer.request import TransferRequest
    from tests.integration.http_proxy import CountingProxy

    bucket = f"rp-{os.urandom(4).hex()}"
    uri = gcs_emulator.make_bucket(bucket)
    with (
        CountingProxy(gcs_emulator.env["STORAGE_EMULATOR_HOST"]) as proxy,
        environ({"STORAGE_EMULATOR_HOST": proxy.endpoint}),
    ):
        store: Any = open_store(uri, {"project": "billed-1", "requester_pays": True})
        store.write("a", b"abc", meta={"user": {"k": "v"}})
        assert store.read("a", 0, 3, store.head("a").version) == b"abc"
        assert [i.key for i in store.list()] == ["a"]
        assert store.head_meta("a")["user"] == {"k": "v"}
        assert store.metas_of([("a", None)])["a"]["user"] == {"k": "v"}
        store.copy("a", "b")
        upload = store.create_multipart("c")
        store.upload_part("c", upload, 1, b"x")
        store.complete_multipart("c", upload, [1])
        store.delete("b")
        sent = list(proxy.requests)
    assert len(sent) > 10
    unbilled = [f"{m} {t}" for m, t in sent if "userProject=billed-1" not in t]
    assert unbilled == [], unbilled

    with pytest.raises(InvalidURIError, match="requester_pays needs the store option project"):
        open_store(uri, {"requester_pays": True})
    with pytest.raises(TransferError, match="requester_pays needs the store option project"):
        TransferRequest.build(uri, "file:///tmp/x/", src_options={"requester_pays": True})


def test_gcs_upload_begun_by_an_earlier_release_keeps_its_metadata(gcs_emulator: Any) -> None:
    """A GCS multipart upload now keeps its metadata in its marker's body (a custom metadata
    value holds only 4 KiB); one journaled by an earlier release (metadata on the marker)
    still completes with it."""
    import json

    from gateway_agent.stores import open_store

    bucket = f"old-{os.urandom(4).hex()}"
    store: Any = open_store(gcs_emulator.make_bucket(bucket), gcs_emulator.options)
    upload = os.urandom(16).hex()
    marker = store._stage(upload, "key")
    marker.metadata = {"meta": json.dumps({"user": {"k": "v"}, "cache_control": "no-cache"})}
    marker.upload_from_string(store._name("old").encode())
    store.upload_part("old", upload, 1, b"abc")
    store.complete_multipart("old", upload, [1])
    meta = store.head_meta("old")
    assert meta["user"] == {"k": "v"} and meta["cache_control"] == "no-cache"
    assert store.read("old") == b"abc"


def test_gcs_sync_and_verify_read_metadata_by_listing(gcs_emulator: Any) -> None:
    """A sync's metadata look (``sync_meta_check``) and ``--verify full``'s
    (``verify_metadata``) between GCS buckets read both sides' metadata from listing pages,
    not one objects.get per object (gcp-storage-emulator, every request recorded)."""
    from urllib.parse import urlsplit

    from gateway_agent.stores import open_store
    from skyplane_ops.testing.emulators import environ
    from skyplane_ops.transfer.metadata import sync_meta_check, verify_metadata
    from tests.integration.http_proxy import CountingProxy

    name = f"sv-{os.urandom(4).hex()}"
    src_uri, dst_uri = gcs_emulator.make_bucket(name + "s"), gcs_emulator.make_bucket(name + "d")
    keys = [f"k/{i:02d}" for i in range(20)]
    with (
        CountingProxy(gcs_emulator.env["STORAGE_EMULATOR_HOST"]) as proxy,
        environ({"STORAGE_EMULATOR_HOST": proxy.endpoint}),
    ):
        src, dst = (meta_store(open_store(u, gcs_emulator.options)) for u in (src_uri, dst_uri))
        for key in keys:
            src.write(key, b"x", meta={"user": {"k": "v"}, "tags": {"t": "1"}})
            dst.write(
                key, b"x", meta={"user": {"k": "v"}, "tags": {"t": "2" if key == "k/07" else "1"}}
            )
        before = len(proxy.requests)
        check = sync_meta_check(src, dst, True, {})
        assert check is not None
        assert check(keys) == [("k/07", "metadata differs (tags)")]
        looked, bad = verify_metadata(
            src, dst, keys, metadata=True, metadata_set={}, dst_options={}
        )
        sent = proxy.requests[before:]
    assert looked == len(keys) and bad == ["k/07: metadata differs (tags)"]
    paths = [urlsplit(t).path for _, t in sent]
    assert all(p.endswith("/o") for p in paths), paths  # listings only
    assert len(paths) == 4  # each side, for the sync and for verify


def test_azure_encryption_scope_is_sent(azurite: Any) -> None:
    """Azure ``encryption_scope`` goes with every Put Blob and Put Block List (and each staged
    block). Azurite has no encryption scopes (it accepts the header and ignores it), so the
    test checks the requests the store sent, through a recording proxy."""
    from urllib.parse import urlsplit

    from gateway_agent.stores import open_store
    from skyplane_ops.testing.emulators import azurite_connection_string, environ
    from tests.integration.http_proxy import CountingProxy

    bucket = f"es-{os.urandom(4).hex()}"
    azurite.make_bucket(bucket)
    conn = azurite.env["AZURE_STORAGE_CONNECTION_STRING"]
    endpoint = next(p for p in conn.split(";") if p.startswith("BlobEndpoint=")).split("=", 1)[1]
    upstream = urlsplit(endpoint)
    with CountingProxy(f"{upstream.scheme}://{upstream.netloc}") as proxy:
        port = urlsplit(proxy.endpoint).port
        assert port is not None
        with environ({"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(port)}):
            az = meta_store(
                open_store(
                    azurite.uri_for(bucket), {**azurite.options, "encryption_scope": "replicas"}
                )
            )
            az.write("whole", b"x", meta={"user": {"k": "v"}})
            upload = az.create_multipart("multi")
            az.upload_part("multi", upload, 1, b"y")
            az.complete_multipart("multi", upload, [1])
        puts = [
            (target, {k.lower(): v for k, v in headers.items()})
            for (method, target), (_, headers) in zip(proxy.requests, proxy.heads, strict=True)
            if method == "PUT"
        ]
    assert len(puts) >= 3, puts  # Put Blob, Put Block, Put Block List
    missing = [t for t, h in puts if h.get("x-ms-encryption-scope") != "replicas"]
    assert missing == [], missing


def test_s3_requester_pays_is_said_by_every_request(moto_s3: Any) -> None:
    """S3 ``requester_pays``: a requester-pays bucket refuses any request that does not say
    the requester pays, so every one does (listing, HEAD, GET with its tags, writes, multipart,
    copy, delete). moto does not enforce requester-pays buckets, so the test checks the
    requests the store sent, through a recording proxy."""
    from gateway_agent.stores import open_store
    from tests.integration.http_proxy import CountingProxy

    bucket = f"rq-{os.urandom(4).hex()}"
    moto_s3.make_bucket(bucket)
    with CountingProxy(moto_s3.options["endpoint_url"]) as proxy:
        options = {**moto_s3.options, "endpoint_url": proxy.endpoint, "requester_pays": True}
        store: Any = open_store(moto_s3.uri_for(bucket), options)
        store.write("a", b"abc", meta={"tags": {"t": "1"}})
        version = store.head("a").version
        assert store.read("a", 0, 3, version) == b"abc"
        assert store.read_meta("a", 0, 3, version)[1]["tags"] == {"t": "1"}
        assert store.head_meta("a")["tags"] == {"t": "1"}
        assert [i.key for i in store.list()] == ["a"]
        store.copy("a", "b")
        upload = store.create_multipart("c")
        store.upload_part("c", upload, 1, b"x")
        store.complete_multipart("c", upload, [1])
        store.delete("b")
        sent = [
            (f"{method} {target}", {k.lower(): v for k, v in headers.items()})
            for (method, target), (_, headers) in zip(proxy.requests, proxy.heads, strict=True)
        ]
    assert len(sent) > 10
    unsaid = [r for r, h in sent if h.get("x-amz-request-payer") != "requester"]
    assert unsaid == [], unsaid
