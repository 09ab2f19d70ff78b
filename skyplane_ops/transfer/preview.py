"""The dry run (``--dry-run``): what a run would copy, skip, fail and delete.

It lists into the run's on-disk catalog and decides there, with the run's own code
(``todo.plan_todo``), so it says exactly what the run would do, and its memory does not grow
with the object count: the lines and the JSON are read back a page at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

from skyplane_ops.transfer import syncstate
from skyplane_ops.transfer.catalog import SKIPPED, TODO, Catalog, dec
from skyplane_ops.transfer.listing import list_request
from skyplane_ops.transfer.metadata import META_CHANGED, sync_meta_check
from skyplane_ops.transfer.preflight import check_before_run
from skyplane_ops.transfer.request import TransferRequest, request_from
from skyplane_ops.transfer.todo import (
    IGNORE_EXISTING_WHY,
    UPDATE_WHY,
    Todo,
    plan_todo,
    same_sql,
)

DST_CHANGED = "the destination changed since the last sync"


@dataclass
class Preview:
    """A dry run's answer: counts, and the keys left in the catalog, streamed on demand.
    Close it (or use it as a context manager) to remove the catalog's scratch file."""

    catalog: Catalog
    todo: Todo
    max_delete: int | None = None
    request: TransferRequest | None = None

    @property
    def delete_refused(self) -> bool:
        """Whether the run would refuse every delete (``--max-delete`` exceeded)."""
        return self.max_delete is not None and self.todo.to_delete > self.max_delete

    def copies(self) -> Iterator[tuple[str, int]]:
        """(key, size) of each object the run would copy, in key order."""
        for key, size, _why in self.copies_why():
            yield key, size

    def copies_why(self) -> Iterator[tuple[str, int, str | None]]:
        """(key, size, why or None) of each object the run would copy, in key order; why is
        said where the source is as the sync record has it and the destination is not (someone
        else changed the copy: sync puts the source's bytes back)."""
        # Only the metadata differs (``metadata.mark_metadata_changes``): says which.
        why = f"(SELECT o.why FROM outcome o WHERE o.key = src.key AND o.kind = '{META_CHANGED}')"
        if self.catalog.state is not None:
            why = f"coalesce({why}, CASE WHEN {syncstate.dst_changed()} THEN '{DST_CHANGED}' END)"
        for raw, size, because in self.catalog.pages(f"key, size, {why}", "src", f"state = {TODO}"):
            yield dec(raw), int(size), because

    def keeps(self) -> Iterator[tuple[str, str]]:
        """(key, why) of each destination object the overwrite policy keeps
        (``--ignore-existing``, ``--update``), in key order; not those sync finds equal."""
        request = self.request
        if request is None or not (request.ignore_existing or request.update):
            return
        why = IGNORE_EXISTING_WHY if request.ignore_existing else UPDATE_WHY
        where = f"state = {SKIPPED}"
        if request.sync:
            where += (
                " AND NOT EXISTS (SELECT 1 FROM dst d WHERE d.key = src.key "
                f"AND {same_sql(self.catalog)})"
            )
        for (raw,) in self.catalog.pages("key", "src", where):
            yield dec(raw), why

    def selection(self) -> str | None:
        """What selects the source besides globs, in one line, or None."""
        request = self.request
        if request is None or not request.selects_part:
            return None
        parts = []
        if request.files_from is not None:
            parts.append(f"{len(request.files_from)} key(s) of --files-from, looked up by key")
        win = request.window()
        if not win.open:
            lo = "" if win.lo is None else f"{_iso(win.lo)} <= "
            hi = "" if win.hi is None else f" < {_iso(win.hi)}"
            parts.append(f"modified {lo}t{hi}")
        return "selected: " + "; ".join(parts)

    def deletes(self) -> Iterator[str]:
        """Destination keys ``sync --delete`` would remove, in key order."""
        for (raw,) in self.catalog.pages("key", "dst", "extra = 1"):
            yield dec(raw)

    def failures(self) -> Iterator[tuple[str, str]]:
        """(key, why) of objects the run would fail before moving a byte (unreadable at the
        source, a name the destination cannot hold)."""
        for raw, why in self.catalog.pages("key, why", "outcome", "kind = 'failed'"):
            yield dec(raw), str(why)

    def lines(self) -> Iterator[str]:
        verb = "move" if self.request is not None and self.request.move else "copy"
        if (chosen := self.selection()) is not None:
            yield chosen
        yield from (
            f"would {verb} {k} ({s} bytes)" + (f": {why}" if why else "")
            for k, s, why in self.copies_why()
        )
        yield from (f"would keep {k}: {why}" for k, why in self.keeps())
        yield from (f"would fail {k}: {why}" for k, why in self.failures())
        yield from (f"would delete {k}" for k in self.deletes())
        todo = self.todo
        tail = (
            f"dry run: {todo.objects} to {verb}, {todo.to_delete} to delete, "
            f"{todo.skipped} up to date"
        )
        if todo.unread:
            tail += f", {todo.unread} would fail"
        if self.delete_refused:
            tail += f"; the deletes exceed --max-delete {self.max_delete}: the run would refuse"
        yield tail

    def write_json(self, out: TextIO) -> None:
        """The answer as one JSON object, written as it is read: the ``request`` the run would
        carry out, ``copy`` [{key, size}], ``keep`` [{key, why}] (the overwrite policy),
        ``fail`` [{key, why}], ``delete`` [key], ``skipped``, ``delete_refused``."""
        out.write("{")
        if self.request is not None:
            out.write(f'\n  "request": {json.dumps(self.request.to_dict(), sort_keys=True)},')
        _array(
            out,
            "copy",
            (
                {"key": k, "size": s, **({"why": why} if why else {})}
                for k, s, why in self.copies_why()
            ),
        )
        out.write(",")
        _array(out, "keep", ({"key": k, "why": w} for k, w in self.keeps()))
        out.write(",")
        _array(out, "fail", ({"key": k, "why": w} for k, w in self.failures()))
        out.write(",")
        _array(out, "delete", self.deletes())
        tail = {"skipped": self.todo.skipped, "delete_refused": self.delete_refused}
        out.write(f",\n  {json.dumps(tail)[1:-1]}\n}}\n")

    def close(self) -> None:
        self.catalog.close()

    def __enter__(self) -> Preview:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds")


