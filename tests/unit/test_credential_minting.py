"""What the control plane mints for a transfer's gateways: the documents that scope them.

No cloud is reachable, and the emulators do not enforce what scopes a credential (moto takes
any session policy and ignores it; the GCS emulator ignores tokens): so the scope each
credential carries is checked here, as data -- the AWS session policy (resources, actions,
conditions), the GCP Credential Access Boundary (rules, roles, conditions) and the Azure SAS
(resource, permissions, expiry, protocol). The GCP minting runs the real google-auth flow from
an external-account credential file; only Google's STS token endpoint is mocked (``responses``),
and the test checks the boundary that reached it and that the gateway is sealed the downscoped
token, not the source credential.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest

from gateway_agent.auth import credentials_context, unseal
from gateway_agent.stores.credentials import CredentialCell, StoreCredentials, boto3_session
from skyplane_ops.errors import TransferError
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.testing.transfer import DST, SRC, make_plan
from skyplane_ops.transfer.dispatch import Dispatcher
from skyplane_ops.transfer.dispatch.credentials import resolve
from skyplane_ops.transfer.dispatch.minting import (
    Scope,
    aws_session_policy,
    azure_container_sas,
    gcp_access_boundary,
)

# ---- AWS: the session policy ------------------------------------------------------------------


def _statements(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert policy["Version"] == "2012-10-17"
    return {s["Sid"]: s for s in policy["Statement"]}


def test_source_policy_reads_and_lists_only_the_source_prefix() -> None:
    st = _statements(aws_session_policy("src-bucket", "data/2024/", write=False))
    assert set(st) == {"ReadObjects", "ListPrefix"}
    read = st["ReadObjects"]
    assert read["Effect"] == "Allow" and read["Resource"] == ["arn:aws:s3:::src-bucket/data/2024/*"]
    assert set(read["Action"]) == {
        "s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectTagging", "s3:GetObjectVersionTagging",
    }  # fmt: skip
    assert not [a for a in read["Action"] if a.startswith(("s3:Put", "s3:Delete")) or "*" in a]
    listing = st["ListPrefix"]
    assert listing["Action"] == ["s3:ListBucket"]
    assert listing["Resource"] == ["arn:aws:s3:::src-bucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["data/2024/*"]}}


def test_destination_policy_writes_only_under_the_destination_prefix() -> None:
    st = _statements(aws_session_policy("dst-bucket", "out/", write=True))
    assert set(st) == {"WriteObjects", "ListPrefix"}
    write = st["WriteObjects"]
    assert write["Resource"] == ["arn:aws:s3:::dst-bucket/out/*"]
    assert set(write["Action"]) == {
        "s3:PutObject", "s3:PutObjectTagging", "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    }  # fmt: skip
    assert not [a for a in write["Action"] if a.startswith(("s3:Get", "s3:Delete")) or "*" in a]
    assert st["ListPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["out/*"]}}


def test_policy_wildcards_in_names_are_literal_and_partitions_follow_the_region() -> None:
    st = _statements(aws_session_policy("b", "we*ird?$/", write=False, region="cn-north-1"))
    assert st["ReadObjects"]["Resource"] == ["arn:aws-cn:s3:::b/we${*}ird${?}${$}/*"]
    assert st["ListPrefix"]["Condition"]["StringLike"]["s3:prefix"] == ["we${*}ird${?}${$}/*"]
    gov = aws_session_policy("b", "", write=True, region="us-gov-west-1")
    assert _statements(gov)["WriteObjects"]["Resource"] == ["arn:aws-us-gov:s3:::b/*"]


def test_a_packed_policy_fits_sts_limit() -> None:
    policy = aws_session_policy("b" * 63, "p" * 200, write=True, copy_source=("s" * 63, "q" * 200))
    assert len(json.dumps(policy, separators=(",", ":"))) < 2048


# A server-side route: S3 reads the CopyObject/UploadPartCopy source with the destination's
# session, so its set also reads the source's objects -- only these, and only on that route.
# moto enforces no session policy: the document is what is checked.


def test_a_server_side_destination_also_reads_the_source_prefix_only() -> None:
    policy = aws_session_policy(
        "dst-bucket", "out/", write=True, region="us-west-2", copy_source=("src-bucket", "in/")
    )
    assert policy["Statement"] == [
        {
            "Sid": "WriteObjects",
            "Effect": "Allow",
            "Action": [
                "s3:PutObject", "s3:PutObjectTagging", "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ],
            "Resource": ["arn:aws:s3:::dst-bucket/out/*"],
        },
        {
            "Sid": "ListPrefix",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": ["arn:aws:s3:::dst-bucket"],
            "Condition": {"StringLike": {"s3:prefix": ["out/*"]}},
        },
        {
            "Sid": "ReadCopySource",
            "Effect": "Allow",
            "Action": [
                "s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectTagging",
                "s3:GetObjectVersionTagging",
            ],
            "Resource": ["arn:aws:s3:::src-bucket/in/*"],
        },
    ]  # fmt: skip
    # Names stay literal, the partition is the destination's, and a source end never gets it.
    odd = aws_session_policy("d", "", True, "cn-north-1", copy_source=("s", "a*b/"))
    assert odd["Statement"][2]["Resource"] == ["arn:aws-cn:s3:::s/a${*}b/*"]
    assert aws_session_policy("s", "in/", False, copy_source=("x", "")) == aws_session_policy(
        "s", "in/", False
    )


def test_the_copy_source_is_given_on_a_server_side_route_within_one_service_only() -> None:
    from skyplane_ops.transfer.dispatch.credentials import copy_source

    assert copy_source("s3://a/in/", "s3://b/out/", server_side=True) == "s3://a/in/"
    assert copy_source("gs://a/in/", "gs://b/out/", server_side=True) == "gs://a/in/"
    assert copy_source("s3://a/in/", "s3://b/out/", server_side=False) is None
    # Azure copies from a presigned URL signed with the source's own set: nothing to add.
    assert copy_source("s3://a/in/", "az://acct/c/out/", server_side=True) is None
    assert copy_source("gs://a/in/", "s3://b/out/", server_side=True) is None
    assert Scope("s3://bbb/out/", True, "s3://aaa/in/").copy_source == ("aaa", "in/")
    assert Scope("s3://aaa/in/", False, "s3://aaa/in/").copy_source is None


# ---- GCP: the Credential Access Boundary ------------------------------------------------------


def test_source_boundary_views_the_source_prefix_and_lists_it() -> None:
    rules = gcp_access_boundary("src", "data/it's/", write=False).to_json()["accessBoundary"]
    [rule] = rules["accessBoundaryRules"]
    assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/src"
    assert rule["availablePermissions"] == ["inRole:roles/storage.objectViewer"]
    expr = rule["availabilityCondition"]["expression"]
    assert expr == (
        "resource.name.startsWith('projects/_/buckets/src/objects/data/it\\'s/') || "
        "api.getAttribute('storage.googleapis.com/objectListPrefix', '')"
        ".startsWith('data/it\\'s/')"
    )


def test_destination_boundary_writes_the_prefix_and_the_staging_folder_only() -> None:
    rules = gcp_access_boundary("dst", "out/", write=True).to_json()["accessBoundary"]
    by_role = {r["availablePermissions"][0]: r for r in rules["accessBoundaryRules"]}
    assert set(by_role) == {
        "inRole:roles/storage.objectAdmin",
        "inRole:roles/storage.objectCreator",
    }
    for rule in by_role.values():
        assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/dst"
    admin = by_role["inRole:roles/storage.objectAdmin"]["availabilityCondition"]["expression"]
    assert admin == "resource.name.startsWith('projects/_/buckets/dst/objects/out/')"
    staged = by_role["inRole:roles/storage.objectCreator"]["availabilityCondition"]["expression"]
    assert staged == "resource.name.startsWith('projects/_/buckets/dst/objects/.%staging/')"


def test_a_server_side_destination_boundary_views_the_source_prefix_only() -> None:
    boundary = gcp_access_boundary("dst", "out/", write=True, copy_source=("src", "in/"))
    rules = boundary.to_json()["accessBoundary"]["accessBoundaryRules"]
    assert len(rules) == 3
    assert rules[2] == {
        "availableResource": "//storage.googleapis.com/projects/_/buckets/src",
        "availablePermissions": ["inRole:roles/storage.objectViewer"],
        "availabilityCondition": {
            "expression": "resource.name.startsWith('projects/_/buckets/src/objects/in/')",
            "title": "copy source prefix",
        },
    }  # a rewrite reads objects; no list prefix, nothing of the destination widened
    assert (
        rules[:2]
        == gcp_access_boundary("dst", "out/", write=True).to_json()["accessBoundary"][
            "accessBoundaryRules"
        ]
    )
    whole = gcp_access_boundary("dst", "", write=True, copy_source=("src", ""))
    last = whole.to_json()["accessBoundary"]["accessBoundaryRules"][2]
    assert "availabilityCondition" not in last  # the whole source bucket was asked for


STS_URL = "https://sts.googleapis.com/v1/token"
SUBJECT = "subject-jwt-from-the-workload"


@pytest.fixture
def google_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An external-account (workload identity federation) credential file as the control
    plane's Google identity: refreshing it is a token exchange at Google's STS too."""
    subject = tmp_path / "subject.jwt"
    subject.write_text(SUBJECT)
    info = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/locations/global/workforcePools/p/providers/q",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": STS_URL,
        "credential_source": {"file": str(subject)},
    }
    path = tmp_path / "adc.json"
    path.write_text(json.dumps(info))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    return path


