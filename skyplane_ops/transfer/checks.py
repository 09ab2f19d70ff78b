"""Range checks of the transfer options, done in the core so every face (API, CLI, Airflow,
Dagster) refuses bad input the same way, with one line, before any work starts."""

from __future__ import annotations

import math
from typing import Any

from gateway_agent.wire import MAX_PAYLOAD
from skyplane_ops.errors import TransferError

KiB = 1024
MIN_PART_SIZE = 64 * KiB
# A chunk (one multipart part, or a batch of small objects) travels as one wire frame, whose
# payload is at most ``wire.MAX_PAYLOAD`` (1 GiB), and is held whole in a gateway's byte budget
# (1 GiB by default, ``--buffer-mib``). So 1 GiB is the largest part size that can work (S3's
# own part limit, 5 GiB, is higher); objects needing more parts than a store allows get larger
# parts up to this size (``manifest.choose_part_size``).
MAX_PART_SIZE = MAX_PAYLOAD
MAX_CONNECTIONS = 1024
MAX_THREADS = 256
MAX_COMPRESS_LEVEL = 22  # zstd's highest level
# End checks (``transfer.verify``): full = size + CRC32C from the store's checksum or a checked
# write, else a read-back; read-back = ignore checked writes; size = the listing's sizes.
VERIFY_MODES = ("full", "read-back", "size")


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else ``TransferError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TransferError(f"{name} must be a whole number, not {value!r}")
    if value < low or (high is not None and value > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise TransferError(f"{name} must be {span}, got {value}")
    return value


def check_positive(name: str, value: Any) -> float:
    """A finite number above zero (seconds, intervals)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TransferError(f"{name} must be a number, not {value!r}")
    if value <= 0:
        raise TransferError(f"{name} must be greater than 0, got {value}")
    return float(value)


def check_transfer_options(
    *,
    part_size: Any,
    verify: Any,
    dispatch: Any = None,
    max_delete: Any = None,
) -> None:
    """Every numeric knob of ``run_transfer`` (and its ``DispatchOptions``) in range."""
    if isinstance(part_size, bool) or not isinstance(part_size, int):
        raise TransferError(f"part_size must be a whole number of bytes, not {part_size!r}")
    if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
        raise TransferError(
            f"part size (--chunk-mib) must be between 64 KiB and 1 GiB (--chunk-mib 1 to "
            f"{MAX_PART_SIZE // 1024**2}: a chunk travels in one wire frame of at most 1 GiB and "
            f"is held whole in a gateway's 1 GiB byte budget), got {part_size} bytes"
        )
    if verify not in VERIFY_MODES:
        raise TransferError(f"verify must be 'full', 'read-back' or 'size', not {verify!r}")
    if max_delete is not None:
        check_int("max_delete (--max-delete)", max_delete, 0)
    if dispatch is None:
        return
    if dispatch.connections is not None:
        check_int("connections (--connections-per-hop)", dispatch.connections, 1, MAX_CONNECTIONS)
    check_int("compress_level", dispatch.compress_level, 0, MAX_COMPRESS_LEVEL)
    check_int("max_attempts", dispatch.max_attempts, 1)
    check_int("reader_threads", dispatch.reader_threads, 1, MAX_THREADS)
    check_int("writer_threads", dispatch.writer_threads, 1, MAX_THREADS)
    check_int("window_chunks", dispatch.window_chunks, 1)
    check_int("object_threads", dispatch.object_threads, 1, MAX_THREADS)
    check_positive("poll_interval", dispatch.poll_interval)
    check_positive("stall_timeout", dispatch.stall_timeout)
