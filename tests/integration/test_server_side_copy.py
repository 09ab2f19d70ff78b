"""Server-side copy run by the engine: a run whose schedule starts no VM and whose stores copy
themselves (S3 -> S3 on one service, GCS -> GCS, any -> Azure) copies every object by store
calls from the worker's in-process gateway (no byte through it where the store reports the
copy's CRC32C), with the journal, the staged multipart commit, metadata and the end
verification of every path. Real emulator servers (moto, gcp-storage-emulator, Azurite); no
VM (``--no-vms``: the schedule's choice forced, as a cloud backend's 60 s start-up would)."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops import api
from skyplane_ops.provision import records
from skyplane_ops.provision.worker import running_agents
from skyplane_ops.sequence import CopyRun
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.testing.kill import kill_when

MiB = 1024 * 1024
pytestmark = [pytest.mark.emulator]


def _buckets(emu: Any, other: Any = None) -> tuple[str, str]:
    name = f"b{uuid.uuid4().hex[:10]}"
    return emu.make_bucket(name + "src"), (other or emu).make_bucket(name + "dst")


def _run(
    tmp_path: Path,
    src: str,
    dst: str,
    src_opts: Any,
    dst_opts: Any,
    regions: tuple[str, str],
    **kw: Any,
) -> tuple[CopyRun, api.TransferResult]:
    request = api.TransferRequest.build(
        src, dst, src_options=src_opts, dst_options=dst_opts, src_region=regions[0],
        dst_region=regions[1], planning={"vms": "none"},
        journal_dir=str(tmp_path / "journal"), **kw,
    )  # fmt: skip
    run = CopyRun(request, Gateways(backend="local"))
    return run, run.run()


def _all(uri: str, options: Any) -> dict[str, bytes]:
    store = open_store(uri, options)
    return {o.key: store.read(o.key) for o in store.list()}


def test_s3_to_s3_copies_by_copyobject_and_uploadpartcopy(
    tmp_path: Path, moto_s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    data = {f"day/{i:02d}.json": os.urandom(2000 + i) for i in range(20)}
    data["day/big.bin"] = os.urandom(11 * MiB + 5)  # 3 parts of 5 MiB: UploadPartCopy
    data["day/empty"] = b""
    for key, blob in data.items():
        meta = {"content_type": "application/json", "user": {"team": "ads"}, "tags": {"t": "1"}}
        store.write(key, blob, meta=meta if key.endswith(".json") else None)
    # Every byte the worker's gateway reads from the source store is counted here: the
    # small objects must not be read (the store copies them), only the parts whose CRC32C
    # moto's UploadPartCopy does not report.
    from gateway_agent.stores.s3.store import S3Store

    reads: list[tuple[str, int]] = []
    real_read = S3Store.read

    def counted(self: S3Store, key: str, *a: Any, **k: Any) -> bytes:
        out = real_read(self, key, *a, **k)
        if self.uri == src:
            reads.append((key, len(out)))
        return out

    monkeypatch.setattr(S3Store, "read", counted)
    # The destination's write options apply to a copy as to a PutObject (issue 37).
    dst_opts = {**moto_s3.options, "storage_class": "STANDARD_IA", "sse": "AES256"}
    run, result = _run(
        tmp_path, src, dst, moto_s3.options, dst_opts,
        ("aws:us-east-1", "aws:us-west-2"), part_size=5 * MiB,
    )  # fmt: skip
    assert result.verification["status"] == "passed", result.verification
    assert result.objects == len(data)
    assert _all(dst, moto_s3.options) == data
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    assert {k for k, _ in reads} <= {"day/big.bin"}  # verification HEADs, reads nothing
    # Metadata and tags as on every other path (stated explicitly, not S3's COPY directive).
    got = open_store(dst, moto_s3.options).head_meta("day/03.json")
    assert got["content_type"] == "application/json" and got["user"]["team"] == "ads"
    assert got["tags"] == {"t": "1"}
    assert got["storage_class"] == "STANDARD_IA" and got["encryption"] == "AES256"
    big = open_store(dst, moto_s3.options).head_meta("day/big.bin")
    assert big["storage_class"] == "STANDARD_IA" and big["encryption"] == "AES256"
    assert running_agents() == 0
    names = moto_s3.stored_names(dst.split("/")[2])
    assert not [n for n in names if n.startswith("upload:")]  # no staged upload left


def test_the_report_records_the_server_side_path(tmp_path: Path, moto_s3: Any) -> None:
    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    for i in range(3):
        store.write(f"{i}", b"x" * (100 + i))
    # A multipart source (ETag no MD5) copied whole: its full-object CRC32C is compared.
    big = os.urandom(6 * MiB)
    upload = store.create_multipart("mp.bin")
    store.upload_part("mp.bin", upload, 1, big[: 5 * MiB])
    store.upload_part("mp.bin", upload, 2, big[5 * MiB :])
    assert "-" in str(store.complete_multipart("mp.bin", upload, [1, 2]).etag)
    report = tmp_path / "report"
    _, result = _run(
        tmp_path, src, dst, moto_s3.options, moto_s3.options,
        ("aws:us-east-1", "aws:us-west-2"), report_uri=f"file://{report}",
    )  # fmt: skip
    assert result.verification["status"] == "passed"
    import pyarrow.parquet as pq

    files = sorted(report.rglob("*.parquet"))
    assert files, list(report.rglob("*"))
    rows = pq.read_table(files[-1]).to_pylist()
    assert {r["paths"] for r in rows} == {"server-side"} and len(rows) == 4
    assert open_store(dst, moto_s3.options).read("mp.bin") == big


def test_a_changed_source_object_fails_that_object_only(tmp_path: Path, moto_s3: Any) -> None:
    """moto ignores ``CopySourceIfMatch``: the copy's ETag (the bytes' MD5) is compared with
    the listed one instead, and the object is reported changed, the others copied."""
    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    for i in range(4):
        store.write(f"{i}", bytes([i]) * 1000)
    request = api.TransferRequest.build(
        src, dst, src_options=moto_s3.options, dst_options=moto_s3.options,
        src_region="aws:us-east-1", dst_region="aws:us-west-2", planning={"vms": "none"},
        journal_dir=str(tmp_path / "journal"),
    )  # fmt: skip
    run = CopyRun(request, Gateways(backend="local"))
    with run.locked():
        run.list()
        store.write("2", b"changed after the listing")
        run.make_plan()
        with pytest.raises(api.PartialTransferError) as err:
            run.transfer()
    result = err.value.result
    assert result.objects == 3 and "2" in str(result.to_dict())
    assert _all(dst, moto_s3.options).keys() >= {"0", "1", "3"}


def test_gcs_to_gcs_copies_by_rewrite(tmp_path: Path, gcs_emulator: Any) -> None:
    """gcp-storage-emulator rewrites (one call, no token: it copies at once) and reports the
    copy's CRC32C; it ignores ``ifSourceGenerationMatch`` and the metadata given with a
    rewrite (it keeps the source's), so neither is checked here. A multipart-sized object
    goes through the worker's bytes (a rewrite has no byte range): both in one run."""
    src, dst = _buckets(gcs_emulator)
    store = open_store(src, gcs_emulator.options)
    data = {f"p/{i}.csv": os.urandom(1500 + i) for i in range(12)}
    data["p/big.bin"] = os.urandom(6 * MiB + 3)
    for key, blob in data.items():
        store.write(key, blob)
    run, result = _run(
        tmp_path, src, dst, gcs_emulator.options, gcs_emulator.options,
        ("gcp:us-central1", "gcp:europe-west4"), part_size=5 * MiB,
    )  # fmt: skip
    assert result.verification["status"] == "passed", result.verification
    assert result.objects == len(data) and _all(dst, gcs_emulator.options) == data
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    names = gcs_emulator.stored_names(dst.split("/")[2])
    assert not [n for n in names if n.startswith(".%staging/")]


def test_s3_to_azurite_sends_put_blob_from_a_presigned_url(
    tmp_path: Path,
    moto_s3: Any,
    azurite: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Azurite implements neither Put Blob From URL nor Put Block From URL (it answers 501):
    the request is checked as sent (a real request to the real Azurite, whose source URL is a
    presigned moto GET that reads the object), and the run then moves the bytes itself."""
    from azure.core.pipeline.transport import RequestsTransport

    src, dst = _buckets(moto_s3, azurite)
    store = open_store(src, moto_s3.options)
    data = {f"{i}.bin": os.urandom(800 + i) for i in range(6)}
    for key, blob in data.items():
        store.write(key, blob)
    sent: list[Any] = []
    real_send = RequestsTransport.send

    def spy(self: Any, request: Any, **kw: Any) -> Any:
        if "x-ms-copy-source" in request.headers:
            sent.append(request)
        return real_send(self, request, **kw)

    monkeypatch.setattr(RequestsTransport, "send", spy)
    caplog.set_level("INFO")  # what a run logs (the SDKs' DEBUG output is off: agent doc)
    # Azurite answers the copy with a SAS by a bare 500: two tries, not six, before the bytes.
    az_opts = {**azurite.options, "max_attempts": 2}
    run, result = _run(
        tmp_path, src, dst, moto_s3.options, az_opts, ("aws:us-east-1", "azure:westeurope")
    )
    assert result.verification["status"] == "passed", result.verification
    assert _all(dst, azurite.options) == data
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    assert sent, "no Put Blob From URL was sent"
    put = sent[0]
    assert put.method == "PUT" and put.headers.get("x-ms-blob-type") == "BlockBlob"
    key = put.url.split("?")[0].rsplit("/", 1)[-1]
    md5 = put.headers["x-ms-source-content-md5"]
    import base64
    import hashlib
    import urllib.request

    assert base64.b64decode(md5) == hashlib.md5(data[key]).digest()
    assert put.headers.get("x-ms-meta-skyplane_crc32c")  # the CRC32C travels with it
    url = put.headers["x-ms-copy-source"]
    with urllib.request.urlopen(url, timeout=10) as got:
        assert got.read() == data[key]  # the presigned URL reads the listed object
    signature = url.split("Signature=")[1].split("&")[0]
    assert signature and signature not in caplog.text  # a credential: never logged
    assert signature not in str(result.to_dict())


def test_a_killed_server_side_run_tears_nothing_and_resumes(tmp_path: Path, moto_s3: Any) -> None:
    """SIGKILL the CLI once the destination shows its first copied object: every object the
    destination shows is whole and equal to its source (CopyObject lands whole; parts wait
    in a staged upload), and the same command again completes and verifies."""
    import subprocess
    import sys

    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    data = {f"s/{i:03d}": os.urandom(700 + i) for i in range(150)}
    data.update({f"b/{i}.bin": os.urandom(11 * MiB + i) for i in range(3)})
    for key, blob in data.items():
        store.write(key, blob)
    opts = json.dumps(moto_s3.options)
    argv = [
        sys.executable, "-m", "skyplane_ops.cli", "cp", src, dst, "--src-options", opts,
        "--dst-options", opts, "--src-region", "aws:us-east-1", "--dst-region",
        "aws:us-west-2", "--no-vms", "--chunk-mib", "5", "--json",
    ]  # fmt: skip
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen = open_store(dst, moto_s3.options)
    if not kill_when(proc, lambda: next(iter(seen.list()), None) is not None):
        pytest.skip("the copy finished before it could be killed (an unloaded, fast machine)")
    landed = _all(dst, moto_s3.options)
    assert set(landed) <= set(data)
    assert all(data[k] == v for k, v in landed.items())  # nothing torn, nothing half-visible
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["verification"]["status"] == "passed"
    assert _all(dst, moto_s3.options) == data


def test_a_sync_copies_only_what_changed_server_side(tmp_path: Path, moto_s3: Any) -> None:
    """Selection and the overwrite policy are the listing's, as on every path: a second sync
    copies the one changed object (and an ``include`` leaves the rest alone)."""
    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    for i in range(6):
        store.write(f"{i}.csv", bytes([i]) * 300)
    store.write("skip.tmp", b"not selected")
    kw = {"sync": True, "include": ("*.csv",)}
    _, first = _run(tmp_path, src, dst, moto_s3.options, moto_s3.options,
                    ("aws:us-east-1", "aws:us-west-2"), **kw)  # fmt: skip
    assert first.objects == 6 and first.verification["status"] == "passed"
    store.write("3.csv", b"changed")
    run, second = _run(tmp_path, src, dst, moto_s3.options, moto_s3.options,
                       ("aws:us-east-1", "aws:us-west-2"), **kw)  # fmt: skip
    assert second.objects == 1 and second.verification["status"] == "passed"
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    got = _all(dst, moto_s3.options)
    assert set(got) == {f"{i}.csv" for i in range(6)} and got["3.csv"] == b"changed"


ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message><RequestId>proxy</RequestId></Error>"
)


def _refuse_copies(method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
    """What S3 answers a CopyObject or UploadPartCopy whose caller may not read the source
    (real AWS, a destination set scoped to its own bucket): 403 AccessDenied."""
    copying = any(k.lower() == "x-amz-copy-source" for k in headers)
    return (403, ACCESS_DENIED) if method == "PUT" and copying else None


def test_a_refused_copy_moves_the_bytes_once_warned_and_verified(
    tmp_path: Path,
    moto_s3: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real proxy in front of moto answers every CopyObject and UploadPartCopy with S3's
    403 AccessDenied (moto enforces no session policy, so the refusal is the proxy's): the
    run warns once, moves the bytes itself on the same in-process gateway (PutObject,
    UploadPart), and the replica is byte-identical and verified; no staged upload is left.
    The destination's set was minted (moto's STS) with the source's read for the copy."""
    from skyplane_ops.transfer.dispatch import credentials as resolving
    from skyplane_ops.transfer.dispatch.minting import Minted
    from tests.integration.http_proxy import CountingProxy

    minted: dict[str, list[Minted]] = {}
    real_minter = resolving.aws_minter

    def spying(scope: Any, *a: Any, **k: Any) -> Any:
        mint = real_minter(scope, *a, **k)
        if mint is None:
            return None

        def recorded() -> Minted:
            got = mint()
            minted.setdefault(scope.uri, []).append(got)
            return got

        return recorded

    monkeypatch.setattr(resolving, "aws_minter", spying)

    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    data = {f"d/{i:02d}.csv": os.urandom(900 + i) for i in range(8)}
    data["d/big.bin"] = os.urandom(11 * MiB + 7)  # parts: UploadPartCopy refused too
    for key, blob in data.items():
        store.write(key, blob)
    caplog.set_level("WARNING")
    with CountingProxy(moto_s3.options["endpoint_url"], answer=_refuse_copies) as proxy:
        opts = {**moto_s3.options, "endpoint_url": proxy.endpoint}
        run, result = _run(
            tmp_path, src, dst, opts, opts, ("aws:us-east-1", "aws:us-west-2"),
            part_size=5 * MiB,
        )  # fmt: skip
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    assert result.verification["status"] == "passed", result.verification
    assert result.objects == len(data) and _all(dst, moto_s3.options) == data
    dst_bucket = dst.split("/")[2]
    copies = [p for m, p in proxy.requests if m == "PUT" and p.startswith(f"/{dst_bucket}/")]
    refused = [
        p
        for (m, p), (_, h) in zip(proxy.requests, proxy.heads, strict=True)
        if m == "PUT" and any(k.lower() == "x-amz-copy-source" for k in h)
    ]
    assert refused, "no copy was asked for"
    assert len(copies) > len(refused)  # the bytes were put after the refusal
    warned = [r for r in caplog.records if "server-side copy refused" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert "AccessDenied" in warned[0].getMessage() or "Access Denied" in warned[0].getMessage()
    assert running_agents() == 0
    assert not [n for n in moto_s3.stored_names(dst_bucket) if n.startswith("upload:")]
    [dst_set] = minted[dst]
    [read] = [s for s in dst_set.detail["policy"]["Statement"] if s["Sid"] == "ReadCopySource"]
    assert read["Resource"] == [f"arn:aws:s3:::{src.split('/')[2]}/*"]
    [src_set] = minted[src]
    assert "ReadCopySource" not in json.dumps(src_set.detail["policy"])


def _calls(proxy: Any, bucket: str) -> dict[str, list[str]]:
    """The S3 calls the proxy saw on ``bucket``'s objects, by kind (listings left out)."""
    out: dict[str, list[str]] = {"head": [], "tagging": [], "copy": [], "put": []}
    for (method, path), (_, headers) in zip(proxy.requests, proxy.heads, strict=True):
        if not path.startswith(f"/{bucket}/") or path == f"/{bucket}/":
            continue
        key = path[len(bucket) + 2 :].split("?")[0]
        copying = any(k.lower() == "x-amz-copy-source" for k in headers)
        if method == "HEAD":
            out["head"].append(key)
        elif method == "GET" and "tagging" in path.split("?", 1)[-1].split("&"):
            out["tagging"].append(key)
        elif method == "PUT":
            out["copy" if copying else "put"].append(key)
    return out


@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "no-metadata"])
def test_s3_copies_take_two_calls_per_object_with_metadata_and_one_without(
    tmp_path: Path, moto_s3: Any, metadata: bool
) -> None:
    """Every request counted on the wire (a recording proxy in front of moto): with metadata
    kept, each object is one HEAD of the source and one CopyObject, its tags copied by S3
    (``TaggingDirective=COPY``: no GetObjectTagging), and the replica keeps the source's
    properties, user metadata, tags and modification time (the kept ``mtime``, else the
    source's LastModified: S3 cannot add it to metadata it copies, so the HEAD stays);
    with ``metadata=False`` one CopyObject and nothing else."""
    from tests.integration.http_proxy import CountingProxy

    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    tagged = {"content_type": "text/csv", "user": {"team": "ads"}, "tags": {"t": "1", "u": "2"}}
    kept = {"user": {"mtime": "2021-03-04T05:06:07.123456789Z", "x": "y"}}
    metas: dict[str, Any] = {"tagged.csv": tagged, "kept.bin": kept, "plain.bin": None}
    for key, meta in metas.items():
        store.write(key, key.encode() * 50, meta=meta)
    with CountingProxy(moto_s3.options["endpoint_url"]) as proxy:
        opts = {**moto_s3.options, "endpoint_url": proxy.endpoint}
        run, result = _run(
            tmp_path, src, dst, opts, opts, ("aws:us-east-1", "aws:us-west-2"),
            metadata=metadata,
        )  # fmt: skip
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    assert result.verification["status"] == "passed", result.verification
    on_src, on_dst = _calls(proxy, src.split("/")[2]), _calls(proxy, dst.split("/")[2])
    assert sorted(on_dst["copy"]) == sorted(metas) and not on_dst["put"]
    assert sorted(on_src["head"]) == (sorted(metas) if metadata else [])
    assert not on_src["tagging"] and not on_dst["tagging"]
    source, replica = open_store(src, moto_s3.options), open_store(dst, moto_s3.options)
    for key in metas:
        theirs, ours = source.head_meta(key), replica.head_meta(key)
        if not metadata:
            assert not ours.get("tags") and set(ours.get("user", {})) <= {"mtime"}
            continue
        assert ours.get("tags") == theirs.get("tags") and ours.get("mtime_ns") == theirs["mtime_ns"]
        assert ours.get("content_type") == theirs.get("content_type")
        assert {k: v for k, v in ours.get("user", {}).items() if k != "mtime"} == {
            k: v for k, v in theirs.get("user", {}).items() if k != "mtime"
        }
    if metadata:
        assert replica.head_meta("tagged.csv")["tags"] == tagged["tags"]
        from gateway_agent.stores.objmeta import parse_mtime

        assert replica.head_meta("kept.bin")["mtime_ns"] == parse_mtime(kept["user"]["mtime"])


def test_a_run_of_both_copies_server_side_from_the_start(tmp_path: Path, moto_s3: Any) -> None:
    """A run of both whose VM-less path is the stores' own copy uses it from t = 0 (not the
    worker's byte path) while the overlay's gateways boot (the local backend's ``boot_delay``);
    the copy is done first, so the overlay is cancelled and nothing is left."""
    src, dst = _buckets(moto_s3)
    store = open_store(src, moto_s3.options)
    data = {f"day/{i:02d}.json": os.urandom(1000 + i) for i in range(10)}
    for key, blob in data.items():
        store.write(key, blob)
    request = api.TransferRequest.build(
        src, dst, src_options=moto_s3.options, dst_options=moto_s3.options,
        src_region="aws:us-east-1", dst_region="aws:us-west-2",
        journal_dir=str(tmp_path / "journal"),
    )  # fmt: skip
    # Planned for 5 TB: the stores alone would take longer than the overlay's 30 s boot, so
    # the schedule runs both; the real copy is a few KB and done long before the boot.
    run = CopyRun(
        request, Gateways(backend="local", backend_options={"boot_delay": 30}), volume_gb=5000.0
    )
    started = time.monotonic()
    result = run.run()
    assert time.monotonic() - started < 30  # nothing waited for the emulated VMs
    assert run.plan is not None and run.plan.details.get("server_side_paths") == [0]
    assert run.plan.paths[0].regions == ("worker@aws:us-west-2",) and len(run.plan.paths) > 1
    assert result.verification["status"] == "passed" and _all(dst, moto_s3.options) == data
    assert result.schedule["overlay"] == "cancelled" and result.schedule["overlay_bytes"] == 0
    assert running_agents() == 0
    assert records.load_fleets(transfer_id=result.transfer_id) == []
