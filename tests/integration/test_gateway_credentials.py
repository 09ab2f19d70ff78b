"""Gateways start with a clean environment and get their store credentials only sealed.

The control plane's environment holds credentials (fake ones here, with a sentinel value): no
gateway of any backend (local processes, agents started over SSH, agents in network
namespaces) may hold one in its environment or command line, and a transfer between real
emulators (moto S3, Azurite, the GCS emulator) still succeeds through real local gateways: the
control plane mints credentials per transfer and end from its own (STS session credentials,
a container SAS), seals them into the job spec of each gateway that opens a store, and sends
fresh ones before they expire. Neither the sentinel nor a minted secret is ever sent in clear
(every control request is captured) or written to a gateway's log.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway_agent.client import GatewayClient
from gateway_agent.stores import open_store
from skyplane_ops.provision import get_provisioner
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.testing.emulators import AZURITE_ACCOUNT, Emulator
from skyplane_ops.testing.sshd import start_sshd, stop_sshd
from skyplane_ops.testing.transfer import DST, SRC, make_plan, read_tree, write_dataset
from skyplane_ops.transfer import run_transfer
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.dispatch.credentials import resolve
from skyplane_ops.transfer.dispatch.minting import Minted
from tests.integration.http_proxy import CountingProxy

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
    key = base64.b64encode(SENTINEL.encode()).decode()
    conn = f"AccountName=acct;AccountKey={key}"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    d = Dispatcher(plan, fleet, secret, src_uri="file:///tmp/x/", dst_uri="az://acct/cont/")
    specs = {g.region: d.job_spec(g) for g in gateways}
    assert "sealed_credentials" not in specs[SRC] and "sealed_credentials" not in specs[RELAY]
    assert SENTINEL not in str(specs) and key not in str(specs)
    token = specs[DST]["sealed_credentials"]
    opened = unseal(secret, token, credentials_context(d.job_id, "g2"))
    sealed = json.loads(opened)
    assert sealed["src"] is None and sealed["dst"]["kind"] == "azure"
    # A SAS minted with the key (the control plane's), never the key itself.
    assert "sig=" in sealed["dst"]["sas"] and key.encode() not in opened
    for job, gid in ((d.job_id, "g0"), ("job-other", "g2")):
        with pytest.raises(InvalidTag):
            unseal(secret, token, credentials_context(job, gid))


# ---- minted per transfer: scoped, short-lived, refreshed ---------------------------------------
#
# The emulators cannot show everything a cloud would: moto's STS answers GetFederationToken and
# AssumeRole but moto's S3 enforces no session policy (the policies are checked as documents in
# tests/unit/test_credential_minting.py); Azurite enforces a SAS's signature, permissions and
# expiry. A proxy in front of each server records who signed every request and when.


@pytest.fixture
def spy_minted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Minted]]:
    """Every credential set the real minters mint, by the URI it is scoped to (a spy: the
    minters run unchanged)."""
    from skyplane_ops.transfer.dispatch import credentials as resolving

    minted: dict[str, list[Minted]] = {}

    def spying(name: str) -> None:
        real = getattr(resolving, name)

        def wrapped(scope: Any, *args: Any, **kwargs: Any) -> Any:
            found = real(scope, *args, **kwargs)
            if found is None:
                return None
            mint, extra = (found, None) if callable(found) else found

            def recorded() -> Minted:
                got = mint()
                minted.setdefault(scope.uri, []).append(got)
                return got

            return recorded if extra is None else (recorded, extra)

        monkeypatch.setattr(resolving, name, wrapped)

    for name in ("aws_minter", "azure_minter", "gcp_minter"):
        spying(name)
    return minted


@pytest.fixture
def gateway_answers(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """What the gateways answered to fresh credentials and, last, their job counters."""
    seen: dict[str, list[dict[str, Any]]] = {"updates": [], "counters": []}
    update, status = GatewayClient.update_credentials, GatewayClient.status

    def updated(self: GatewayClient, job_id: str, sealed: str) -> dict[str, Any]:
        answer = update(self, job_id, sealed)
        seen["updates"].append({"gateway": self.gateway_id, **answer})
        return answer

    def polled(self: GatewayClient, *args: Any, **kwargs: Any) -> dict[str, Any]:
        answer = status(self, *args, **kwargs)
        seen["counters"].append({"gateway": self.gateway_id, **answer["counters"]})
        return answer

    monkeypatch.setattr(GatewayClient, "update_credentials", updated)
    monkeypatch.setattr(GatewayClient, "status", polled)
    return seen


@pytest.fixture
def hook_gateways() -> Iterator[LocalProvisioner]:
    yield LocalProvisioner(
        idle_timeout=60, buffer_mib=128, log_level="DEBUG", extra_args=["--enable-test-hooks"]
    )


ROLE = "arn:aws:iam::123456789012:role/skyplane-gateways"
# A transfer that outlives its first credentials several times: one reader at the source,
# slowed to 2 MiB/s, a chunk in flight at a time; the credentials live 4 s.
SLOW = DispatchOptions(
    credentials_lifetime_s=4.0,
    reader_threads=1,
    window_chunks=1,
    test_hooks={SRC: {"source_rate_bps": 2 * MiB}},
)


def _slow_data() -> dict[str, bytes]:
    data = {f"big{i}.bin": os.urandom(6 * MiB + i) for i in range(3)}
    data.update({"a.txt": b"alpha", "empty": b""})
    return data


def _last_counters(seen: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {c["gateway"]: c for c in seen["counters"]}


def _check_refreshed(
    minted: list[Minted], uses: list[tuple[float, str]], secret_of: Callable[[Minted], str]
) -> None:
    """Sets were minted again before each expired; requests signed with a set came before its
    expiry (the gateway's SDK refuses an expired set); after the first set expired the store
    signed with later ones."""
    assert len(minted) >= 3, f"only {len(minted)} sets minted"
    for older, newer in itertools.pairwise(minted):
        assert newer.issued_at < older.expires_at
    expiry = {secret_of(m): m.expires_at for m in minted}
    assert {s for _, s in uses} <= set(expiry), "a request was signed with another credential"
    for when, secret in uses:
        assert when <= expiry[secret] + 0.5, "a request was signed with an expired set"
    first = secret_of(minted[0])
    late = {s for when, s in uses if when > minted[0].expires_at}
    assert late and first not in late, "nothing was signed with a refreshed set"


@pytest.mark.emulator
def test_s3_gateways_get_scoped_sts_credentials_refreshed_mid_transfer(
    moto_s3: Emulator,
    secrets_in_environment: None,
    spy_minted: dict[str, list[Minted]],
    gateway_answers: dict[str, list[dict[str, Any]]],
    captured: list[bytes],
    hook_gateways: LocalProvisioner,
    tmp_path: Path,
) -> None:
    """The user's keys are only in this process's environment; the gateways get STS session
    credentials (moto's AssumeRole into ``role_arn``: moto's GetFederationToken answers the
    same example keys at every call, so sets could not be told apart) whose policy names only
    their end's prefix, live 4 s, and are replaced mid-transfer."""
    user_key = os.environ["AWS_ACCESS_KEY_ID"]
    name = f"sts{uuid.uuid4().hex[:10]}"
    moto_s3.make_bucket(name + "s")
    moto_s3.make_bucket(name + "d")
    data = _slow_data()
    with CountingProxy(moto_s3.options["endpoint_url"]) as proxy:
        options = {"endpoint_url": proxy.endpoint, "region": "us-east-1", "role_arn": ROLE}
        src_uri, dst_uri = f"s3://{name}s/data/", f"s3://{name}d/out/"
        src = open_store(src_uri, options)
        for key, blob in data.items():
            src.write(key, blob)
        fleet = hook_gateways.provision({SRC: 1, DST: 1}, transfer_id=f"cr-{name}")
        try:
            result = run_transfer(
                make_plan([SRC, DST]), fleet, src_uri, dst_uri, src_options=options,
                dst_options=options, journal_dir=tmp_path / "journal", part_size=5 * MiB,
                dispatch=SLOW,
            )  # fmt: skip
            assert result.verified, result.verification
            minted = {uri: spy_minted[uri] for uri in (src_uri, dst_uri)}
            secrets = [
                m.credentials.get(field) or ""
                for sets in minted.values()
                for m in sets
                for field in ("secret_access_key", "session_token")
            ]
            for gw in fleet.gateways:
                assert_clean_gateway(int(gw.resources["pid"]), *secrets)
            logs = b"".join(Path(gw.resources["log"]).read_bytes() for gw in fleet.gateways)
        finally:
            hook_gateways.deprovision(fleet)
    dst = open_store(dst_uri, options | {"endpoint_url": moto_s3.options["endpoint_url"]})
    assert {o.key: dst.read(o.key) for o in dst.list()} == data

    # Each end's sessions: STS, a policy naming that end's bucket and prefix only.
    for uri, (bucket, prefix, other) in {
        src_uri: (f"{name}s", "data/", f"{name}d"),
        dst_uri: (f"{name}d", "out/", f"{name}s"),
    }.items():
        for m in minted[uri]:
            assert m.detail["method"] == "AssumeRole"
            assert m.credentials.get("access_key_id") != user_key
            assert m.credentials.get("session_token")
            text = json.dumps(m.detail["policy"])
            assert f"arn:aws:s3:::{bucket}/{prefix}*" in text and other not in text
            assert m.detail["policy"]["Statement"][1]["Condition"] == {
                "StringLike": {"s3:prefix": [f"{prefix}*"]}
            }

    # Who signed what: the gateways' reads and writes used their end's minted sessions only.
    key_of = {
        m.credentials.get("access_key_id"): (uri, m) for uri, sets in minted.items() for m in sets
    }
    reads: list[tuple[float, str]] = []
    writes: list[tuple[float, str]] = []
    for (method, path), (when, headers) in zip(proxy.requests, proxy.heads, strict=True):
        headers = {k.lower(): v for k, v in headers.items()}
        auth = headers.get("authorization", "")
        akid = auth.partition("Credential=")[2].partition("/")[0]
        if akid in key_of:
            uri, _ = key_of[akid]
            bucket = uri.split("/")[2]
            assert path.startswith(f"/{bucket}/"), (method, path, uri)
        if method == "GET" and path.startswith(f"/{name}s/data/") and "range" in headers:
            assert akid != user_key and key_of[akid][0] == src_uri
            reads.append((when, akid))
        if method == "PUT" and path.startswith(f"/{name}d/out/"):
            assert akid != user_key and key_of[akid][0] == dst_uri
            writes.append((when, akid))
    assert reads and writes

    def key_id(m: Minted) -> str:
        return m.credentials.get("access_key_id") or ""

    _check_refreshed(minted[src_uri], reads, key_id)
    _check_refreshed(minted[dst_uri], writes, key_id)
    # The gateways took the fresh sets, and their stores signed with them.
    assert {u["gateway"] for u in gateway_answers["updates"] if u["updated"]} == {
        g.gateway_id for g in fleet.gateways
    }
    for counters in _last_counters(gateway_answers).values():
        assert counters["credentials_received"] >= 2 and counters["credentials_taken"] >= 1
    for secret in secrets:
        assert not [body for body in captured if secret.encode() in body], "sent in clear"
        assert secret.encode() not in logs, "a gateway logged a minted credential"


@pytest.mark.emulator
def test_azure_gateways_get_a_container_sas_refreshed_mid_transfer(
    azurite: Emulator,
    secrets_in_environment: None,
    spy_minted: dict[str, list[Minted]],
    gateway_answers: dict[str, list[dict[str, Any]]],
    captured: list[bytes],
    hook_gateways: LocalProvisioner,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The account key is only in this process's connection string; the gateways get service
    SAS tokens (rl on the source container, cw on the destination's) that expire after 4 s,
    which Azurite enforces: the transfer outlives several."""
    conn = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
    fields = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)
    account_key = fields["AccountKey"]
    name = f"sas{uuid.uuid4().hex[:10]}"
    azurite.make_bucket(name + "s")
    azurite.make_bucket(name + "d")
    data = _slow_data()
    upstream = fields["BlobEndpoint"].rsplit("/", 1)[0]
    with CountingProxy(upstream) as proxy:
        via = conn.replace(upstream, proxy.endpoint)
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", via)
        src_uri = azurite.uri_for(name + "s", "data/")
        dst_uri = azurite.uri_for(name + "d", "out/")
        src = open_store(src_uri)
        for key, blob in data.items():
            src.write(key, blob)
        fleet = hook_gateways.provision({SRC: 1, DST: 1}, transfer_id=f"cr-{name}")
        try:
            for gw in fleet.gateways:
                assert_clean_gateway(int(gw.resources["pid"]), account_key)
            result = run_transfer(
                make_plan([SRC, DST]), fleet, src_uri, dst_uri,
                journal_dir=tmp_path / "journal", part_size=5 * MiB, dispatch=SLOW,
            )  # fmt: skip
            assert result.verified, result.verification
            minted = {uri: spy_minted[uri] for uri in (src_uri, dst_uri)}
            sigs = [_sas_of(m)["sig"] for sets in minted.values() for m in sets]
            for gw in fleet.gateways:
                assert_clean_gateway(int(gw.resources["pid"]), account_key, *sigs)
            logs = b"".join(Path(gw.resources["log"]).read_bytes() for gw in fleet.gateways)
        finally:
            hook_gateways.deprovision(fleet)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)  # the proxy is gone
    dst = open_store(dst_uri)
    assert {o.key: dst.read(o.key) for o in dst.list()} == data

    for uri, permission in ((src_uri, "rlt"), (dst_uri, "cwt")):
        for m in minted[uri]:
            assert m.detail["method"] == "service SAS"
            assert "connection_string" not in m.credentials.to_dict()
            assert account_key not in json.dumps(m.credentials.to_dict())
            sas = _sas_of(m)
            assert sas["sp"] == permission and sas["sr"] == "c"

    sig_of = {_sas_of(m)["sig"]: (uri, m) for uri, sets in minted.items() for m in sets}
    reads: list[tuple[float, str]] = []
    writes: list[tuple[float, str]] = []
    for _, path in proxy.requests:
        sig = parse_qs(urlsplit(path).query).get("sig", [""])[0]
        if sig:  # every SAS request is signed with a minted SAS, for its own container
            container = sig_of[sig][0].split("/")[3]
            assert urlsplit(path).path.startswith(f"/{AZURITE_ACCOUNT}/{container}/"), path
    for (method, path), (when, _) in zip(proxy.requests, proxy.heads, strict=True):
        sig = parse_qs(urlsplit(path).query).get("sig", [""])[0]
        if method == "GET" and f"/{name}s/data/" in path:
            assert sig and sig_of[sig][0] == src_uri
            reads.append((when, sig))
        if method == "PUT" and f"/{name}d/out/" in path and sig:
            writes.append((when, sig))
    assert writes and all(sig_of[s][0] == dst_uri for _, s in writes)

    def sig_text(m: Minted) -> str:
        return _sas_of(m)["sig"]

    _check_refreshed(minted[src_uri], reads, sig_text)
    _check_refreshed(minted[dst_uri], writes, sig_text)
    for counters in _last_counters(gateway_answers).values():
        assert counters["credentials_received"] >= 2 and counters["credentials_taken"] >= 1
    for needle in [account_key, *sigs]:
        assert not [body for body in captured if needle.encode() in body], "sent in clear"
        assert needle.encode() not in logs, "a gateway logged a credential"


def _sas_of(m: Minted) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(m.credentials.get("sas") or "").items()}


@pytest.mark.emulator
def test_aws_minting_assumes_the_given_role_and_caps_a_chained_session(
    moto_s3: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``role_arn`` the gateways' session is ``AssumeRole`` (moto's STS) with the same
    session policy; from a caller that is itself a session (role chaining) AWS allows 1 h at
    most, whatever lifetime is asked for; the role option stays in the control plane."""
    options = {**moto_s3.options, "role_arn": ROLE}
    monkeypatch.setenv("AWS_SESSION_TOKEN", "the-callers-session")
    chained = resolve("s3://bkt/in/", options, lifetime_s=12 * 3600, name="job-chained")
    assert chained.minted is not None and chained.options == moto_s3.options
    assert chained.minted.detail["method"] == "AssumeRole"
    assert chained.minted.detail["policy"]["Statement"][0]["Resource"] == ["arn:aws:s3:::bkt/in/*"]
    assert chained.minted.expires_at - chained.minted.issued_at <= 3600 + 5
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    direct = resolve("s3://bkt/out/", options, write=True, lifetime_s=12 * 3600, name="job-x")
    assert direct.minted is not None and direct.minted.detail["method"] == "AssumeRole"
    assert direct.minted.expires_at - direct.minted.issued_at > 11 * 3600
    assert direct.credentials is not None
    assert direct.credentials.get("access_key_id") != os.environ["AWS_ACCESS_KEY_ID"]
    federated = resolve("s3://bkt/in/", moto_s3.options, lifetime_s=600, name="job-f")
    assert federated.minted is not None
    assert federated.minted.detail["method"] == "GetFederationToken"
    assert federated.minted.expires_at - federated.minted.issued_at <= 600 + 5