def test_gcs_gateways_get_a_downscoped_token_not_the_source_credential(
    google_identity: Path,
) -> None:
    """Mocked: Google's STS token endpoint only (no network here). Everything else is the real
    google-auth flow: the source credential is refreshed, then exchanged with the boundary."""
    import responses

    boundaries: list[dict[str, Any]] = []

    def sts(request: Any) -> tuple[int, dict[str, str], str]:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        form = {k: v[0] for k, v in parse_qs(body).items()}
        if "options" in form:  # the downscoping exchange (its options are quoted twice)
            assert form["subject_token"] == "source-access-token"
            boundaries.append(json.loads(unquote(form["options"])))
            token = f"downscoped-{len(boundaries)}"
        else:  # the source credential's own refresh
            assert form["subject_token"] == SUBJECT
            token = "source-access-token"
        answer = {"access_token": token, "issued_token_type":
                  "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer",
                  "expires_in": 3600}  # fmt: skip
        return 200, {}, json.dumps(answer)

    with responses.RequestsMock() as mock:
        mock.add_callback(responses.POST, STS_URL, callback=sts)
        plan = make_plan([SRC, DST])
        gateways = [Gateway("g0", SRC, "127.0.0.1", 1, 2), Gateway("g1", DST, "127.0.0.1", 3, 4)]
        fleet = GatewayFleet("t", "local", gateways, "ref")
        secret = b"k" * 32
        d = Dispatcher(plan, fleet, secret, src_uri="file:///tmp/x/", dst_uri="gs://dst/out/")
        spec = d.job_spec(gateways[1])
        assert "sealed_credentials" not in d.job_spec(gateways[0])  # a file source: nothing
        opened = json.loads(
            unseal(secret, spec["sealed_credentials"], credentials_context(d.job_id, "g1"))
        )
        assert opened["dst"]["kind"] == "gcp" and opened["dst"]["token"] == "downscoped-1"
        text = json.dumps(opened) + json.dumps(spec)
        assert "source-access-token" not in text and SUBJECT not in text
        assert str(google_identity) not in text
        # The boundary Google's STS was asked for: the destination bucket and prefix only.
        [boundary] = boundaries
        rules = boundary["accessBoundary"]["accessBoundaryRules"]
        assert {r["availableResource"] for r in rules} == {
            "//storage.googleapis.com/projects/_/buckets/dst"
        }
        options = json.loads(unseal(secret, spec["sealed_options"]))
        assert options["dst"] == {"project": "proj-1"}
        # Half-way through its life the next token is minted from a refreshed source.
        _, mint = d.minted_ends()["dst"]
        assert mint().credentials.get("token") == "downscoped-2"


