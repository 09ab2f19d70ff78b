"""Odd names a store must carry verbatim, per backend, and the ones a backend must refuse.

Shared by the store conformance suite (tests/stores) and the fault suite (a real ``cp``).
``PREFIX_BYTES`` is the length of the conformance stores' prefix (``"pre fix/"``), so the long
key makes a full object name of exactly 1024 bytes there.
"""

from __future__ import annotations

import os

PREFIX_BYTES = 8
LONG_KEY = "/".join(["L" * 250] * 4) + "/" + "x" * (1024 - PREFIX_BYTES - 1004)
assert len((" " * PREFIX_BYTES + LONG_KEY).encode()) == 1024

# Names every backend holds (and a local disk holds as files of exactly these names).
COMMON = [
    "plain.txt",
    "with space/and more  spaces.bin",
    "unicode/ünïcödé/日本語 ファイル.txt",
    "emoji/🚀 rocket",
    "100% done/50%25 literal",
    "report%202024.txt",
    "%00",
    "%2E%2E",
    "a%2Fb/%zz %",
    "tab\there",
    "nested/a/b/c/d/e.parquet",
    LONG_KEY,
]
NEWLINE = "new\nline.txt"
DOUBLE_SLASH = "double//slash//key"
NOT_UTF8 = os.fsdecode(b"latin1-\xe9t\xe9.txt")  # a local file name that is not UTF-8

HOLDS: dict[str, list[str]] = {
    "memory": [*COMMON, NEWLINE, DOUBLE_SLASH],
    "local": [*COMMON, NEWLINE, NOT_UTF8],
    # moto_server answers 404 to a key with a line break (real S3 holds it): not tested here.
    "s3": [*COMMON, DOUBLE_SLASH],
    "azure": [*COMMON, NEWLINE, DOUBLE_SLASH],
    "gcs": [*COMMON, DOUBLE_SLASH],
}
REFUSES: dict[str, list[str]] = {
    "memory": [NOT_UTF8, LONG_KEY + "x"],
    "local": [DOUBLE_SLASH, "trailing/", "a/./b", "a/../b", "s" * 256],
    "s3": [NOT_UTF8, LONG_KEY + "x"],
    "azure": [NOT_UTF8, LONG_KEY + "x"],
    "gcs": [NOT_UTF8, LONG_KEY + "x", NEWLINE],
}
