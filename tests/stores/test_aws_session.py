"""S3 stores share botocore's parsed data (service model, endpoint rules) but nothing else.

Why it matters: each new boto3 session parses that JSON again, 0.1-0.2 s per client, and a copy
opens several before its first byte. Sharing must not mix what is per store: credentials (the
control plane's scoped set for one store, the SDK chain for another) and configuration.
"""

from __future__ import annotations

from typing import Any

from gateway_agent.stores import open_store
from gateway_agent.stores.aws_session import shared_loader
from gateway_agent.stores.credentials import StoreCredentials
from skyplane_ops.testing.emulators import Emulator


def _client(store: Any) -> Any:
    return store._client


def test_two_s3_stores_share_the_parsed_model_and_both_work(moto_s3: Emulator) -> None:
    moto_s3.make_bucket("share-a")
    moto_s3.make_bucket("share-b")
    a = open_store(moto_s3.uri_for("share-a"), moto_s3.options)
    b = open_store(moto_s3.uri_for("share-b"), moto_s3.options)
    assert _client(a)._loader is shared_loader() is _client(b)._loader
    a.write("k", b"from a")
    b.write("k", b"from b")
    assert bytes(a.read("k")) == b"from a" and bytes(b.read("k")) == b"from b"


def test_credentials_stay_per_store_on_the_shared_loader(moto_s3: Emulator) -> None:
    moto_s3.make_bucket("share-c")
    given = StoreCredentials("aws", {"access_key_id": "AKIAGIVEN", "secret_access_key": "s1"})
    scoped = open_store(moto_s3.uri_for("share-c"), moto_s3.options, credentials=given)
    chain = open_store(moto_s3.uri_for("share-c"), moto_s3.options)
    assert _client(scoped)._loader is _client(chain)._loader
    signed_with = [
        _client(s)._request_signer._credentials.get_frozen_credentials().access_key
        for s in (scoped, chain)
    ]
    assert signed_with == ["AKIAGIVEN", moto_s3.env["AWS_ACCESS_KEY_ID"]]
    scoped.write("k", b"x")  # the emulator accepts any key: the request is made and signed
    assert bytes(chain.read("k")) == b"x"
