"""Odd names a store must carry verbatim, per backend, and the ones a backend must refuse.

Shared by the store conformance suite (tests/stores) and the fault suite, which runs a real
``skyplane-ops cp`` (:func:`cp`) and compares trees by bytes (:func:`tree`).
``PREFIX_BYTES`` is the length of the conformance stores' prefix (``"pre fix/"``), so the long
key makes a full object name of exactly 1024 bytes there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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

# 1016 characters but 2032 bytes: within Azure's limit (characters), over S3's and GCS's (bytes).
WIDE_KEY = "é" * (1024 - PREFIX_BYTES)

HOLDS: dict[str, list[str]] = {
    "memory": [*COMMON, NEWLINE, DOUBLE_SLASH],
    "local": [*COMMON, NEWLINE, NOT_UTF8],
    # moto_server answers 404 to a key with a line break (real S3 holds it): not tested here.
    "s3": [*COMMON, DOUBLE_SLASH],
    "azure": [*COMMON, NEWLINE, DOUBLE_SLASH, WIDE_KEY],
    "gcs": [*COMMON, DOUBLE_SLASH],
}
REFUSES: dict[str, list[str]] = {
    "memory": [NOT_UTF8, LONG_KEY + "x"],
    "local": [DOUBLE_SLASH, "trailing/", "a/./b", "a/../b", "s" * 256],
    "s3": [NOT_UTF8, LONG_KEY + "x", WIDE_KEY],
    "azure": [NOT_UTF8, LONG_KEY + "x"],
    "gcs": [NOT_UTF8, LONG_KEY + "x", NEWLINE, WIDE_KEY],
}


# -- a real ``skyplane-ops cp`` (planner, local gateway processes, verification) ---------------
REGIONS = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]
SRC_REGION = "azure:canadacentral"
CLI_TIMEOUT_S = 300


def cp(
    home: Path,
    src: Path,
    dst: Path,
    *extra: str,
    hooks: dict[str, Any] | None = None,
    unprivileged: bool = False,
) -> subprocess.Popen[str]:
    """Start ``skyplane-ops cp file://src file://dst`` with 1 MiB parts and JSON output.

    ``hooks`` go to the source region's gateways (``--gateway-test-hooks``). ``unprivileged``
    runs the CLI and its gateways in a new user namespace (``unshare --user``): same uid on
    disk, but no CAP_DAC_OVERRIDE, so a ``chmod 000`` folder is unreadable even for root.
    """
    args = [
        sys.executable,
        "-m",
        "skyplane_ops.cli",
        "cp",
        f"file://{src}",
        f"file://{dst}",
        *REGIONS,
        "--chunk-mib",
        "1",
        "--json",
        "--no-progress",
        *extra,
    ]
    if hooks:
        args += ["--gateway-test-hooks", json.dumps({SRC_REGION: hooks})]
    if unprivileged:
        args = ["unshare", "--user", *args]
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def userns_available() -> bool:
    """Whether ``unshare --user`` works here (a container may forbid user namespaces)."""
    try:
        return subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


NO_USERNS = "unshare --user is not available: root cannot be denied a read without it"


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    return proc.returncode, out, err


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120.0) -> None:
    """Wait until ``path`` exists (a gateway reached a test hook), or fail with the CLI's
    output if the run ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"cp ended before {path.name}: rc={proc.returncode} {err}{out}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {path} after {timeout:.0f} s")
        time.sleep(0.02)


def tree(root: Path) -> dict[bytes, bytes]:
    """Every regular file under ``root`` by its relative path in bytes (names are not
    necessarily UTF-8), the store's hidden staging excluded; links are not followed."""
    out: dict[bytes, bytes] = {}
    base = os.fsencode(root)
    for folder, _dirs, files in os.walk(base):
        rel_folder = os.path.relpath(folder, base)
        for name in files:
            path = os.path.join(folder, name)
            rel = name if rel_folder == b"." else os.path.join(rel_folder, name)
            if rel.startswith(b".%staging") or not os.path.isfile(path) or os.path.islink(path):
                continue
            with open(path, "rb") as fh:
                out[rel] = fh.read()
    return out