def test_a_server_side_gcs_route_mints_the_destination_with_the_source_read(
    google_identity: Path,
) -> None:
    """Mocked: Google's STS token endpoint only. The boundary Google is asked for on a
    server-side route (the plan's ``server_side_paths``): the destination's rules and the
    source prefix viewed; the source's own token stays the source's."""
    import dataclasses

    import responses

    boundaries: list[dict[str, Any]] = []

    def sts(request: Any) -> tuple[int, dict[str, str], str]:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        form = {k: v[0] for k, v in parse_qs(body).items()}
        if "options" in form:
            boundaries.append(json.loads(unquote(form["options"])))
        answer = {"access_token": f"t{len(boundaries)}", "issued_token_type":
                  "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer",
                  "expires_in": 3600}  # fmt: skip
        return 200, {}, json.dumps(answer)

    with responses.RequestsMock() as mock:
        mock.add_callback(responses.POST, STS_URL, callback=sts)
        base = make_plan([DST])
        plan = dataclasses.replace(base, details={**base.details, "server_side_paths": [0]})
        fleet = GatewayFleet("t", "local", [Gateway("g0", DST, "127.0.0.1", 1, 2)], "ref")
        Dispatcher(plan, fleet, b"k" * 32, src_uri="gs://src/in/", dst_uri="gs://dst/out/")
    by_bucket: dict[str, list[str]] = {}
    for boundary in boundaries:
        rules = boundary["accessBoundary"]["accessBoundaryRules"]
        buckets = sorted({r["availableResource"].rsplit("/", 1)[1] for r in rules})
        by_bucket[",".join(buckets)] = [r["availablePermissions"][0] for r in rules]
    assert by_bucket == {
        "src": ["inRole:roles/storage.objectViewer"],
        "dst,src": [
            "inRole:roles/storage.objectAdmin",
            "inRole:roles/storage.objectCreator",
            "inRole:roles/storage.objectViewer",
        ],
    }


