"""The report's columns and outcomes: one place, read by the writer, the reader and the docs."""

from __future__ import annotations

import pyarrow as pa

OBJECTS = "objects.parquet"
SUMMARY = "summary.json"
FORMAT = 1  # the summary's ``format``: bumped when a column changes meaning

COPIED = "copied"
SKIPPED_UP_TO_DATE = "skipped_up_to_date"
SKIPPED_BY_RULE = "skipped_by_rule"
FAILED = "failed"
DELETED = "deleted"
OUTCOMES = (COPIED, SKIPPED_UP_TO_DATE, SKIPPED_BY_RULE, FAILED, DELETED)

_TIME = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("size", pa.int64()),
        pa.field("outcome", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("error", pa.string()),
        pa.field("src_version", pa.string()),
        pa.field("src_etag", pa.string()),
        pa.field("dst_etag", pa.string()),
        pa.field("checksum", pa.string()),
        pa.field("checksum_kind", pa.string()),
        pa.field("paths", pa.string()),
        pa.field("src_modified", _TIME),
        pa.field("finished", _TIME),
    ]
)
COLUMNS = tuple(SCHEMA.names)
