"""``SkyplaneCopyOperator(destinations=[...])``: one task copies to three destinations on
real local gateways; the XCom has one summary per destination, there is one Asset outlet and
one OpenLineage output per destination. The task runs in its own process with its own Airflow
home and ``skyplane_default`` connection, as on a worker; deferred, the same process plays
the worker (plan, provision, defer), the triggerer (the trigger's event) and the resumed
task (``execute_complete``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset

MiB = 1024 * 1024

TASK = r"""
import collections, json, sys, types
from skyplane_ops.airflow import SkyplaneCopyOperator

# What the task runner hands the task: per outlet Asset, an event whose ``extra`` it fills.
events = collections.defaultdict(lambda: types.SimpleNamespace(extra={}))

args = json.loads(sys.argv[1])
op = SkyplaneCopyOperator(
    task_id="replicate", src=args["src"], src_region="aws:us-east-1",
    destinations=args["dsts"],
    dst_regions=["aws:eu-west-1", "aws:eu-central-1", "gcp:europe-west4"],
)
lineage = op.get_openlineage_facets_on_complete(None)
summary = op.execute({"run_id": "manual__fanout", "outlet_events": events})
print(json.dumps({
    "summary": summary,
    "outlets": [o.uri for o in op.outlets],
    "asset_extra": [events[o].extra for o in op.outlets],
    "lineage_outputs": None if lineage is None else len(lineage.outputs),
}))
"""


DEFERRED = r"""
import asyncio, collections, json, sys, types
from airflow.sdk.exceptions import TaskDeferred
from skyplane_ops.airflow import SkyplaneCopyOperator
from skyplane_ops.airflow.triggers import SkyplaneTransferTrigger

events = collections.defaultdict(lambda: types.SimpleNamespace(extra={}))
args = json.loads(sys.argv[1])
ctx = {"run_id": "manual__fanout_deferred", "outlet_events": events}

def op():
    return SkyplaneCopyOperator(
        task_id="replicate", src=args["src"], src_region="aws:us-east-1",
        destinations=args["dsts"],
        dst_regions=["aws:eu-west-1", "aws:eu-central-1", "gcp:europe-west4"],
        deferrable=True, poll_interval=0.2,
    )

try:
    op().execute(ctx)
    raise SystemExit("the task did not defer")
except TaskDeferred as deferred:
    trigger = deferred.trigger
    kwargs = deferred.kwargs

async def first():
    async for event in trigger.run():
        return event.payload

event = asyncio.run(asyncio.wait_for(first(), 240))
resumed = op()
summary = resumed.execute_complete(ctx, event, **kwargs)
print(json.dumps({
    "summary": summary,
    "asset_extra": [events[o].extra for o in resumed.outlets],
}))
"""


def _run(tmp_path: Path, script: str = TASK, **args: Any) -> dict[str, Any]:
    home = tmp_path / "worker"
    (home / "airflow").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SKYPLANE"))}
    env.update(
        {
            "HOME": str(home),
            "SKYPLANE_OPS_HOME": str(home / ".skyplane-ops"),
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SKYPLANE_DEFAULT": json.dumps(
                {
                    "conn_type": "skyplane",
                    "extra": {"backend": "local", "work_dir": str(home / "w")},
                }
            ),
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert agents_of(home) == []  # the task's fleet was torn down
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _replicate(tmp_path: Path, script: str) -> dict[str, Any]:
    """Three destinations by ``script``: each byte-identical, one verified summary and one
    Asset event (with its metadata) per destination."""
    data = write_dataset(tmp_path / "src", {"big.bin": 2 * MiB + 3, "a/b": 1234})
    dsts = [f"file://{tmp_path / n}/" for n in ("x", "y", "z")]
    out = _run(tmp_path, script, src=f"file://{tmp_path / 'src'}/", dsts=dsts)
    for n in ("x", "y", "z"):
        assert read_tree(tmp_path / n) == data
    summary = out["summary"]
    assert summary["status"] == "ok"
    assert [d["dst_uri"] for d in summary["destinations"]] == dsts
    assert all(d["verification"]["status"] == "passed" for d in summary["destinations"])
    assert all(d["objects"] == 2 for d in summary["destinations"])
    assert [e["objects"] for e in out["asset_extra"]] == [2, 2, 2]
    assert all(e["verified"] and e["bytes"] == 2 * MiB + 3 + 1234 for e in out["asset_extra"])
    out["dsts"] = dsts
    return out


def test_copy_operator_replicates_to_three_destinations(tmp_path: Path) -> None:
    out = _replicate(tmp_path, TASK)
    assert out["outlets"] == [d.rstrip("/") for d in out["dsts"]]  # one Asset per destination
    assert out["lineage_outputs"] == 3  # one OpenLineage output per destination
    assert "password" not in json.dumps(out["summary"]).lower()


def test_deferred_copy_operator_runs_the_fan_out_in_the_driver(tmp_path: Path) -> None:
    _replicate(tmp_path, DEFERRED)
    # The driver ran the fan-out and deleted the fleet (``_run``: no agent left).
    log = next((tmp_path / "worker" / "w" / "runs").glob("*/driver.log")).read_text()
    assert "Traceback" not in log
