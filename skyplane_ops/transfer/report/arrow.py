"""The report's Arrow columns built from raw buffers: ``pa.array`` imports pandas on its first
call (to ask whether its input is a pandas object), 0.3-1 s after every copy on a loaded
machine, for a report of a few hundred rows. The values are what the catalog gives: strings,
integers, epoch microseconds for times, None for a missing value."""

from __future__ import annotations

import array
import itertools
from typing import Any


def column(values: list[Any], type_: Any) -> Any:
    """``pa.array(values, type=type_)`` for the report's types (string, int64, timestamp,
    dictionary of strings), without pandas."""
    import pyarrow as pa

    n = len(values)
    nulls = sum(v is None for v in values)
    validity = _validity(values) if nulls else None
    if pa.types.is_dictionary(type_):
        words = list(dict.fromkeys(v for v in values if v is not None))  # first seen first
        where = {w: i for i, w in enumerate(words)}
        indices = array.array("b", [where.get(v, 0) for v in values])
        index_type = type_.index_type
        return pa.DictionaryArray.from_arrays(
            pa.Array.from_buffers(index_type, n, [validity, pa.py_buffer(indices)], nulls),
            column(words, type_.value_type),
        )
    if pa.types.is_string(type_):
        encoded = [b"" if v is None else str(v).encode() for v in values]
        offsets = array.array("i", [0])
        offsets.extend(itertools.accumulate(len(e) for e in encoded))
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(type_, n, buffers, nulls)
    if pa.types.is_integer(type_) or pa.types.is_timestamp(type_):
        data = array.array("q", [0 if v is None else int(v) for v in values])
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(data)], nulls)
    raise TypeError(f"no raw column for Arrow type {type_}")


def _validity(values: list[Any]) -> Any:
    """Arrow's validity bitmap (bit i set: value i present, least significant bit first)."""
    import pyarrow as pa

    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bits)
