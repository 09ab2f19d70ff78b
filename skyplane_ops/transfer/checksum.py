"""Whole-object CRC32C from per-range CRC32Cs (zlib's crc32_combine over GF(2), Castagnoli).

Sources checksum each range they read; the control plane folds those into one CRC32C per
object without reading anything again, and compares it with what the destination reports.
"""

from __future__ import annotations

import base64

_POLY = 0x82F63B78  # CRC32C, reflected


def _times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _square(mat: list[int]) -> list[int]:
    return [_times(mat, mat[n]) for n in range(32)]


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of A+B given crc(A), crc(B) and len(B)."""
    if len2 <= 0:
        return crc1
    odd = [_POLY] + [1 << n for n in range(31)]  # operator for one zero bit
    even = _square(odd)  # two zero bits
    odd = _square(even)  # four zero bits
    while True:
        even = _square(odd)
        if len2 & 1:
            crc1 = _times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _square(even)
        if len2 & 1:
            crc1 = _times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def combine_ranges(ranges: list[tuple[int, int]]) -> int:
    """Fold ``(crc, length)`` pairs, in object order, into one CRC32C."""
    crc = 0
    for i, (c, n) in enumerate(ranges):
        crc = c if i == 0 else crc32c_combine(crc, c, n)
    return crc


def crc32c_b64(crc: int) -> str:
    """The base64 big-endian form GCS and S3 report natively."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()
