"""parse_uri: every accepted form, and the malformed ones it must refuse."""

from __future__ import annotations

import pytest

from gateway_agent.stores import InvalidURIError, StoreURI, parse_uri


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://my-bucket", StoreURI("s3", "my-bucket", "")),
        ("s3://my-bucket/", StoreURI("s3", "my-bucket", "")),
        ("s3://my-bucket/data", StoreURI("s3", "my-bucket", "data/")),
        ("s3://my.bucket/a//b c/", StoreURI("s3", "my.bucket", "a//b c/")),
        ("gs://bucket_1/ünï/", StoreURI("gs", "bucket_1", "ünï/")),
        ("az://acct01/container/p/q", StoreURI("az", "container", "p/q/", "acct01")),
        ("az://acct01/container", StoreURI("az", "container", "", "acct01")),
        (
            "https://acct01.blob.core.windows.net/container/a%20b/c",
            StoreURI("az", "container", "a b/c/", "acct01"),
        ),
        ("file:///tmp/x/y/", StoreURI("file", "/tmp/x/y")),
        ("file://localhost/tmp", StoreURI("file", "/tmp")),
        ("file:///", StoreURI("file", "/")),
        ("mem://Test_1/pre", StoreURI("mem", "Test_1", "pre/")),
    ],
)
def test_parses(uri: str, expected: StoreURI) -> None:
    assert parse_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "bucket/key",
        "ftp://host/x",
        "s3://",
        "s3://ab",  # too short
        "s3://Upper/x",
        "s3://a..b/x",
        "gs://-bad/x",
        "az://acct01",  # no container
        "az://Bad_Account/container",
        "az://acct01/Bad_Container",
        "az://acct01/a--b",
        "https://example.com/container/x",
        "https://acct01.blob.core.windows.net/container?sig=secret",
        "file://relative/path",
        "file:///a/../b",
        "mem://bad name/x",
    ],
)
def test_refuses(uri: str) -> None:
    with pytest.raises(InvalidURIError):
        parse_uri(uri)


def test_sas_query_is_never_echoed() -> None:
    """A signed URL's signature must not end up in an error message."""
    for uri in (
        "https://evil.example.com/c/x?sig=TOPSECRET",
        "https://acct01.blob.core.windows.net/c/x?sig=TOPSECRET",
        "https://acct01.blob.core.windows.net/c/x?sv=1&sig=TOPSECRET#frag",
    ):
        with pytest.raises(InvalidURIError) as err:
            parse_uri(uri)
        assert "TOPSECRET" not in str(err.value)


def test_round_trips_through_str() -> None:
    for uri in ("s3://b-1/p/", "gs://b-1/", "az://acct01/cont/p/", "mem://m/x/"):
        assert parse_uri(str(parse_uri(uri))) == parse_uri(uri)
