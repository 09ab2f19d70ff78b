"""Two names for one place are one place (issue 35, "Identity, not names").

Real folders, a real bind mount (root only), the moto S3 server reached through two spellings
of its endpoint and through an access-point alias, and the real CLI in a subprocess: every
case is refused with rc 2 and one line naming both ends, before anything is listed, and the
source and every destination object are byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import read_tree, write_dataset
from skyplane_ops.transfer.overlap import check_disjoint
from tests.faults.engine_helpers import REGIONS, one_line_error, run_cli


@pytest.fixture
def bound(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``p`` (with ``p/sub/f`` and ``p/other``) and ``b``, a bind mount of ``p``."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    p, b = tmp_path / "p", tmp_path / "b"
    write_dataset(p, {"sub/f": 10, "other": 20})
    b.mkdir()
    proc = subprocess.run(["mount", "--bind", str(p), str(b)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {proc.stderr.strip()}")
    try:
        yield p, b
    finally:
        subprocess.run(["umount", "-l", str(b)], check=False)


BIND_CASES = {
    # the case: the destination is the source's parent, reached through the mount
    "src-inside-dst": (("p", "sub"), ("b",), "the source is inside the destination"),
    "dst-inside-src": (("b",), ("p", "sub", "copy"), "the destination is inside the source"),
    "same-folder": (("b", "sub"), ("p", "sub"), "are the same place"),
    # a destination that does not exist yet: its nearest existing ancestor is compared
    "missing-dst-inside": (("b",), ("p", "sub", "new", "deeper"), "inside the source"),
}


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("case", list(BIND_CASES))
def test_a_bind_mount_is_the_same_folder(
    tmp_path: Path, bound: tuple[Path, Path], case: str, dry_run: bool
) -> None:
    p, _b = bound
    src_parts, dst_parts, why = BIND_CASES[case]
    src, dst = tmp_path.joinpath(*src_parts), tmp_path.joinpath(*dst_parts)
    before = read_tree(p)
    home = tmp_path / "home"
    flags = ["--delete", *(["--dry-run"] if dry_run else [])]
    proc = run_cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, *flags)
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert why in line and f"file://{src}" in line and f"file://{dst}" in line, line
    assert "two paths" in line or "both resolve to" in line, line
    assert read_tree(p) == before  # nothing deleted, nothing written
    assert not home.exists()  # refused before a journal, a lock or a fleet


def test_unrelated_folders_under_a_bind_mount_still_copy(
    tmp_path: Path, bound: tuple[Path, Path]
) -> None:
    _p, b = bound
    other = tmp_path / "elsewhere"
    check_disjoint(f"file://{b}/sub", f"file://{other}")
    check_disjoint(f"file://{other}", f"file://{b}/sub2")  # a sibling, through the mount


def test_a_second_spelling_of_the_s3_endpoint_is_the_same_bucket(
    tmp_path: Path, moto_s3: Any
) -> None:
    uri = moto_s3.make_bucket("identity-endpoints")
    store_opts = moto_s3.options
    from gateway_agent.stores import open_store

    store = open_store(uri, store_opts)
    store.write("data/a", b"A" * 100)
    store.write("data/x/b", b"B" * 100)
    before = {o.key: store.read(o.key) for o in store.list()}
    port = store_opts["endpoint_url"].rsplit(":", 1)[1]
    other = {**store_opts, "endpoint_url": f"http://LOCALHOST:{port}/"}
    home = tmp_path / "home"
    proc = run_cli(
        home,
        "sync",
        uri + "data/x/",
        uri + "data/",
        *REGIONS,
        "--delete",
        "--src-options",
        f'{{"endpoint_url": "{store_opts["endpoint_url"]}", "region": "us-east-1"}}',
        "--dst-options",
        f'{{"endpoint_url": "{other["endpoint_url"]}", "region": "us-east-1"}}',
    )
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert "the source is inside the destination" in line and "identity-endpoints" in line
    assert {o.key: store.read(o.key) for o in store.list()} == before
    assert not home.exists()


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({}, {"endpoint_url": "https://s3.amazonaws.com"}),
        ({"endpoint_url": "https://s3.us-west-2.amazonaws.com"}, {}),
        ({"endpoint_url": "https://s3-us-west-2.amazonaws.com:443"}, {"region": "eu-west-1"}),
        ({"endpoint_url": "https://s3.dualstack.eu-west-1.amazonaws.com"}, {}),
        ({"endpoint_url": "https://bkt.s3.eu-west-1.amazonaws.com"}, {}),  # virtual-host
        ({"endpoint_url": "http://127.0.0.1:9000"}, {"endpoint_url": "http://localhost:9000/"}),
        ({"endpoint_url": "http://bkt.minio.lan:80"}, {"endpoint_url": "http://minio.lan"}),
    ],
)
def test_s3_endpoint_spellings_name_one_namespace(
    a: dict[str, str], b: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(TransferError, match="are the same place"):
        check_disjoint("s3://bkt/data/", "s3://bkt/data", a, b)


def test_gcs_and_azure_endpoint_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(TransferError, match="inside the source"):
        check_disjoint(
            "gs://bkt/a/", "gs://bkt/a/b/", {"endpoint_url": "https://storage.googleapis.com"}, {}
        )
    with pytest.raises(TransferError, match="same place"):
        check_disjoint(
            "az://acct/cont/p/",
            "https://acct.blob.core.windows.net/cont/p",
            {"endpoint_url": "https://acct.blob.core.windows.net/"},
            {},
        )
    # Azurite's path-style endpoint names the account in its path: another account differs
    check_disjoint(
        "az://acct/cont/p/",
        "az://acct/cont/p/",
        {"endpoint_url": "http://127.0.0.1:10000/devstoreaccount1"},
        {"endpoint_url": "http://127.0.0.1:10000/otheraccount"},
    )
    # different services stay different places
    check_disjoint("s3://bkt/a/", "s3://bkt/a/", {}, {"endpoint_url": "http://127.0.0.1:9000"})


def _access_point(moto_s3: Any, bucket: str, name: str) -> str:
    import boto3
    from botocore.config import Config

    control = boto3.client(
        "s3control",
        endpoint_url=moto_s3.options["endpoint_url"],
        region_name="us-east-1",
        config=Config(inject_host_prefix=False),
    )
    control.meta.events.register(
        "before-sign.s3-control",
        lambda request, **_: setattr(
            request, "url", request.url.replace("://123456789012.", "://", 1)
        ),
    )
    return str(
        control.create_access_point(AccountId="123456789012", Name=name, Bucket=bucket)["Alias"]
    )


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_an_access_point_alias_is_its_bucket(tmp_path: Path, moto_s3: Any, dry_run: bool) -> None:
    uri = moto_s3.make_bucket("identity-ap")
    from gateway_agent.stores import open_store

    store = open_store(uri, moto_s3.options)
    store.write("data/a", b"A" * 100)
    before = {o.key: store.read(o.key) for o in store.list()}
    alias = _access_point(moto_s3, "identity-ap", "ap-run" if not dry_run else "ap-dry")
    home = tmp_path / "home"
    opts = json.dumps({"endpoint_url": moto_s3.options["endpoint_url"], "region": "us-east-1"})
    proc = run_cli(
        home,
        "sync",
        uri + "data/",
        f"s3://{alias}/data/copy/",
        *REGIONS,
        "--delete",
        "--src-options",
        opts,
        "--dst-options",
        opts,
        *(["--dry-run"] if dry_run else []),
    )
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert "inside the source" in line and alias in line and "access point" in line, line
    assert {o.key: store.read(o.key) for o in store.list()} == before
    assert not home.exists()


def test_an_alias_the_api_cannot_resolve_is_said_and_assumed() -> None:
    from skyplane_ops.transfer.overlap import check_access_points

    def fails(alias: str, options: Any) -> str | None:
        raise RuntimeError("AccessDenied: s3:ListAccessPoints")

    alias = "ap-0123456789abcdef0123456789abcdef01-s3alias"
    note = check_access_points("s3://bkt/a/", f"s3://{alias}/a/", resolve=fails)
    assert note is not None and "cannot tell" in note and "assuming" in note
    assert "\n" not in note
