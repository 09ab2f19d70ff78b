"""CRC32C over any buffer without copying it.

google-crc32c's C extension only accepts ``bytes``; chunks arrive in preallocated bytearrays
(``recv_into``) and copying 64 MiB just to checksum it would halve throughput. For writable
buffers we call the same bundled libcrc32c through ctypes (which releases the GIL); anything
else goes through google-crc32c itself.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable
from typing import Any

import google_crc32c


def _load_extend() -> Callable[[int, Any, int], int] | None:
    libdir = os.path.dirname(google_crc32c.__file__) + ".libs"
    for path in sorted(glob.glob(os.path.join(libdir, "libcrc32c*"))):
        try:
            lib = ctypes.CDLL(path)
            fn = lib.crc32c_extend
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint32
        fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        return fn  # type: ignore[no-any-return]
    return None


_extend = _load_extend()


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32C of ``data`` (continuing from ``crc``), zero-copy when the buffer allows it."""
    if isinstance(data, bytes):
        return int(google_crc32c.extend(crc, data))
    view = memoryview(data).cast("B")
    if len(view) == 0:
        return crc
    if _extend is not None and not view.readonly:
        arr = (ctypes.c_char * len(view)).from_buffer(view)
        return int(_extend(crc, arr, len(view)))
    return int(google_crc32c.extend(crc, bytes(view)))
