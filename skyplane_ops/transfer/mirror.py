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
from dataclasses import dataclass, field
from typing import Any

from gateway_agent.stores.base import ObjectInfo, ObjectStore
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.manifest import matches, same_object

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


@dataclass
class Preview:
    """What a run would do (``--dry-run``): objects to copy and destination objects to delete."""

    copy: list[tuple[str, int]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    skipped: int = 0
    max_delete: int | None = None

    @property
    def delete_refused(self) -> bool:
        return self.max_delete is not None and len(self.delete) > self.max_delete

    def to_dict(self) -> dict[str, Any]:
        return {
            "copy": [{"key": k, "size": s} for k, s in self.copy],
            "delete": list(self.delete),
            "skipped": self.skipped,
            "delete_refused": self.delete_refused,
        }

    def lines(self) -> list[str]:
        out = [f"would copy {k} ({s} bytes)" for k, s in self.copy]
        out += [f"would delete {k}" for k in self.delete]
        tail = (
            f"dry run: {len(self.copy)} to copy, {len(self.delete)} to delete, "
            f"{self.skipped} up to date"
        )
        if self.delete_refused:
            tail += f"; the deletes exceed --max-delete {self.max_delete}: the run would refuse"
        return [*out, tail]


def preview(
    objects: Sequence[ObjectInfo],
    existing: Mapping[str, ObjectInfo] | None,
    *,
    include: Sequence[str],
    exclude: Sequence[str],
    delete: bool,
    max_delete: int | None,
    keep: Sequence[str] = (),
) -> Preview:
    """The dry run: ``existing`` is the destination listing (None when not syncing)."""
    if existing is None:
        return Preview(copy=[(o.key, o.size) for o in objects])
    todo = [o for o in objects if o.key not in existing or not same_object(o, existing[o.key])]
    source_keys = {o.key for o in objects}
    gone = extra_keys(existing, source_keys, include, exclude, keep) if delete else []
    return Preview(
        copy=[(o.key, o.size) for o in todo],
        delete=gone,
        skipped=len(objects) - len(todo),
        max_delete=max_delete if delete else None,
    )
