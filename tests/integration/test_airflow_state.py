"""One transfer, four "hosts" that share no filesystem: only the state store (S3 on moto).

Each step runs in its own process with its own HOME, ``SKYPLANE_OPS_HOME``, Airflow home and
work dir, as on Celery/Kubernetes workers and a separate triggerer: plan and provision on A,
the deferred transfer (its driver) on B, the trigger on C, completion and teardown on D. The
fleet secret, the status with its heartbeat and the journal travel only through the state
store. The gateways and the data stores are shared, as cloud gateways and buckets would be.
One machine has one hostname, so C is told the driver runs elsewhere: it then goes by the
heartbeat in the store alone, as a triggerer on another host must.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.testing.emulators import Emulator

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

STEP = r"""
import asyncio, json, sys
from airflow.sdk.exceptions import TaskDeferred
from skyplane_ops.airflow.operators import (
    SkyplaneDeprovisionOperator, SkyplanePlanOperator, SkyplaneProvisionOperator,
    SkyplaneTransferOperator)
from skyplane_ops.airflow.triggers import SkyplaneTransferTrigger

args = json.loads(sys.argv[1])
step, ctx = args["step"], {"run_id": "manual__xhost"}
if step == "plan_provision":
    plan = SkyplanePlanOperator(task_id="plan", src_region=args["src_region"],
                                dst_regions=args["dst_region"], src=args["src"],
                                plan_uri=args["plan_uri"], transfer_id=args["tid"]).execute(ctx)
    fleet = SkyplaneProvisionOperator(task_id="provision", plan=plan,
                                      transfer_id=args["tid"]).execute(ctx)
    print(json.dumps({"plan": plan, "fleet": fleet}))
elif step == "transfer":
    op = SkyplaneTransferOperator(task_id="transfer", src=args["src"], dst=args["dst"],
                                  plan=args["plan"], fleet=args["fleet"], deferrable=True,
                                  poll_interval=0.2, engine_options={"part_size": 8 << 20})
    try:
        op.execute(ctx)
    except TaskDeferred as deferred:
        print(json.dumps({"trigger": deferred.trigger.serialize()[1],
                          "kwargs": deferred.kwargs}))
elif step == "trigger":
    kwargs = {**args["trigger"], "driver_host": "another-host", "lost_after": 30.0}
    async def first():
        async for event in SkyplaneTransferTrigger(**kwargs).run():
            return event.payload
    print(json.dumps(asyncio.run(asyncio.wait_for(first(), 240))))
elif step == "transfer_here":
    op = SkyplaneTransferOperator(task_id="transfer", src=args["src"], dst=args["dst"],
                                  plan=args["plan"], fleet=args["fleet"], deferrable=False,
                                  engine_options={"part_size": 8 << 20})
    try:
        print(json.dumps({"summary": op.execute(ctx)}))
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
elif step == "complete":
    op = SkyplaneTransferOperator(task_id="transfer", src=args["src"], dst=args["dst"],
                                  plan=args["plan"], fleet=args["fleet"], deferrable=True)
    summary = op.execute_complete(ctx, args["event"], **args["kwargs"])
    gone = SkyplaneDeprovisionOperator(task_id="teardown", fleet=args["fleet"]).execute(ctx)
    print(json.dumps({"summary": summary, "teardown": gone}))
