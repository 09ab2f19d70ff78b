"""Warm fleets: a run with ``keep_warm`` parks its fleet; the next run that fits claims it
instead of booting (one claimant wins), with new keys; a parked fleet nobody claims dies at its
lease, even with its control plane killed; ``deprovision --all`` removes it.

Real gateway processes (the local backend, ``boot_delay`` standing for a VM's start-up), real
local stores, the state store's pool on a real file system and on a real moto S3 server.
Whether a run booted is read from its phases and its gateways' pids, never from a timing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops import api
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.provision.secrets import secret_bytes
from skyplane_ops.provision.warm import WarmPool, default_state_uri
from skyplane_ops.sequence import CopyRun
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.sequence.events import RunEvents
from skyplane_ops.sequence.warm import claim, park
from skyplane_ops.testing.transfer import agents_of, read_tree, write_dataset

A, B = "aws:us-east-1", "aws:us-west-2"
BOOTING = {"boot_delay": 1.0}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own state home: its fleets, secrets and warm pool."""
    path = tmp_path / "home"
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(path))
    return path


class Phases(RunEvents):
    """Every phase a run went through, with its outcome."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.fleets: list[Any] = []

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        note: dict[str, str] = {}
        yield note
        self.seen.append((name, detail, note.get("done", "")))

    def provisioned(self, fleet: Any) -> None:
        self.fleets.append((fleet, secret_bytes(fleet.secret_ref)))


def _run(
    src: Path,
    dst: Path,
    keep_warm: str | None = None,
    *,
    vms: str = "only",
    options: dict[str, Any] = BOOTING,
    volume_gb: float | None = None,
) -> tuple[Any, Phases, CopyRun]:
    request = api.TransferRequest.build(
        f"file://{src}", f"file://{dst}", src_region=A, dst_region=B,
        planning={"vms": vms}, keep_warm=keep_warm,
    )  # fmt: skip
    events = Phases()
    gateways = Gateways(backend="local", backend_options=options)
    run = CopyRun(request, gateways, events, volume_gb=volume_gb)
    return run.run(), events, run


def _pids(fleet: Any) -> set[int]:
    return {int(g.resources["pid"]) for g in fleet.gateways}


def _wait(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _gone(pids: set[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists() and _running(pid) for pid in pids)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _parked_fleet(keep_warm_s: float) -> tuple[Any, WarmPool]:
    fleet = LocalProvisioner().provision({A: 1, B: 1}, transfer_id=f"wf-{os.urandom(4).hex()}")
    pool = WarmPool(default_state_uri())
    # Parked as the runs below ask for it (the same backend options), so only its state counts.
    park(fleet, usd_per_hour=1.0, keep_warm_s=keep_warm_s, pool=pool, backend_options=BOOTING)
    return fleet, pool


def test_a_parked_fleet_is_claimed_by_the_next_run_without_a_boot(
    tmp_path: Path, home: Path
) -> None:
    src = tmp_path / "src"
    data = write_dataset(src, {f"day/{i}.csv": 20_000 + i for i in range(12)})
    first, phases1, _ = _run(src, tmp_path / "dst1", keep_warm="60s")
    assert first.verified and first.warm["parked"] and first.warm["keep_warm_s"] == 60
    (fleet1, secret1), = phases1.fleets  # fmt: skip
    assert _pids(fleet1) <= set(agents_of(home))  # parked: still running
    pool_secret = Path(home, "state", ".warm", fleet1.transfer_id, "secret")
    assert pool_secret.stat().st_mode & 0o777 == 0o600
    # Parking re-keyed the gateways: the finished transfer's secret opens nothing now.
    gw = fleet1.gateways[0]
    with pytest.raises(GatewayError):
        GatewayClient(gw.host, gw.control_port, secret1, timeout=5, attempts=1).health()

    second, phases2, _ = _run(src, tmp_path / "dst2")
    assert second.verified and read_tree(tmp_path / "dst2") == data
    provisions = [p for p in phases2.seen if p[0] == "provision"]
    assert len(provisions) == 1 and provisions[0][2].startswith("claimed warm fleet")
    (fleet2, secret2), = phases2.fleets  # fmt: skip
    assert fleet2.transfer_id == fleet1.transfer_id and _pids(fleet2) == _pids(fleet1)
    assert secret2 != secret1  # its own keys
    assert second.warm["claimed"] == fleet1.transfer_id and second.warm["idle_s"] >= 0
    assert "warm fleet: claimed" in second.summary()
    # Without keep_warm the claimant deletes the fleet, and the pool forgets it.
    _wait(lambda: _gone(_pids(fleet1)))
    assert WarmPool(default_state_uri()).records() == []


def test_the_schedule_weighs_a_warm_fleet_by_its_claim_not_a_boot(
    tmp_path: Path, home: Path
) -> None:
    """2 GB planned with VMs that take 10 min to boot go to the worker; with a parked fleet
    the overlay starts in a claim's second and the schedule takes it (and no 10 min boot is
    waited for: the run claims)."""
    src = tmp_path / "src"
    data = write_dataset(src, {f"{i}": 30_000 for i in range(6)})
    slow = {"boot_delay": 600}
    first, _, _ = _run(src, tmp_path / "d1", keep_warm="60s")  # parks (boot_delay 1 s)
    assert first.warm.get("parked")
    second, phases, run = _run(src, tmp_path / "d2", vms="auto", options=slow, volume_gb=2)
    assert not run.on_worker and second.warm.get("claimed") == first.warm["parked"]
    assert [p[2][:18] for p in phases.seen if p[0] == "provision"] == ["claimed warm fleet"]
    assert read_tree(tmp_path / "d2") == data
    third, _, run = _run(src, tmp_path / "d3", vms="auto", options=slow, volume_gb=2)
    assert run.on_worker and not third.warm  # no parked fleet: the worker, not a 10 min boot


@pytest.mark.parametrize("where", ["file", "s3", "az"])
def test_one_claimant_of_many_wins(where: str, home: Path, request: pytest.FixtureRequest) -> None:
    uri, options = default_state_uri(), {}
    if where != "file":  # moto S3 and Azurite honour If-None-Match: * on upload
        emu = request.getfixturevalue({"s3": "moto_s3", "az": "azurite"}[where])
        bucket = f"warm-{os.urandom(4).hex()}"
        uri, options = emu.make_bucket(bucket) + "state", dict(emu.options)
    fleet = LocalProvisioner().provision({A: 1, B: 1}, transfer_id=f"wf-{os.urandom(4).hex()}")
    pool = WarmPool(uri, options)
    try:
        park(fleet, usd_per_hour=2.0, keep_warm_s=60, pool=pool, backend_options={})
        (record,) = pool.available()
        assert record.gateways == {A: 1, B: 1} and record.buffer_mib == 1024  # the default
        start = threading.Barrier(6)
        got: list[Any] = []

        def claimant(i: int) -> None:
            mine = WarmPool(uri, options)
            start.wait()
            got.append(claim({A: 1}, backend="local", backend_options={}, pool=mine,
                             claimant=f"run-{i}"))  # fmt: skip

        threads = [threading.Thread(target=claimant, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        won = [g for g in got if g is not None]
        assert len(won) == 1 and len(got) == 6
        claimed, info = won[0]
        assert claimed.transfer_id == record.fleet_id and info["idle_usd"] >= 0
        # The losers left it alone: it answers the winner's new secret.
        gw = claimed.gateways[0]
        GatewayClient(gw.host, gw.control_port, secret_bytes(claimed.secret_ref)).health()
        assert pool.available() == [] and not pool.claim(record, "late")
    finally:
        api.deprovision(fleet)


def test_a_gcs_pool_claims_create_only(home: Path, gcs_emulator: Any) -> None:
    """A pool on gs://: parked, found, claimed by a race of claimants. gcp-storage-emulator
    ignores ``ifGenerationMatch`` (every racer's upload succeeds there), so the test checks what
    GCS decides by: every claim's upload request carried ``ifGenerationMatch=0``."""
    uri = gcs_emulator.make_bucket(f"warm-{os.urandom(4).hex()}") + "state"
    options = dict(gcs_emulator.options)
    fleet = LocalProvisioner().provision({A: 1}, transfer_id=f"wf-{os.urandom(4).hex()}")
    try:
        park(fleet, usd_per_hour=1.0, keep_warm_s=60, pool=WarmPool(uri, options),
             backend_options={})  # fmt: skip
        (record,) = WarmPool(uri, options).available()
        assert record.fleet_id == fleet.transfer_id and record.gateways == {A: 1}
        sent: list[str] = []
        start = threading.Barrier(4)

        def claimant(i: int) -> None:
            mine = WarmPool(uri, options)
            http = mine._store._client._http  # type: ignore[attr-defined]  # the real session
            http.hooks["response"].append(lambda r, *a, **k: sent.append(r.request.url))
            start.wait()
            mine.claim(record, f"run-{i}")

        threads = [threading.Thread(target=claimant, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        uploads = [u for u in sent if f"claim-{record.generation}" in u or "/upload/" in u]
        assert len(uploads) == 4 and all("ifGenerationMatch=0" in u for u in uploads)
        assert WarmPool(uri, options).available() == []  # claimed: nobody else finds it
    finally:
        api.deprovision(fleet)


def test_a_parked_fleet_nobody_claims_dies_at_its_lease(tmp_path: Path, home: Path) -> None:
    fleet, pool = _parked_fleet(keep_warm_s=1.5)
    _wait(lambda: _gone(_pids(fleet)))  # the agents' own lease watchdog
    assert pool.available() == []  # expired: no claimant takes it
    src = tmp_path / "src"
    write_dataset(src, {"a": 10})
    result, phases, _ = _run(src, tmp_path / "dst")  # boots as usual
    assert result.verified and "warm" not in phases.seen[-1][1]
    assert not any(p[2].startswith("claimed") for p in phases.seen)


def test_a_dead_warm_fleet_makes_the_run_boot_as_usual(tmp_path: Path, home: Path) -> None:
    fleet, pool = _parked_fleet(keep_warm_s=60)
    for pid in _pids(fleet):
        os.kill(pid, signal.SIGKILL)
    _wait(lambda: _gone(_pids(fleet)))
    src = tmp_path / "src"
    data = write_dataset(src, {"a": 10, "b": 20})
    result, phases, _ = _run(src, tmp_path / "dst")
    assert result.verified and read_tree(tmp_path / "dst") == data
    assert [p[2] for p in phases.seen if p[0] == "provision"] == ["2 gateway(s)"]
    assert pool.records() == []  # the bad fleet was forgotten


def test_a_killed_control_plane_leaves_a_parked_fleet_that_dies_at_its_lease(
    tmp_path: Path, home: Path
) -> None:
    src = tmp_path / "src"
    write_dataset(src, {f"{i}": 5000 for i in range(4)})
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}
    cli = [sys.executable, "-m", "skyplane_ops.cli", "cp", f"file://{src}", f"file://{tmp_path}/d",
           "--src-region", A, "--dst-region", B, "--vms-only", "--keep-warm", "4s",
           "--json"]  # fmt: skip
    proc = subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pool = WarmPool(default_state_uri())
    try:
        _wait(lambda: pool.available() or proc.poll() is not None)
        proc.kill()  # the control plane dies with its fleet parked
        proc.wait()
        (record,) = pool.records()
        pids = _pids(record.gateway_fleet())
        assert pids and not _gone(pids)
        _wait(lambda: _gone(pids))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_deprovision_all_removes_parked_fleets(home: Path) -> None:
    fleet, pool = _parked_fleet(keep_warm_s=300)
    report = api.sweep(["local"])
    assert not report.errors and {g.gateway_id for g in fleet.gateways} <= {
        name.rpartition(":")[2] for name in report.deleted["local"]
    }
    _wait(lambda: _gone(_pids(fleet)))
    assert pool.records() == []


def test_keep_warm_is_a_duration_in_every_spelling() -> None:
    build = api.TransferRequest.build
    request = build("file:///tmp/a", "file:///tmp/b", keep_warm="15m")
    assert request.keep_warm == 900
    assert api.TransferRequest.from_json(request.to_json()).keep_warm == 900
    assert json.loads(request.to_json())["keep_warm"] == 900
    for bad in ("soon", "0s", "2d", -5):
        with pytest.raises(api.TransferError, match="keep_warm") as err:
            build("file:///tmp/a", "file:///tmp/b", keep_warm=bad)
        assert "\n" not in str(err.value)


def test_the_dagster_resource_parks_and_claims_through_its_state_store(
    tmp_path: Path, home: Path
) -> None:
    from skyplane_ops.dagster.resource import SkyplaneResource

    store = (tmp_path / "shared-state").as_uri()  # the store every run worker reaches
    warm = SkyplaneResource(backend="local", keep_warm="60s", state_store=store)
    first = warm.provision({A: 1}, transfer_id="dg-step-1")
    assert warm.deprovision(first) == []  # parked, not deleted
    assert [r.fleet_id for r in WarmPool(store + "").available()] == ["dg-step-1"]
    assert WarmPool(default_state_uri()).records() == []  # not this host's default pool
    second = SkyplaneResource(backend="local", state_store=store).provision(
        {A: 1}, transfer_id="dg-step-2"
    )
    assert second.transfer_id == "dg-step-1" and _pids(second) == _pids(first)
    SkyplaneResource(backend="local", state_store=store).deprovision(second)
    _wait(lambda: _gone(_pids(first)))
    assert WarmPool(store).records() == []


def test_the_airflow_copy_operator_takes_keep_warm_and_the_connections_state_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow")
    from skyplane_ops.airflow.hooks import SkyplaneHook
    from skyplane_ops.airflow.operators.copy import SkyplaneCopyOperator

    store = (tmp_path / "state").as_uri()
    extra = {"backend": "local", "state_store": store}
    monkeypatch.setenv(
        "AIRFLOW_CONN_SKY_WARM", json.dumps({"conn_type": "skyplane", "extra": extra})
    )
    gateways = SkyplaneHook("sky_warm").gateways("t-1")
    assert gateways.state_uri == store  # parked and found where every worker looks
    assert "keep_warm" in SkyplaneCopyOperator.template_fields
    op = SkyplaneCopyOperator(
        task_id="copy", src="file:///tmp/a", dst="file:///tmp/b", src_region=A, dst_region=B,
        keep_warm="{{ params.warm }}",
    )  # fmt: skip
    assert op.keep_warm == "{{ params.warm }}"
