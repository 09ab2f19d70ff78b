"""``sync --delete``: the mirror delete, the only step that ever removes a destination object.

It follows ``rclone sync``: destination objects absent from the source (and matching the same
include/exclude filters: an excluded object is neither copied nor deleted) are removed, but
only after every copy succeeded and verified; nothing is deleted when anything failed or
changed. ``max_delete`` refuses *all* deletes, before any copy starts, when more would go. The
candidates are checked against a fresh source listing just before deleting, so an object that
appeared at the source meanwhile is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence

from gateway_agent.stores.base import ObjectInfo, ObjectStore
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.catalog import Catalog, dec
from skyplane_ops.transfer.manifest import matches

log = logging.getLogger(__name__)


def extra_keys(
    existing: Mapping[str, ObjectInfo],
    source_keys: Collection[str],
    include: Sequence[str],
    exclude: Sequence[str],
    keep: Sequence[str] = (),
) -> list[str]:
    """Destination keys the filters select that the source does not have, sorted.

    ``keep``: entries the source listing left out (links, unreadable folders: a key, or a
    folder ending in ``/``); what the destination holds under them is never a candidate.
    """

    def kept(key: str) -> bool:
        return any(key == k or (k.endswith("/") and key.startswith(k)) for k in keep)

    return sorted(
        k for k in existing if k not in source_keys and matches(k, include, exclude) and not kept(k)
    )


def check_max_delete(keys: Sequence[str] | int, max_delete: int | None, dst_uri: str) -> None:
    """Refuse every delete when more than ``max_delete`` would go (``keys``: them or how many)."""
    count = keys if isinstance(keys, int) else len(keys)
    if max_delete is not None and count > max_delete:
        raise TransferError(
            f"sync --delete would remove {count} object(s) from {dst_uri}, more than "
            f"--max-delete {max_delete}: nothing was copied or deleted; raise --max-delete or "
            "check the source"
        )


def delete_extra(
    dst: ObjectStore, keys: Iterable[str], source_now: Collection[str]
) -> tuple[int, dict[str, str]]:
    """Delete ``keys`` not in ``source_now``; (deleted, {key: why} of failed deletes)."""
    deleted = 0
    failed: dict[str, str] = {}
    for key in keys:
        if key in source_now:
            continue  # appeared at the source during the run: the next sync copies it
        try:
            dst.delete(key)
        except ObjectNotFoundError:
            continue
        except StoreError as exc:
            failed[key] = f"destination: deleting failed: {type(exc).__name__}: {exc}"
            continue
        deleted += 1
        log.info("deleted %s (absent from the source)", key)
    return deleted, failed


def delete_absent(
    src: ObjectStore, dst: ObjectStore, catalog: Catalog, src_uri: str, listed_again: bool
) -> tuple[int, dict[str, str]]:
    """``sync --delete`` after a clean copy: (deleted, {key: why} of failed deletes).

    Candidates are the catalog's ``dst.extra`` rows absent from a fresh source listing
    (``now``); unless ``listed_again`` (the run listed the source after the copy already),
    the source is listed here, and nothing is deleted if that fails.
    """
    if not catalog.one("SELECT 1 FROM dst WHERE extra = 1 LIMIT 1"):
        return 0, {}
    if not listed_again:
        try:
            catalog.add_now(src)
        except StoreError as exc:
            raise TransferError(
                f"cannot list source {src_uri} again before deleting: {exc}; nothing was deleted"
            ) from exc
    keys = (
        dec(k)
        for (k,) in catalog.pages(
            "key", "dst", "extra = 1 AND NOT EXISTS (SELECT 1 FROM now n WHERE n.key = dst.key)"
        )
    )
    return delete_extra(dst, keys, ())
