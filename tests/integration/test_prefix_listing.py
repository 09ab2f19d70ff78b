"""A bucket is listed in parallel by its top-level prefixes (issue 39): one delimiter request
finds them, then each is listed at once into the catalog; the catalog holds exactly what one
listing holds. A real moto S3 server behind a counting proxy."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gateway_agent.stores import open_store
from skyplane_ops.transfer import list_request
from skyplane_ops.transfer.catalog import dec
from tests.integration.http_proxy import CountingProxy


def test_a_bucket_is_listed_by_prefix_into_the_same_catalog(tmp_path: Path, moto_s3: Any) -> None:
    uri = moto_s3.make_bucket(f"pl{uuid.uuid4().hex[:8]}")
    store = open_store(uri, moto_s3.options)
    keys = [
        "a",
        "b.txt",
        "p1/x/y/deep",
        "p1/x/z",
        *(f"p{i}/{j:02d}" for i in range(6) for j in range(30)),
    ]
    for key in keys:
        store.write(key, key.encode())
    dst = tmp_path / "dst"
    dst.mkdir()
    with CountingProxy(moto_s3.options["endpoint_url"]) as proxy:
        options = {**moto_s3.options, "endpoint_url": proxy.endpoint}
        listing = list_request(
            uri, f"file://{dst}", src_options=options, journal_dir=tmp_path / "j"
        )
        seen = list(proxy.requests)
    try:
        got = {dec(k): size for k, size in listing.catalog.pages("key, size", "src")}
    finally:
        listing.close()
    assert got == {k: len(k.encode()) for k in keys}
    lists = [parse_qs(urlsplit(path).query) for method, path in seen if "list-type" in path]
    assert sum(q.get("delimiter") == ["/"] for q in lists) == 1  # the discovery
    assert sorted(q["prefix"][0] for q in lists if "delimiter" not in q) == [
        f"p{i}/" for i in range(6)
    ]
