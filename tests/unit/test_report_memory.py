"""The transfer report is written in row groups: its memory does not grow with the number of
objects (issue 41: flat at 1M objects). Each size runs in a fresh process, measured by its
peak RSS while the report is written, after the catalog was filled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, resource, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from skyplane_ops.transfer.catalog import COMMITTED, Catalog
from skyplane_ops.transfer.report import ReportRun
from skyplane_ops.transfer.report.writer import _pages, _write_parquet

n, folder = int(sys.argv[1]), Path(sys.argv[2])
catalog = Catalog(folder)
rows = ((f"k/{i:09d}", 1024, 1_700_000_000_000_000 + i, None, f"v{i}", f"e{i}", COMMITTED)
        for i in range(n))
catalog.write("INSERT INTO src(key,size,mtime,ck,version,etag,state) VALUES(?,?,?,?,?,?,?)", rows)
catalog.write("INSERT INTO exp VALUES(?,?,?)", ((f"k/{i:09d}", 1024, i) for i in range(n)))
catalog.write("INSERT INTO way VALUES(?,?,?,?)", ((f"k/{i:09d}", 1, i, f"d{i}") for i in range(n)))
run = ReportRun("t", "j", "file:///s", "file:///d", routes=["a -> b"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
counts = _write_parquet(folder / "o.parquet", _pages(catalog, run), run)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
meta = pq.ParquetFile(folder / "o.parquet").metadata
print(json.dumps({"growth_kib": after - before, "copied": counts["copied"]["objects"],
                  "rows": meta.num_rows, "groups": meta.num_row_groups}))
"""


def _measure(n: int, tmp: Path) -> dict[str, int]:
    folder = tmp / str(n)
    folder.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(n), str(folder)],
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    ).stdout
    return dict(json.loads(out.splitlines()[-1]))


def test_report_memory_is_flat(tmp_path: Path) -> None:
    small = _measure(150_000, tmp_path)
    large = _measure(600_000, tmp_path)
    assert small["rows"] == small["copied"] == 150_000
    assert large["rows"] == large["copied"] == 600_000 and large["groups"] >= 9
    # Four times the objects: the peak may move by noise and allocator slack, not 4x (the
    # rows in Python would take ~300 MiB more).
    assert large["growth_kib"] < small["growth_kib"] + 40 * 1024, (small, large)
