"""``skyplane-ops provision`` and ``deprovision --fleet`` as separate pipeline steps (real sshd)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from skyplane_ops import cli
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.testing.sshd import SshdServer

pytestmark = pytest.mark.sshd


def test_provision_then_deprovision_from_the_fleet_file(
    sshd_factory: Callable[[int], list[SshdServer]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (server,) = sshd_factory(1)
    root = tmp_path / "remote"
    host = server.inventory_entry(root)
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"regions": {"lab:a": [host]}}))
    fleet_file = tmp_path / "fleet.json"
    argv = ["provision", "--backend", "ssh", "--inventory", str(inventory), "--vms", "lab:a=1"]
    assert cli.main([*argv, "--transfer-id", "cli-t1", "--output", str(fleet_file)]) == 0
    fleet = GatewayFleet.from_json(capsys.readouterr().out)
    assert fleet.transfer_id == "cli-t1" and fleet.regions == ["lab:a"]
    assert "secret_ref" in fleet.to_dict() and "secret" not in fleet.gateways[0].resources
    pid = int(fleet.gateways[0].resources["pid"])
    assert os.path.exists(f"/proc/{pid}")

    assert cli.main(["deprovision", "--fleet", str(fleet_file)]) == 0
    assert "deprovisioned 1 gateway(s) of cli-t1 (ssh)" in capsys.readouterr().out
    assert not [p for p in root.rglob("*") if p.is_file()]
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_provision_rejects_bad_vms(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["provision", "--vms", "lab:a"]) == 2
    assert "REGION=N" in capsys.readouterr().err
