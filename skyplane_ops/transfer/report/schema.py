"""The report's columns and outcomes: one place, read by the writer, the reader and the docs."""

from __future__ import annotations

import functools
from typing import Any

OBJECTS = "objects.parquet"
SUMMARY = "summary.json"
FORMAT = 1  # the summary's ``format``: bumped when a column changes meaning

COPIED = "copied"
SKIPPED_UP_TO_DATE = "skipped_up_to_date"
SKIPPED_BY_RULE = "skipped_by_rule"
FAILED = "failed"
DELETED = "deleted"
OUTCOMES = (COPIED, SKIPPED_UP_TO_DATE, SKIPPED_BY_RULE, FAILED, DELETED)

COLUMNS = (
    "key",
    "size",
    "outcome",
    "error",
    "src_version",
    "src_etag",
    "dst_etag",
    "dst_version",
    "checksum",
    "checksum_kind",
    "paths",
    "src_modified",
    "finished",
)


@functools.cache
def arrow_schema() -> Any:
    """The Parquet schema (pyarrow is imported here, when a report is written: a run that
    starts pays nothing for it)."""
    import pyarrow as pa

    time = pa.timestamp("us", tz="UTC")
    types = {
        "key": pa.string(),
        "size": pa.int64(),
        "outcome": pa.dictionary(pa.int8(), pa.string()),
        "error": pa.string(),
        "src_version": pa.string(),
        "src_etag": pa.string(),
        "dst_etag": pa.string(),
        "dst_version": pa.string(),
        "checksum": pa.string(),
        "checksum_kind": pa.string(),
        "paths": pa.string(),
        "src_modified": time,
        "finished": time,
    }
    required = {"key", "outcome"}
    return pa.schema([pa.field(c, types[c], nullable=c not in required) for c in COLUMNS])
