"""Write a run's report: rows streamed from the catalog into Parquet row groups on a local
scratch file, uploaded whole to the report store, then the JSON summary beside it.

The summary is written last: a reader that finds it finds the Parquet file of the same run
(both name the job id). A report that cannot be written is logged and left out of the result
(``uris`` has no ``report``); it never fails a transfer whose objects landed.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway_agent.stores import open_store
from gateway_agent.stores.base import ObjectStore
from skyplane_ops.transfer.catalog import CHANGED, COMMITTED, FAILED, REFUSED, SKIPPED, TODO
from skyplane_ops.transfer.listrows import dec
from skyplane_ops.transfer.report import schema as S
from skyplane_ops.transfer.report.arrow import column
from skyplane_ops.transfer.request import TransferRequest, to_uri
from skyplane_ops.transfer.result import TransferResult

log = logging.getLogger(__name__)

ROW_GROUP = 65_536  # rows per Parquet row group: what the writer holds at once
PART = 16 << 20  # upload part size of a large report

# One row per source object, in the report's column order, with what the other tables know
# of it; the outcome and the checksum are worked out by SQLite (no Python per field).
_SOURCE_ROWS = f"""(SELECT s.key AS key, s.size AS size,
  CASE WHEN s.state IN ({TODO}, {COMMITTED}) AND e.crc IS NOT NULL THEN '{S.COPIED}'
       WHEN s.state = {SKIPPED} THEN '{S.SKIPPED_UP_TO_DATE}' ELSE '{S.FAILED}' END AS outcome,
  CASE WHEN s.state = {CHANGED} THEN 'source: changed during the run'
       WHEN s.state IN ({FAILED}, {REFUSED}) THEN coalesce(o.why, 'failed')
       WHEN s.state IN ({TODO}, {COMMITTED}) AND e.crc IS NULL THEN 'not finished'
       END AS error,
  s.version AS src_version, s.etag AS src_etag, coalesce(g.etag, d.etag) AS dst_etag,
  w.ver AS dst_version,
  CASE WHEN e.crc IS NOT NULL THEN printf('%08x', e.crc)
       WHEN s.ck IS NOT NULL THEN coalesce(json_extract(s.ck, '$.crc32c'),
            (SELECT value FROM json_each(s.ck) ORDER BY key LIMIT 1)) END AS checksum,
  CASE WHEN e.crc IS NOT NULL THEN 'crc32c'
       WHEN json_extract(s.ck, '$.crc32c') IS NOT NULL THEN 'crc32c'
       WHEN s.ck IS NOT NULL THEN (SELECT key FROM json_each(s.ck) ORDER BY key LIMIT 1)
       END AS checksum_kind,
  w.paths AS paths, s.mtime AS src_modified, w.at AS finished
  FROM src s LEFT JOIN exp e ON e.key = s.key LEFT JOIN way w ON w.key = s.key
  LEFT JOIN outcome o ON o.key = s.key LEFT JOIN got g ON g.key = s.key
  LEFT JOIN dst d ON d.key = s.key)"""
_PAGE = 5000  # rows per page read from the catalog


@dataclass
class ReportRun:
    """What the report says about the run beside its rows: identity, start, the plan's paths
    (index -> ``a -> b``) and whether the mirror delete ran (and which deletes failed)."""

    transfer_id: str
    job_id: str
    src_uri: str
    dst_uri: str
    started: float = field(default_factory=time.time)  # epoch seconds
    routes: Sequence[str] = ()
    deleted: bool = False
    delete_failed: Mapping[str, str] = field(default_factory=dict)


def report_location(
    request: TransferRequest, transfer_id: str, job_id: str
) -> tuple[ObjectStore, str, str]:
    """(store, key prefix, folder URI) of one run's report: ``<transfer id>/<job id>/``, so
    a retry, or each partition a Dagster run copies under one transfer id, keeps its own."""
    base = request.report_uri or to_uri(str(_default_home() / "reports"))
    options = dict(request.report_options) if request.report_uri else {}
    store = open_store(base, options)
    prefix = f"{transfer_id}/{job_id}/"
    return store, prefix, f"{base.rstrip('/')}/{prefix}"


def _default_home() -> Path:
    return Path(os.environ.get("SKYPLANE_OPS_HOME") or Path.home() / ".skyplane-ops")


def write_report(
    request: TransferRequest,
    result: TransferResult,
    run: ReportRun,
    catalog: Any = None,
) -> str | None:
    """Write the report of ``result`` (rows from ``catalog``, a ``Catalog`` or None for a run
    answered without one) and set ``result.uris["report"]``; the summary's URI, or None when
    it could not be written (logged)."""
    try:
        store, prefix, folder = report_location(request, run.transfer_id, run.job_id)
        scratch = Path(request.journal_path) / "reports"
        scratch.mkdir(parents=True, exist_ok=True)
        counts: dict[str, Any] = {}
        if catalog is not None:  # a run answered without a listing (up to date) has no rows:
            # no Parquet, and no pyarrow loaded for it
            with tempfile.NamedTemporaryFile(dir=scratch, suffix=".parquet") as tmp:
                counts = _write_parquet(Path(tmp.name), _pages(catalog, run), run)
                _upload(store, prefix + S.OBJECTS, Path(tmp.name))
        summary = _summary(result, run, counts, folder, catalog)
        store.write(prefix + S.SUMMARY, json.dumps(summary, indent=2).encode())
    except Exception as exc:  # a report never fails a transfer whose objects landed
        log.warning("the transfer report could not be written: %s: %s", type(exc).__name__, exc)
        return None
    result.uris["report"] = folder + S.SUMMARY
    if catalog is not None:
        result.uris["report_objects"] = folder + S.OBJECTS
    return result.uris["report"]


# -- rows --------------------------------------------------------------------------------

Page = dict[str, list[Any]]


def _pages(catalog: Any, run: ReportRun) -> Iterator[Page]:
    """Every object's row, a page of columns at a time: the source's (key order), entries the
    listing left out, then the mirror deletions."""
    if catalog is None:
        return
    names: dict[int, str | None] = {}
    page: list[tuple[Any, ...]] = []
    for row in catalog.pages("*", _SOURCE_ROWS):
        page.append(row)
        if len(page) == _PAGE:
            yield _columns(page, run, names)
            page = []
    if page:
        yield _columns(page, run, names)
    extra = [
        {"key": e.key, "outcome": S.FAILED if e.error else S.SKIPPED_BY_RULE, "error": e.reason}
        for e in catalog.problems
    ]
    if run.deleted:
        now = time.time_ns() // 1000
        for (key,) in catalog.pages(
            "key", "dst", "extra = 1 AND NOT EXISTS (SELECT 1 FROM now n WHERE n.key = dst.key)"
        ):
            name = dec(key)
            why = run.delete_failed.get(name)
            extra.append(
                {
                    "key": name,
                    "outcome": S.FAILED if why else S.DELETED,
                    "error": why,
                    "finished": None if why else now,
                }
            )
            if len(extra) == _PAGE:
                yield {c: [r.get(c) for r in extra] for c in S.COLUMNS}
                extra = []
    if extra:
        yield {c: [r.get(c) for r in extra] for c in S.COLUMNS}


def _columns(page: list[tuple[Any, ...]], run: ReportRun, names: dict[int, str | None]) -> Page:
    columns = {c: list(v) for c, v in zip(S.COLUMNS, zip(*page, strict=True), strict=True)}
    columns["key"] = [k if isinstance(k, str) else dec(k) for k in columns["key"]]
    paths = columns["paths"]
    for i, bits in enumerate(paths):
        if bits is not None:
            if bits not in names:
                names[bits] = _paths(bits, run.routes)
            paths[i] = names[bits]
    return columns


def _paths(bits: int | None, routes: Sequence[str]) -> str | None:
    if not bits:
        return None
    names = [routes[i] if i < len(routes) else f"path {i}" for i in range(63) if bits >> i & 1]
    return "; ".join(names)


# -- files -------------------------------------------------------------------------------


def _write_parquet(path: Path, pages: Iterator[Page], run: ReportRun) -> dict[str, Any]:
    """Stream ``pages`` into ``path`` in row groups of ``ROW_GROUP`` rows; objects and bytes
    per outcome."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts: dict[str, Any] = {o: {"objects": 0, "bytes": 0} for o in S.OUTCOMES}
    meta = {"transfer_id": run.transfer_id, "job_id": run.job_id}
    schema = S.arrow_schema()
    held: list[Any] = []
    rows = 0
    with pq.ParquetWriter(
        path, schema.with_metadata({"skyplane_ops": json.dumps(meta)}), compression="zstd"
    ) as writer:
        for page in pages:
            for outcome, size in zip(page["outcome"], page["size"], strict=True):
                tally = counts[outcome]
                tally["objects"] += 1
                tally["bytes"] += size or 0
            held.append(_table(page))
            rows += len(page["key"])
            if rows >= ROW_GROUP:
                writer.write_table(pa.concat_tables(held), row_group_size=ROW_GROUP)
                held, rows = [], 0
        if held or not any(t["objects"] for t in counts.values()):
            writer.write_table(
                pa.concat_tables(held) if held else schema.empty_table(),
                row_group_size=ROW_GROUP,
            )
    return counts


