"""Gateways start with a clean environment and get their store credentials only sealed.

The control plane's environment holds credentials (fake ones here, with a sentinel value): no
gateway of any backend (local processes, agents started over SSH, agents in network
namespaces) may hold one in its environment or command line, and a transfer between real
emulators (moto S3, Azurite, the GCS emulator) still succeeds through real local gateways: the
control plane resolves the credentials and seals them into the job spec of each gateway that
opens a store. The sentinel is never sent in clear (every control request is captured) and
never written to a gateway's log.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_agent.client import GatewayClient
from gateway_agent.stores import open_store
from skyplane_ops.provision import get_provisioner
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.testing.emulators import Emulator
from skyplane_ops.testing.sshd import start_sshd, stop_sshd
from skyplane_ops.testing.transfer import DST, SRC, make_plan, read_tree, write_dataset
from skyplane_ops.transfer import run_transfer

MiB = 1024 * 1024
SENTINEL = f"sentinel-{uuid.uuid4().hex}"
# What a control plane's environment may hold: credentials and settings of every cloud SDK,
# of skyplane-ops itself and of the orchestrators around it.
CONTROL_PLANE_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": SENTINEL,
    "AWS_SESSION_TOKEN": SENTINEL,
    "AZURE_CLIENT_SECRET": SENTINEL,
    "AZURE_STORAGE_KEY": SENTINEL,
    "GOOGLE_APPLICATION_CREDENTIALS": f"/nonexistent/{SENTINEL}.json",
    "SKYPLANE_OPS_API_TOKEN": SENTINEL,
    "AIRFLOW_CONN_SKY_S3": f"aws://AKIA:{SENTINEL}@",
    "DAGSTER_CLOUD_API_TOKEN": SENTINEL,
}
FORBIDDEN_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "STORAGE_EMULATOR_HOST", "SKYPLANE_",
                      "AIRFLOW_", "DAGSTER_")  # fmt: skip
ALLOWED = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH"}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(): v.decode(errors="replace") for k, _, v in pairs}


def assert_clean_gateway(pid: int, *needles: str) -> None:
    """The agent ``pid`` holds only the allow-listed variables, and no needle anywhere in its
    environment or command line."""
    env = _environ(pid)
    raw = Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
    for needle in (SENTINEL, *needles):
        assert needle.encode() not in raw, f"gateway {pid} holds a credential"
    assert not [k for k in env if k.startswith(FORBIDDEN_PREFIXES)], sorted(env)
    assert {k for k in env if not k.startswith("LC_")} <= ALLOWED, sorted(env)


@pytest.fixture
def secrets_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CONTROL_PLANE_SECRETS.items():
        monkeypatch.setenv(name, value)


def _transfer_files(fleet: GatewayFleet, regions: list[str], tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"a.bin": 300_000, "dir/b.txt": 99})
    result = run_transfer(
        make_plan(regions), fleet, f"file://{src}", f"file://{dst}", journal_dir=tmp_path / "j"
    )
    assert result.verified and read_tree(dst) == data


# ---- no backend passes its environment on ---------------------------------------------------


def test_local_gateways_inherit_no_credentials(
    secrets_in_environment: None, tmp_path: Path
) -> None:
    prov = LocalProvisioner(idle_timeout=60)
    fleet = prov.provision({SRC: 1, DST: 1}, transfer_id=f"env-{uuid.uuid4().hex[:8]}")
    try:
        _transfer_files(fleet, [SRC, DST], tmp_path)
        for gw in fleet.gateways:
            assert_clean_gateway(int(gw.resources["pid"]))
            home = _environ(int(gw.resources["pid"]))["HOME"]
            assert home != os.path.expanduser("~") and (os.stat(home).st_mode & 0o077) == 0
    finally:
        prov.deprovision(fleet)


@pytest.mark.sshd
def test_ssh_gateways_inherit_no_credentials(
    secrets_in_environment: None, tmp_path: Path, ssh_client_key: Path
) -> None:
    """Neither the control plane's environment nor the host's own login environment (here
    credentials in the sshd's ``SetEnv``, as a host whose logins carry keys) reaches the
    agent: it is started with ``env -i`` and the allow-list."""
    server = start_sshd(tmp_path / "sshd", ssh_client_key, env=CONTROL_PLANE_SECRETS)
    try:
        entry = server.inventory_entry(tmp_path / "remote")
        prov = get_provisioner("ssh", inventory={"ssh:a": [entry], "ssh:b": [entry]})
        fleet = prov.provision({"ssh:a": 1, "ssh:b": 1}, transfer_id="env-ssh")
        try:
            _transfer_files(fleet, ["ssh:a", "ssh:b"], tmp_path)
            for gw in fleet.gateways:
                assert_clean_gateway(int(gw.resources["pid"]))
        finally:
            prov.deprovision(fleet)
    finally:
        stop_sshd(server)


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_netns_gateways_inherit_no_credentials(
    secrets_in_environment: None, tmp_path: Path
) -> None:
    a, b = "netns:A", "netns:B"
    prov = get_provisioner("netns", grid={f"{a}->{b}": 1.0}, idle_timeout=60)
    fleet = prov.provision({a: 1, b: 1}, transfer_id=f"env-{uuid.uuid4().hex[:6]}")
    try:
        _transfer_files(fleet, [a, b], tmp_path)
        for gw in fleet.gateways:
            assert_clean_gateway(int(gw.resources["pid"]))
    finally:
        prov.deprovision(fleet)


# ---- credentials reach the gateways sealed, and only so ---------------------------------------


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every control request the control plane sends (method, path, headers and body)."""
    sent: list[bytes] = []
    real = GatewayClient._once

    def once(
        self: GatewayClient, method: str, path: str, body: bytes, timeout: float | None = None
    ) -> tuple[int, str, bytes]:
        sent.append(f"{method} {path} {self.host}:{self.port}\n".encode() + body)
        return real(self, method, path, body, timeout)

    monkeypatch.setattr(GatewayClient, "_once", once)
    return sent


def _emulator(request: pytest.FixtureRequest, name: str) -> tuple[Emulator, str]:
    """The emulator fixture ``name`` and the secret its credentials hold in this process."""
    emu: Emulator = request.getfixturevalue(name)
    if name == "azurite":
        conn = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
        return emu, dict(p.split("=", 1) for p in conn.split(";") if "=" in p)["AccountKey"]
    if name == "gcs_emulator":
        return emu, os.environ["STORAGE_EMULATOR_HOST"]  # a setting, sealed like the rest
    return emu, SENTINEL  # moto takes any secret key: the sentinel is S3's secret here


@pytest.fixture
def debug_gateways() -> Iterator[LocalProvisioner]:
    yield LocalProvisioner(idle_timeout=60, buffer_mib=128, log_level="DEBUG")


@pytest.mark.emulator
@pytest.mark.parametrize("cloud", ["moto_s3", "azurite", "gcs_emulator"])
def test_transfer_with_credentials_only_in_the_control_plane(
    cloud: str,
    request: pytest.FixtureRequest,
    secrets_in_environment: None,
    captured: list[bytes],
    debug_gateways: LocalProvisioner,
    tmp_path: Path,
) -> None:
    emu, secret = _emulator(request, cloud)
    bucket = f"cr{uuid.uuid4().hex[:10]}"
    src_uri, dst_uri = emu.make_bucket(bucket + "s"), emu.make_bucket(bucket + "d")
    data = {"big.bin": os.urandom(6 * MiB + 3), "a.txt": b"alpha", "empty": b""}
    data.update({f"small/{i}": os.urandom(500) for i in range(5)})
    src = open_store(src_uri, emu.options)
    for key, blob in data.items():
        src.write(key, blob)
    fleet = debug_gateways.provision({SRC: 1, DST: 1}, transfer_id=f"cr-{bucket}")
    try:
        for gw in fleet.gateways:  # what reaches the stores is the sealed channel's doing
            assert_clean_gateway(int(gw.resources["pid"]), secret)
        result = run_transfer(
            make_plan([SRC, DST]),
            fleet,
            src_uri,
            dst_uri,
            src_options=emu.options,
            dst_options=emu.options,
            journal_dir=tmp_path / "journal",
            part_size=5 * MiB,
        )
        assert result.verified, result.verification
        dst = open_store(dst_uri, emu.options)
        assert {o.key: dst.read(o.key) for o in dst.list()} == data
        logs = b"".join(Path(gw.resources["log"]).read_bytes() for gw in fleet.gateways)
    finally:
        debug_gateways.deprovision(fleet)
    starts = [body for body in captured if body.startswith(b"POST /v1/jobs ")]
    assert len(starts) == 2 and all(b"sealed_credentials" in body for body in starts) == (
        cloud != "gcs_emulator"  # the emulator takes no credentials, only its endpoint
    )
    for needle in {secret, SENTINEL}:
        assert not [body for body in captured if needle.encode() in body], "sent in clear"
        at = logs.find(needle.encode())
        assert at < 0, f"a gateway logged a credential: {logs[max(0, at - 300) : at + 50]!r}"


def test_relays_get_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a gateway that opens a store gets its credentials (a relay gets none), sealed
    for that gateway and that job only."""
    from cryptography.exceptions import InvalidTag

    from gateway_agent.auth import credentials_context, unseal
    from skyplane_ops.provision.fleet import Gateway
    from skyplane_ops.testing.transfer import RELAY
    from skyplane_ops.transfer.dispatch import Dispatcher

    plan = make_plan([SRC, RELAY, DST])
    gateways = [Gateway(f"g{i}", r, "127.0.0.1", 1, 2) for i, r in enumerate([SRC, RELAY, DST])]
    fleet = GatewayFleet("t", "local", gateways, "ref")
    secret = b"k" * 32
    conn = f"AccountName=acct;AccountKey={SENTINEL}"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    d = Dispatcher(plan, fleet, secret, src_uri="file:///tmp/x/", dst_uri="az://acct/cont/")
    specs = {g.region: d.job_spec(g) for g in gateways}
    assert "sealed_credentials" not in specs[SRC] and "sealed_credentials" not in specs[RELAY]
    assert SENTINEL not in str(specs)
    token = specs[DST]["sealed_credentials"]
    opened = unseal(secret, token, credentials_context(d.job_id, "g2"))
    assert SENTINEL.encode() in opened and b'"src": null' in opened
    for job, gid in ((d.job_id, "g0"), ("job-other", "g2")):
        with pytest.raises(InvalidTag):
            unseal(secret, token, credentials_context(job, gid))
