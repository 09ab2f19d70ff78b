"""The control plane's side of metadata (``gateway_agent.stores.objmeta``): what a multipart
upload is created with. Whole objects carry theirs through the gateways (the source reads it,
the sink writes it); a multipart object's parts are written by many sinks, so its metadata is
given once, when the control plane creates its upload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from gateway_agent.stores.base import (
    LIST_METADATA_MIN,
    ListsMetadata,
    ObjectStore,
    SupportsMetadata,
)
from gateway_agent.stores.errors import StoreError
from gateway_agent.stores.objmeta import azure_key, differs, policy, travelling
from gateway_agent.stores.writeopts import KEY_OPTION, s3_write_args, storage_class
from skyplane_ops.transfer.catalog import SKIPPED, TODO, Catalog, dec


def upload_meta(
    src: ObjectStore, dst: ObjectStore, metadata: bool, metadata_set: Mapping[str, str]
) -> Callable[[str], Mapping[str, Any] | None] | None:
    """``key -> metadata`` for new uploads under the request's policy (``metadata``,
    ``metadata_set``), or None when nothing is written (bytes only, or a destination that
    holds no metadata)."""
    if not isinstance(dst, SupportsMetadata):
        return None
    keep = metadata and isinstance(src, SupportsMetadata)
    if not keep and not metadata_set:
        return None

    def meta_of(key: str) -> Mapping[str, Any] | None:
        found = travelling(cast(SupportsMetadata, src).head_meta(key)) if keep else {}
        return policy(found, True, metadata_set) or None

    return meta_of


# ``outcome`` rows of this kind: objects a sync copies again because only their metadata
# differs (the run copies them as any other; ``--dry-run`` says why).
META_CHANGED = "metadata"


# Keys per metadata listing (``ListsMetadata``: one objects.list page on GCS).
LIST_BATCH = 500


def read_metas(
    store: SupportsMetadata, keys: list[str], threads: int = 16
) -> dict[str, dict[str, Any] | StoreError]:
    """``head_meta`` of each of ``keys`` (or the ``StoreError`` that stopped it): one listing
    page per ``LIST_BATCH`` sorted keys where the store lists metadata (GCS), else one HEAD
    per key, ``threads`` at once; a key a listing page did not reach is asked by HEAD."""
    out: dict[str, dict[str, Any] | StoreError] = {}
    if len(keys) >= LIST_METADATA_MIN and isinstance(store, ListsMetadata):
        ordered = sorted(keys)
        for i in range(0, len(ordered), LIST_BATCH):
            try:
                out.update(store.metas_of([(k, None) for k in ordered[i : i + LIST_BATCH]]))
            except StoreError:
                pass  # each key is asked on its own below, and fails alone
    left = [k for k in keys if k not in out]

    def one(key: str) -> dict[str, Any] | StoreError:
        try:
            return store.head_meta(key)
        except StoreError as exc:
            return exc

    if left:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            out.update(zip(left, pool.map(one, left), strict=True))
    return out


def sync_meta_check(
    src: ObjectStore, dst: ObjectStore, metadata: bool, metadata_set: Mapping[str, str]
) -> Callable[[list[str]], list[tuple[str, str]]] | None:
    """For a sync: ``keys -> [(key, why)]`` of objects equal in content whose metadata or tags
    differ (``read_metas`` of each side), or None where no look is needed: bytes
    only, a store without metadata, or a local source (a change of a file's attributes or
    time moves its ctime, so its version: the sync record sees it for free)."""
    if not metadata or getattr(src.capabilities, "file_names", False):
        return None
    if not isinstance(src, SupportsMetadata) or not isinstance(dst, SupportsMetadata):
        return None
    source, target = cast(SupportsMetadata, src), cast(SupportsMetadata, dst)

    def check(keys: list[str]) -> list[tuple[str, str]]:
        wants, haves = read_metas(source, keys), read_metas(target, keys)
        found: list[tuple[str, str]] = []
        for key in keys:
            src_meta, dst_meta = wants.get(key), haves.get(key)
            if not isinstance(src_meta, dict) or not isinstance(dst_meta, dict):
                continue  # the copy decides: an unreadable side is reported there
            want = policy(travelling(src_meta), True, metadata_set)
            fields = differs(expected_at(dst, want), travelling(dst_meta))
            if fields:
                found.append((key, f"metadata differs ({', '.join(fields)})"))
        return found

    return check


def expected_at(dst: ObjectStore, meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` as ``dst`` gives it back (``docs/metadata.md``): header stores keep user
    metadata keys lowercased, Azure renamed to C# identifiers; a local file's Content-Type is
    its extension's."""
    out = dict(meta)
    scheme = dst.uri.split("://", 1)[0]
    if scheme in ("s3", "az") and out.get("user"):
        rename = azure_key if scheme == "az" else str
        out["user"] = {rename(k).lower(): v for k, v in out["user"].items()}
    if scheme == "file":
        out.pop("content_type", None)
    return out


