"""A move's last step: delete each source object whose copy this run committed and verified.

The only step that removes what the user owns at the source, so it runs last and is narrow:

- only after the whole run verified (``finish_run`` raises before it otherwise), and only the
  objects of ``exp`` (copied, or committed by an earlier run of the same transfer, and checked
  at the destination just now); never one that failed, changed, was skipped as up to date or
  kept by the overwrite policy: its bytes at the destination are not this run's verified copy;
- each is looked up again first and deleted only if it is still the version the run copied
  (same size and version, else same size, ETag and time): a new write at the same key after
  the copy is kept (and reported), not lost;
- killed at any point, every object is at the destination, verified, or still at the source:
  a re-run finds the rest at the source and copies and deletes them.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

from gateway_agent.stores.base import ObjectStore
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.catalog import COMMITTED, TODO, Catalog, dec
from skyplane_ops.transfer.listrows import BATCH, micros

log = logging.getLogger(__name__)
THREADS = 32  # deletes in flight: each waits on one request's latency


def check_max_moves(count: int, max_delete: int | None, src_uri: str) -> None:
    """Refuse the whole move, before anything is copied, when it would delete more than
    ``max_delete`` source objects (as ``--max-delete`` guards ``sync --delete``)."""
    if max_delete is not None and count > max_delete:
        raise TransferError(
            f"mv would delete {count} object(s) from {src_uri} after copying them, more than "
            f"--max-delete {max_delete}: nothing was copied or deleted; raise --max-delete or "
            "check the selection"
        )


def _same(row: tuple[int, str | None, str | None, int | None], key: str, src: ObjectStore) -> bool:
    """Whether ``key`` at the source is still the object the catalog's ``row`` listed."""
    size, version, etag, mtime = row
    info = src.head(key)
    if info.size != size:
        return False
    if version is not None and info.version is not None:
        return info.version == version
    return etag is not None and info.etag == etag and micros(info.modified) == mtime


def delete_moved(src: ObjectStore, catalog: Catalog) -> tuple[int, dict[str, str]]:
    """Delete the verified sources (see the module doc); (deleted, {key: why} of those kept)."""
    rows = catalog.pages(
        "s.key, s.size, s.version, s.etag, s.mtime",
        f"(SELECT src.* FROM src JOIN exp e ON e.key = src.key "
        f"WHERE src.state IN ({TODO}, {COMMITTED})) s",
    )

    def one(row: tuple[str | bytes, int, str | None, str | None, int | None]) -> tuple[str, str]:
        """(key, why it was kept), why "" when it was deleted or was gone already."""
        key = dec(row[0])
        try:
            if not _same((row[1], row[2], row[3], row[4]), key, src):
                return key, "source: changed after its copy: kept at the source"
            src.delete(key)
        except ObjectNotFoundError:
            return key, ""  # gone already (a re-run after a kill mid-way)
        except StoreError as exc:
            return key, f"source: delete after the move failed: {type(exc).__name__}: {exc}"
        log.debug("moved %s", key)
        return key, ""

    deleted = 0
    kept: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        while page := list(islice(rows, BATCH)):
            for key, why in pool.map(one, page):
                if why:
                    kept[key] = why
                else:
                    deleted += 1
    return deleted, kept
