"""The everyday job's fixed costs on S3: a run opens each store once for the control plane
(the listing's stores are the engine's), and a listing's stores serve only a run of the same
ends. Real moto server, the worker path's real in-process gateway (``vms="none"``); the
store's constructor is wrapped only to count its calls."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from gateway_agent.stores.s3.store import S3Store
from skyplane_ops import api
from skyplane_ops.sequence import CopyRun
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.testing.transfer import read_tree
from skyplane_ops.transfer.listing import list_request


def _client(moto_s3: Any) -> Any:
    return boto3.client("s3", endpoint_url=moto_s3.options["endpoint_url"], region_name="us-east-1")


def test_a_copy_opens_its_s3_source_once_for_the_control_plane(
    moto_s3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    src = f"opens-{tmp_path.name[-12:].lower().replace('_', '-')}"
    moto_s3.make_bucket(src)
    for i in range(12):
        _client(moto_s3).put_object(Bucket=src, Key=f"part-{i:03d}.json", Body=b"{}" * (i + 1))
    opened: list[str] = []
    real_init = S3Store.__init__

    def counted_init(self: S3Store, *args: Any, **kwargs: Any) -> None:
        opened.append(str(args[0]))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(S3Store, "__init__", counted_init)
    request = api.TransferRequest.build(
        moto_s3.uri_for(src), f"file://{tmp_path / 'dst'}", src_region="aws:us-east-1",
        dst_region="aws:us-west-2", src_options=moto_s3.options,
        journal_dir=str(tmp_path / "journal"), planning={"vms": "none"},
    )  # fmt: skip
    result = CopyRun(request, Gateways(backend="local")).run()
    assert result.verification["status"] == "passed" and result.objects == 12
    assert read_tree(tmp_path / "dst") == {f"part-{i:03d}.json": b"{}" * (i + 1) for i in range(12)}
    # Once for the listing and the engine, once for the worker's job (its own scoped
    # credentials): each S3 client is ~50 ms of CPU before the first byte (it was 3).
    assert len(opened) == 2, opened


def test_a_listings_stores_serve_only_a_run_of_the_same_ends(moto_s3: Any, tmp_path: Any) -> None:
    for bucket in ("listed-src", "listed-dst", "listed-other"):
        moto_s3.make_bucket(bucket)
    _client(moto_s3).put_object(Bucket="listed-src", Key="one", Body=b"1")

    def request(dst: str, **options: Any) -> api.TransferRequest:
        return api.TransferRequest.build(
            moto_s3.uri_for("listed-src"), moto_s3.uri_for(dst),
            src_options=moto_s3.options, dst_options={**moto_s3.options, **options},
            journal_dir=str(tmp_path / "journal"),
        )  # fmt: skip

    listing = list_request(request("listed-dst"))
    try:
        opened = listing.stores(request("listed-dst"))
        assert opened is not None and opened[1].uri == moto_s3.uri_for("listed-dst")
        assert listing.stores(request("listed-other")) is None  # another destination
        assert listing.stores(request("listed-dst", checksums="off")) is None  # other options
    finally:
        listing.close()