# ---- Azure: the SAS -----------------------------------------------------------------------------


def _sas(token: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(token).items()}


KEY = "a2V5LWZvci10ZXN0cy1vbmx5LW5vdC1hLXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVm"


def test_service_sas_reads_and_lists_the_source_container_until_expiry() -> None:
    expiry = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=30)
    sas = _sas(azure_container_sas(Scope("az://acct/src/data/", False), expiry,
                                   https_only=True, account_key=KEY))  # fmt: skip
    assert sas["sr"] == "c" and sas["sp"] == "rlt" and sas["spr"] == "https"
    assert sas["se"] == expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "skoid" not in sas and KEY not in json.dumps(sas)


def test_user_delegation_sas_creates_and_writes_the_destination_container() -> None:
    from azure.storage.blob import UserDelegationKey

    key = UserDelegationKey()
    key.signed_oid, key.signed_tid = "oid-1", "tid-1"
    key.signed_start, key.signed_expiry = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    key.signed_service, key.signed_version, key.value = "b", "2025-01-05", KEY
    expiry = datetime.now(UTC) + timedelta(hours=1)
    sas = _sas(azure_container_sas(Scope("az://acct/dst/out/", True), expiry,
                                   https_only=False, user_delegation_key=key))  # fmt: skip
    assert sas["sr"] == "c" and sas["sp"] == "cwt" and "spr" not in sas
    assert sas["skoid"] == "oid-1" and sas["sktid"] == "tid-1"


