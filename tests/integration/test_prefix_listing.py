"""A bucket is listed in parallel by its top-level prefixes (issue 39): one delimiter request
finds them, then each is listed at once into the catalog; the catalog holds exactly what one
listing holds. A real moto S3 server behind a counting proxy; the GCS emulator and Azurite."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.base import ListsLevels
from skyplane_ops.transfer import list_request
from skyplane_ops.transfer.catalog import dec
from skyplane_ops.transfer.listrows import listed
from skyplane_ops.transfer.prefixlist import lists_by_prefix
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


KEYS = [
    "a",
    "b.txt",
    "p1/x/y/deep",
    "p1/x/z",
    *(f"p{i}/{j:02d}" for i in range(4) for j in range(12)),
]


@pytest.mark.parametrize("emulator", ["gcs_emulator", "azurite"])
def test_gcs_and_azure_list_a_level_and_the_catalog_is_listed_by_prefix(
    tmp_path: Path, emulator: str, request: pytest.FixtureRequest
) -> None:
    """GCS (``list_blobs(delimiter=...)``) and Azure (``walk_blobs``) tell one level, so a
    bucket's top-level prefixes are listed at once; the result is the flat listing."""
    emu = request.getfixturevalue(emulator)
    uri = emu.make_bucket(f"pl{uuid.uuid4().hex[:8]}")
    store = open_store(uri, emu.options)
    for key in KEYS:
        store.write(key, key.encode())
    assert isinstance(store, ListsLevels) and lists_by_prefix(store)
    flat = [row for batch in listed(store) for row in batch]
    assert [r[0] for r in flat] == sorted(KEYS)

    top, prefixes = store.list_level("")
    assert [r[0] for r in top] == ["a", "b.txt"]
    assert prefixes == [f"p{i}/" for i in range(4)]
    assert store.list_level("p1/x/") == (
        [r for r in flat if r[0] == "p1/x/z"],
        ["p1/x/y/"],
    )
    by_prefix = top + [row for p in prefixes for batch in listed(store, p) for row in batch]
    assert by_prefix == flat  # the same rows (size, time, checksums, version), in order
    paged = open_store(uri, {**emu.options, "list_page_size": 3})
    assert isinstance(paged, ListsLevels)
    assert paged.list_level("") == (top, prefixes)  # a level over several pages is whole

    dst = tmp_path / "dst"
    dst.mkdir()
    listing = list_request(
        uri, f"file://{dst}", src_options=emu.options, journal_dir=tmp_path / "j"
    )
    try:
        got = {dec(k): size for k, size in listing.catalog.pages("key, size", "src")}
    finally:
        listing.close()
    assert got == {k: len(k.encode()) for k in KEYS}
