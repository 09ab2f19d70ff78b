"""Helpers of the engine's fault tests: the real CLI as a subprocess (optionally without the
capabilities that let root read any file, so file modes bite even though the suite runs as
root), one-line error checks and the "nothing was lost" check every case ends with."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from skyplane_ops.testing.transfer import agents_of, read_tree

__all__ = ["agents_of"]  # re-exported: the fault tests' old import

REPO = Path(__file__).resolve().parents[2]
REGIONS = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]
# Root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (for it and every child): a mode-000 file
# is unreadable, as it is for any user.
NO_DAC = ["--bounding-set=-dac_override,-dac_read_search"]
DROP_DAC = ["setpriv", *NO_DAC, "--inh-caps=-dac_override,-dac_read_search"]


def run_cli(
    home: Path, *args: str, drop_dac: bool = False, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``skyplane-ops ARGS`` with its own home; waits for it (no fixed sleeps)."""
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "skyplane_ops.cli", *args]
    if drop_dac:
        cmd = [*DROP_DAC, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``error:`` line of a refused command (and no traceback)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in lines if "error:" in ln]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def assert_nothing_lost(
    src: Path,
    src_before: Mapping[str, bytes],
    dst: Path,
    dst_old: Mapping[str, bytes],
    dst_new: Mapping[str, bytes],
) -> None:
    """Source unchanged; every destination object is exactly its old or its new version."""
    assert read_tree(src) == dict(src_before), "the source changed"
    now = read_tree(dst)
    for key in set(dst_old) | set(now):
        got = now.get(key)
        allowed = [v for v in (dst_old.get(key), dst_new.get(key)) if v is not None]
        if key in dst_old:
            assert got is not None, f"{key} was deleted from the destination"
        assert got is None or any(got == v for v in allowed), f"{key} is neither old nor new"