def _array(out: TextIO, name: str, items: Iterable[Any]) -> None:
    out.write(f"\n  {json.dumps(name)}: [")
    sep = "\n    "
    for item in items:
        out.write(sep + json.dumps(item))
        sep = ",\n    "
    out.write("\n  ]" if sep != "\n    " else "]")


def preview_transfer(
    request: TransferRequest | str, dst: str | None = None, **fields: Any
) -> Preview:
    """The dry run: what the run of ``request`` would copy and (with ``delete``) delete; no
    fleet. The catalog is a scratch file in the request's journal folder."""
    request = request_from(request, dst, **fields)
    check_before_run(request)
    listing = list_request(request)
    catalog = listing.catalog
    try:
        dst_store = request.dst.open("destination")
        todo = plan_todo(
            catalog,
            dst_store,
            request.dst_uri,
            request.include,
            request.exclude,
            sync=request.sync,
            delete=request.delete,
            max_delete=None,  # reported (``delete_refused``), not raised
            ignore_existing=request.ignore_existing,
            update=request.update,
            move=False,  # the dry run reports the moves, it does not refuse them
            meta_check=sync_meta_check(
                request.src.open("source"), dst_store, request.metadata, request.metadata_set
            ),
        )
    except BaseException:
        catalog.close()
        raise
    return Preview(catalog, todo, request.max_delete if request.delete else None, request)