def mark_metadata_changes(
    catalog: Catalog, check: Callable[[list[str]], list[tuple[str, str]]] | None
) -> None:
    """Objects a sync found equal (``SKIPPED``) whose metadata differs go back to ``TODO``,
    with why (an ``outcome`` row of kind ``META_CHANGED``), a page at a time."""
    if check is None:
        return
    page: list[str] = []
    for (raw,) in catalog.pages("key", "src", f"state = {SKIPPED}"):
        page.append(dec(raw))
        if len(page) >= 1000:
            catalog.set_outcome(META_CHANGED, check(page), TODO)
            page = []
    if page:
        catalog.set_outcome(META_CHANGED, check(page), TODO)


def expected_options(dst: ObjectStore, options: Mapping[str, Any]) -> dict[str, str]:
    """What HEAD must show of the destination's write options (``replica_properties``)."""
    return replica_properties(dst.uri, options)


def replica_properties(dst_uri: str, options: Mapping[str, Any]) -> dict[str, str]:
    """The storage class, encryption and key a replica at ``dst_uri`` is written with (its
    store options, in ``objmeta.READ_ONLY``'s names; {} where the store's defaults apply):
    what ``--verify full`` checks and what lineage and Dagster metadata show. Key names and
    ARNs are not secrets."""
    scheme = dst_uri.split("://", 1)[0]
    want: dict[str, str] = {}
    if scheme not in KEY_OPTION:
        return want
    if "storage_class" in options:
        want["storage_class"] = storage_class(scheme, options["storage_class"], dst_uri)
    if scheme == "s3":
        args = s3_write_args(options, dst_uri)
        if "ServerSideEncryption" in args:
            want["encryption"] = args["ServerSideEncryption"]
        if not str(args.get("SSEKMSKeyId", "alias/")).startswith("alias/"):
            want["kms_key"] = args["SSEKMSKeyId"]  # an alias: S3 answers the key's ARN
    key = options.get(KEY_OPTION[scheme])
    if scheme in ("gs", "az") and key:
        want["kms_key"] = str(key)
    return want


def _options_differ(want: Mapping[str, str], have: Mapping[str, Any]) -> list[str]:
    out = []
    for name, value in want.items():
        got = str(have.get(name) or "")
        # A key is answered as its ARN (S3) or with its version (GCS ``.../cryptoKeyVersions/1``).
        ok = got == value or (name == "kms_key" and (got.endswith(value) or got.startswith(value)))
        if not ok:
            out.append(f"{name} {got or 'none'} (asked {value})")
    return out


def verify_metadata(
    src: ObjectStore,
    dst: ObjectStore,
    keys: Iterable[str],
    *,
    metadata: bool,
    metadata_set: Mapping[str, str],
    dst_options: Mapping[str, Any],
    threads: int = 16,
) -> tuple[int, list[str]]:
    """``--verify full`` beyond the bytes: per copied object, a HEAD of the destination (and
    of the source, for what was asked; ``read_metas``: a listing page per 500 objects on GCS)
    compares metadata, tags, storage class and encryption, never reading bytes back.
    (objects looked at, failures as ``"key: why"``). A local destination is not looked at:
    its write put the metadata on the file before naming it, or failed."""
    if not isinstance(dst, SupportsMetadata) or dst.capabilities.checked_writes:
        return 0, []
    want_options = expected_options(dst, dst_options)
    keep = metadata and isinstance(src, SupportsMetadata)
    if not keep and not metadata_set and not want_options:
        return 0, []
    source, target = cast(SupportsMetadata, src), cast(SupportsMetadata, dst)

    def one(key: str, src_meta: Any, have: Any) -> str | None:
        for got in (src_meta, have):
            if isinstance(got, StoreError):
                return f"{key}: cannot read its metadata: {got}"
        want = policy(travelling(src_meta) if keep else {}, True, metadata_set)
        bad = differs(expected_at(dst, want), travelling(have)) if (keep or metadata_set) else []
        bad += _options_differ(want_options, have)
        return f"{key}: metadata differs ({', '.join(bad)})" if bad else None

    looked, failures = 0, []
    for page in _pages(keys, 1000):
        wants = read_metas(source, page, threads) if keep else {}
        haves = read_metas(target, page, threads)
        for key in page:
            looked += 1
            found = one(key, wants.get(key, {}), haves[key])
            if found is not None:
                failures.append(found)
    return looked, failures


def _pages(keys: Iterable[str], size: int) -> Iterator[list[str]]:
    page: list[str] = []
    for key in keys:
        page.append(key)
        if len(page) >= size:
            yield page
            page = []
    if page:
        yield page
