"""A plan kept in an object store every worker reaches, with no Airflow cloud provider.

Split tasks on Celery workers without a shared disk keep the plan at an ``s3://`` (or
``gs://``/``az://``) ``plan_uri``; ``ObjectStoragePath`` has no filesystem for those schemes
unless the cloud's Airflow provider is installed (it is not here), so the hook writes and
reads them through the core's stores, with the ``plan_conn_id`` connection's endpoint and
credentials. Against a real S3 emulator (moto).
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from skyplane_ops.testing.emulators import Emulator
from skyplane_ops.testing.transfer import direct_plan

pytestmark = pytest.mark.emulator


def test_a_plan_at_an_s3_uri_round_trips_through_the_hook(
    moto_s3: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skyplane_ops.airflow.hooks import SkyplaneHook

    bucket = f"plans{uuid.uuid4().hex[:8]}"
    moto_s3.make_bucket(bucket)
    conn = {
        "conn_type": "aws",
        "login": moto_s3.env["AWS_ACCESS_KEY_ID"],
        "password": moto_s3.env["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": moto_s3.options["endpoint_url"], "region_name": "us-east-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_PLANS", json.dumps(conn))
    # The credentials come from the connection alone, exported only around the store calls.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    plan = direct_plan("aws:us-east-1", "aws:eu-west-1", volume_gb=1.0)
    uri = f"s3://{bucket}/plans/run-1.json"

    assert SkyplaneHook.write_plan(plan, uri, conn_id="plans") == uri
    assert SkyplaneHook.read_plan(uri, conn_id="plans").to_dict() == plan.to_dict()
    names = moto_s3.stored_names(bucket)
    assert sorted(names) == ["plans/run-1.json", "plans/run-1.route.svg"], names
    assert "AWS_ACCESS_KEY_ID" not in os.environ