def test_azure_gateways_get_a_sas_not_the_account_key(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    access = resolve("az://acct/dst/out/", {}, write=True, lifetime_s=120)
    assert access.credentials is not None and access.mint is not None
    values = access.credentials.to_dict()
    assert KEY not in json.dumps(values) and "connection_string" not in values
    assert values["account_url"] == "https://acct.blob.core.windows.net"
    sas = _sas(values["sas"])
    assert sas["sp"] == "cwt" and sas["sr"] == "c"
    assert access.minted is not None and access.minted.expires_at - time.time() <= 120


# ---- modes and options --------------------------------------------------------------------------


def test_credential_options_stay_in_the_control_plane(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    opts = {"credentials": "instance", "role_arn": "arn:aws:iam::1:role/r", "region": "eu-west-1"}
    access = resolve("s3://b/p/", opts)
    assert access.credentials is None and access.options == {"region": "eu-west-1"}
    with pytest.raises(TransferError, match="credentials must be one of"):
        resolve("s3://b/p/", {"credentials": "mine"})


# ---- the gateway's side: a cell the SDK follows -------------------------------------------------


def _aws(key: str, seconds: float) -> StoreCredentials:
    expires = datetime.now(UTC) + timedelta(seconds=seconds)
    values = {"access_key_id": key, "secret_access_key": "s", "session_token": "t"}
    return StoreCredentials("aws", {**values, "expires_at": expires.isoformat()})


def test_an_s3_session_takes_the_cells_newest_set_and_refuses_an_expired_one() -> None:
    cell = CredentialCell(_aws("ASIAFIRST", 2))
    creds = boto3_session(cell).get_credentials()
    assert creds.get_frozen_credentials().access_key == "ASIAFIRST"
    cell.update(_aws("ASIASECOND", 600))
    assert creds.get_frozen_credentials().access_key == "ASIASECOND"
    assert cell.updates == 1 and cell.taken == 1
    stale = CredentialCell(_aws("ASIAOLD", 0.2))
    old = boto3_session(stale).get_credentials()
    time.sleep(0.3)
    with pytest.raises(RuntimeError, match="still expired"):
        old.get_frozen_credentials()
    with pytest.raises(ValueError):
        cell.update(StoreCredentials("gcp", {"token": "x"}))


# ---- the gateway's job: fresh sets in order, for the stores it holds ----------------------------


def _sealed(secret: bytes, job_id: str, serial: int, **sides: Any) -> str:
    from gateway_agent.auth import seal

    body = {"src": None, "dst": None, "serial": serial}
    body.update({side: creds.to_dict() for side, creds in sides.items()})
    return seal(secret, json.dumps(body).encode(), credentials_context(job_id, "gw"))


def test_a_job_takes_fresh_sets_in_serial_order_for_the_stores_it_holds() -> None:
    from gateway_agent.flow import ByteBudget
    from gateway_agent.job import Job
    from gateway_agent.job.base import JobError

    secret, job_id = b"s" * 32, "job-fresh"
    spec = {
        "job_id": job_id, "routes": {"0": ["here"]}, "gateways": {"here": []},
        "sealed_credentials": _sealed(secret, job_id, 0, dst=_aws("ASIA0", 60)),
    }  # fmt: skip
    job = Job(spec, gateway_id="gw", region="here", secret=secret, budget=ByteBudget(1 << 20))
    try:
        cell = job._dst_credentials
        assert cell is not None and job._src_credentials is None
        fresh = {"sealed_credentials": _sealed(secret, job_id, 2, dst=_aws("ASIA2", 60))}
        assert job.update_credentials(fresh) == {"updated": True, "serial": 2}
        late = {"sealed_credentials": _sealed(secret, job_id, 1, dst=_aws("ASIA1", 60))}
        assert job.update_credentials(late) == {"updated": False, "serial": 2}
        assert cell.current().get("access_key_id") == "ASIA2"
        assert job.credential_counters()["credentials_received"] == 1
        other = {"sealed_credentials": _sealed(secret, job_id, 3, src=_aws("ASIA3", 60))}
        with pytest.raises(JobError, match="holds none"):
            job.update_credentials(other)
        elsewhere = {"sealed_credentials": _sealed(secret, "job-other", 4, dst=_aws("X", 60))}
        with pytest.raises(JobError, match="do not open"):
            job.update_credentials(elsewhere)
        assert cell.current().get("access_key_id") == "ASIA2"
    finally:
        job.stop()