"""


def _host(tmp_path: Path, name: str, conn: dict[str, Any], s3: Emulator) -> dict[str, str]:
    home = tmp_path / name
    (home / "airflow").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SKYPLANE"))}
    env.update(s3.env)
    env.update(
        {
            "HOME": str(home),
            "SKYPLANE_OPS_HOME": str(home / ".skyplane-ops"),
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SKYPLANE_DEFAULT": json.dumps(
                {
                    "conn_type": "skyplane",
                    "extra": {**conn, "work_dir": str(home / "work")},
                }
            ),
        }
    )
    return env


def _run(env: dict[str, str], **args: Any) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", STEP, json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_plan_provision_transfer_trigger_and_teardown_on_four_hosts(
    tmp_path: Path, moto_s3: Emulator
) -> None:
    bucket = f"state{uuid.uuid4().hex[:8]}"
    state_uri = moto_s3.make_bucket(bucket)
    conn = {"backend": "local", "state_store": state_uri, "state_store_options": moto_s3.options}
    data = tmp_path / "cloud"
    (data / "src").mkdir(parents=True)
    blobs = {f"part-{i}.bin": os.urandom((12 << 20) + i) for i in range(3)}
    for name, blob in blobs.items():
        (data / "src" / name).write_bytes(blob)
    common = {"src": f"file://{data}/src/", "dst": f"file://{data}/dst/"}
    hosts = {n: _host(tmp_path, n, conn, moto_s3) for n in "ABCD"}
    hosts["B"]["SKYPLANE_OPS_METRICS_DIR"] = str(tmp_path / "B" / "metrics")  # node_exporter's
    tid = "xhost-" + uuid.uuid4().hex[:8]

    made = _run(
        hosts["A"],
        step="plan_provision",
        tid=tid,
        src_region="aws:us-east-1",
        dst_region="aws:eu-west-1",
        plan_uri=str(data / "plans" / f"{tid}.json"),
        **common,
    )
    fleet = made["fleet"]
    # The secret reference names a file on A only: B must get the secret from the store.
    assert fleet["secret_ref"].startswith(str(tmp_path / "A"))
    Path(fleet["secret_ref"]).unlink()  # ... and A's disk is not B's: make that true here
    try:
        deferred = _run(hosts["B"], step="transfer", plan=made["plan"], fleet=fleet, **common)
        trigger = deferred["trigger"]
        assert trigger["state_uri"] == state_uri
        event = _run(hosts["C"], step="trigger", trigger=trigger)
        assert event["status"] == "success", event
        done = _run(
            hosts["D"],
            step="complete",
            plan=made["plan"],
            fleet=fleet,
            event=event,
            kwargs=deferred["kwargs"],
            **common,
        )
    finally:
        from skyplane_ops import api

        api.deprovision(backend="local", transfer_id=tid)
    assert done["summary"]["verification"]["status"] == "passed"
    assert done["teardown"]["deleted_count"] >= 0
    for name, blob in blobs.items():
        assert (data / "dst" / name).read_bytes() == blob
    # The driver on B left the run's metrics for node_exporter's textfile collector.
    from prometheus_client.parser import text_string_to_metric_families

    prom = (tmp_path / "B" / "metrics" / f"skyplane-{tid}.prom").read_text()
    samples = {
        (s.name, s.labels.get("outcome")): s.value
        for family in text_string_to_metric_families(prom)
        for s in family.samples
        if s.labels.get("transfer") == tid
    }
    assert samples[("skyplane_objects", "copied")] == len(blobs)
    assert samples[("skyplane_bytes_done", None)] == sum(len(b) for b in blobs.values())
    # Nothing of the transfer is left in the state store but the plan the user asked for.
    from skyplane_ops.api import TransferState

    assert TransferState(state_uri, tid, moto_s3.options).read_status() is None
    # No host but A ever held the secret file; B got it from the store (0600).
    secret_b = tmp_path / "B" / ".skyplane-ops" / "secrets" / f"{tid}.secret"
    assert secret_b.exists() and (secret_b.stat().st_mode & 0o077) == 0
    assert not (tmp_path / "C" / ".skyplane-ops" / "secrets").exists()


def test_a_retry_on_another_worker_resumes_from_the_stored_journal(
    tmp_path: Path, moto_s3: Emulator
) -> None:
    """Worker B fails half-way (one destination object cannot be written); worker E, with its
    own empty home and work dir, resumes from the journal snapshot in the S3 state store."""
    state_uri = moto_s3.make_bucket(f"state{uuid.uuid4().hex[:8]}")
    conn = {"backend": "local", "state_store": state_uri, "state_store_options": moto_s3.options}
    data = tmp_path / "cloud"
    (data / "src").mkdir(parents=True)
    blobs = {f"part-{i}.bin": os.urandom((12 << 20) + i) for i in range(3)}
    for name, blob in blobs.items():
        (data / "src" / name).write_bytes(blob)
    (data / "dst" / "part-2.bin").mkdir(parents=True)  # a folder where a file must go
    common = {"src": f"file://{data}/src/", "dst": f"file://{data}/dst/"}
    hosts = {n: _host(tmp_path, n, conn, moto_s3) for n in "ABE"}
    tid = "xretry-" + uuid.uuid4().hex[:8]
    made = _run(
        hosts["A"],
        step="plan_provision",
        tid=tid,
        src_region="aws:us-east-1",
        dst_region="aws:eu-west-1",
        plan_uri=str(data / "plans" / f"{tid}.json"),
        **common,
    )
    Path(made["fleet"]["secret_ref"]).unlink()
    try:
        first = _run(
            hosts["B"], step="transfer_here", plan=made["plan"], fleet=made["fleet"], **common
        )
        assert "error" in first, first
        (data / "dst" / "part-2.bin").rmdir()
        again = _run(
            hosts["E"], step="transfer_here", plan=made["plan"], fleet=made["fleet"], **common
        )
    finally:
        from skyplane_ops import api

        # By the fleet record (pids): a sweep by tag would look in this process's home, not A's.
        api.deprovision(api.GatewayFleet.from_dict(made["fleet"]))
    summary = again.get("summary") or {}
    assert summary.get("verification", {}).get("status") == "passed", again
    assert summary["chunks_resumed"] > 0, summary
    for name, blob in blobs.items():
        assert (data / "dst" / name).read_bytes() == blob