def _table(page: Page) -> Any:
    """A page as a table, column by column (``Table.from_pydict`` with a schema is ~15 times
    slower: it converts row by row), each from raw buffers (``report.arrow``: no pandas)."""
    import pyarrow as pa

    schema = S.arrow_schema()
    arrays = [column(page[name], schema.field(name).type) for name in S.COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema)


def _upload(store: ObjectStore, key: str, path: Path) -> None:
    """One PUT for a small file, else a multipart upload (aborted on failure): the object
    appears whole or not at all."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= PART:
            store.write(key, fh.read())
            return
        upload = store.create_multipart(key)
        try:
            parts = []
            for number in range(1, (size + PART - 1) // PART + 1):
                store.upload_part(key, upload, number, fh.read(PART))
                parts.append(number)
            store.complete_multipart(key, upload, parts)
        except BaseException:
            store.abort_multipart(key, upload)
            raise


def _summary(
    result: TransferResult,
    run: ReportRun,
    counts: dict[str, Any],
    folder: str,
    catalog: Any,
) -> dict[str, Any]:
    outside = catalog.outside[0] if catalog is not None else 0
    if catalog is None:  # answered before any listing was kept: counted, not listed
        outside = result.objects_skipped
    return {
        "format": S.FORMAT,
        "transfer_id": run.transfer_id,
        "job_id": run.job_id,
        "src_uri": run.src_uri,
        "dst_uri": run.dst_uri,
        "status": result.status,
        "started": _iso(run.started),
        "finished": _iso(time.time()),
        "seconds": result.seconds,
        "bytes_moved": result.bytes,
        "gbps": result.gbps,
        "verification": result.verification.get("status"),
        "outcomes": counts,
        # Objects a quick walk found equal and never listed one by one (no rows).
        "up_to_date_unlisted": outside,
        "paths": list(run.routes),
        "objects_uri": folder + S.OBJECTS if catalog is not None else None,
        "columns": list(S.COLUMNS),
    }


def _iso(epoch: float) -> str:
    # milliseconds: two runs of a transfer within one second must still sort in order
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
