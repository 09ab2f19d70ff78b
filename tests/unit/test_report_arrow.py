"""The report's raw-buffer columns (``transfer.report.arrow``) are the arrays ``pa.array``
makes of the same values, nulls and non-ASCII keys included, for every column type."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from skyplane_ops.transfer.report import schema as S
from skyplane_ops.transfer.report.arrow import column

PAGE: dict[str, list[Any]] = {
    "key": ["a", "dt=1/é ü.json", "c", ""],
    "size": [1, None, 3, 0],
    "outcome": [S.FAILED, S.COPIED, S.FAILED, S.DELETED],
    "error": [None, "source: changed during the run", None, None],
    "src_version": [None, None, None, None],
    "src_etag": ["e", None, "f", "g"],
    "dst_etag": [None, "x", None, None],
    "dst_version": [None, "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY", None, "1700000000000001"],
    "checksum": ["0a0b0c0d", None, "0b", None],
    "checksum_kind": ["crc32c", None, "crc32c", None],
    "paths": [None, "aws:us-east-1 -> aws:eu-west-1", None, None],
    "src_modified": [1_700_000_000_123_456, None, 5, None],
    "finished": [None, None, 7, 1_700_000_000_000_001],
}


@pytest.mark.parametrize("name", S.COLUMNS)
def test_a_raw_column_is_pa_arrays_column(name: str) -> None:
    kind = S.arrow_schema().field(name).type
    got = column(PAGE[name], kind)
    got.validate(full=True)
    assert got.type == kind
    assert got.equals(pa.array(PAGE[name], type=kind))
    assert got.to_pylist() == pa.array(PAGE[name], type=kind).to_pylist()


def test_an_empty_page_makes_empty_columns() -> None:
    for name in S.COLUMNS:
        kind = S.arrow_schema().field(name).type
        assert column([], kind).equals(pa.array([], type=kind))
