"""Encrypted by default (issue 36): which hops are sealed, chunk tags, signed control answers.

Pure functions and real socket pairs; the gateways, proxies and the CLI are exercised in
``tests/integration/test_tamper.py``.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from typing import Any

import pytest

from gateway_agent import auth, wire
from gateway_agent.stores.checksum import crc32c
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.dispatch import Dispatcher, DispatchOptions
from skyplane_ops.transfer.dispatch.spec import encrypt_hop, hop_kind
from skyplane_ops.transfer.request import TransferRequest

SECRET = b"k" * 32


# ---- the per-hop decision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dst", "addresses", "backend", "kind"),
    [
        # same host: the bytes never leave the machine
        ("test:src", "test:dst", ["127.0.0.1"], "local", "loopback"),
        ("aws:us-east-1", "aws:us-west-2", ["127.0.0.1", "localhost"], "local", "loopback"),
        # between providers: always over networks the user does not own, whatever the address
        ("aws:us-east-1", "gcp:us-west1", ["127.0.0.1"], "local", "internet"),
        ("aws:us-east-1", "azure:eastus", ["10.0.0.5"], "mixed", "internet"),
        # one cloud, two regions: the provider's backbone or the Internet
        ("aws:us-east-1", "aws:us-west-2", ["10.1.0.7"], "aws", "internet"),
        ("gcp:us-east1", "gcp:europe-west1", ["10.128.0.2"], "gcp", "internet"),
        # one cloud region, private addresses: inside the user's VPC
        ("aws:us-east-1", "aws:us-east-1", ["10.1.0.7"], "aws", "private"),
        ("aws:us-east-1", "aws:us-east-1", ["54.1.2.3"], "aws", "internet"),
        # the user's own hosts (ssh) and this machine's namespaces over private addresses
        ("dc:a", "dc:b", ["192.168.1.20"], "ssh", "private"),
        ("dc:a", "dc:b", ["fd00::20"], "ssh", "private"),
        ("aws:us-east-1", "aws:us-west-2", ["10.0.1.2"], "netns", "private"),
        # ssh hosts reached over a public address or a name
        ("dc:a", "dc:b", ["203.0.113.9"], "ssh", "internet"),
        ("dc:a", "dc:b", ["192.168.1.20", "198.51.100.7"], "ssh", "internet"),
        ("dc:a", "dc:b", ["gw.example.com"], "ssh", "internet"),
        ("dc:a", "dc:b", [], "ssh", "internet"),
    ],
)
def test_hop_kinds(src: str, dst: str, addresses: list[str], backend: str, kind: str) -> None:
    assert hop_kind(src, dst, addresses, backend) == kind


def test_auto_seals_internet_hops_only_and_none_never() -> None:
    for mode, want in (
        ("auto", {"loopback": False, "private": False, "internet": True}),
        ("cross-cloud", {"loopback": False, "private": False, "internet": True}),
        ("all", dict.fromkeys(("loopback", "private", "internet"), True)),
        (True, dict.fromkeys(("loopback", "private", "internet"), True)),
        ("none", dict.fromkeys(("loopback", "private", "internet"), False)),
        (False, dict.fromkeys(("loopback", "private", "internet"), False)),
    ):
        assert {k: encrypt_hop(mode, "a:x", "b:y", k) for k in want} == want, mode
    assert encrypt_hop(frozenset({("a:x", "b:y")}), "a:x", "b:y", "loopback")
    assert not encrypt_hop(frozenset({("a:x", "b:y")}), "b:y", "c:z", "internet")
    with pytest.raises(TransferError, match="encrypt"):
        encrypt_hop("sometimes", "a:x", "b:y", "internet")


def _plan(path: tuple[str, ...]) -> TransferPlan:
    return TransferPlan(
        src=path[0], dsts=(path[-1],), volume_gb=1, mode="min_cost",
        paths=[PlanPath(path, 1.0, 1.0)],
        hops=[Hop(u, v, 1, 2) for u, v in itertools.pairwise(path)],
        vms=dict.fromkeys(path, 1), predicted_gbps=1, egress_cost_usd=0, vm_cost_usd=0,
    )  # fmt: skip


def _hops(fleet: GatewayFleet, path: tuple[str, ...], **options: Any) -> dict[str, bool]:
    d = Dispatcher(_plan(path), fleet, SECRET, src_uri="mem://a/", dst_uri="mem://b/",
                   options=DispatchOptions(**options))  # fmt: skip
    return {h: v["encrypt"] for h, v in d.job_spec(fleet.gateways[0])["hops"].items()}


def test_the_default_seals_a_cloud_fleets_hops_between_regions_and_providers() -> None:
    """A mixed fleet with private addresses everywhere: every hop between regions is sealed
    by default, the same-provider relay hop too; ``none`` seals nothing."""
    path = ("aws:us-east-1", "aws:us-west-2", "gcp:us-west1")
    gateways = [Gateway(f"g{i}", r, f"10.0.{i}.5", 1, 2) for i, r in enumerate(path)]
    fleet = GatewayFleet("t", "mixed", gateways, "x")
    hops = [f"{path[0]}>{path[1]}", f"{path[1]}>{path[2]}"]
    assert _hops(fleet, path) == dict.fromkeys(hops, True)
    assert _hops(fleet, path, encrypt="none") == dict.fromkeys(hops, False)


def test_the_default_keeps_loopback_hops_clear_but_not_a_hop_between_providers() -> None:
    path = ("aws:us-east-1", "aws:us-west-2", "gcp:us-west1")
    gateways = [Gateway(f"g{i}", r, "127.0.0.1", 1, 2) for i, r in enumerate(path)]
    fleet = GatewayFleet("t", "local", gateways, "x")
    assert _hops(fleet, path) == {f"{path[0]}>{path[1]}": False, f"{path[1]}>{path[2]}": True}


def test_ssh_hosts_over_a_public_address_are_sealed_by_default() -> None:
    path = ("dc:a", "dc:b")
    lan = GatewayFleet("t", "ssh", [Gateway("a", "dc:a", "192.168.1.10", 1, 2),
                                    Gateway("b", "dc:b", "192.168.1.20", 1, 2)], "x")  # fmt: skip
    assert _hops(lan, path) == {"dc:a>dc:b": False}
    wan = GatewayFleet("t", "ssh", [
        Gateway("a", "dc:a", "192.168.1.10", 1, 2),
        Gateway("b", "dc:b", "198.51.100.7", 1, 2, {"data_addresses": {"dc:c": "10.0.0.1"}}),
    ], "x")  # fmt: skip
    assert _hops(wan, path) == {"dc:a>dc:b": True}


def test_a_request_encrypts_automatically_by_default() -> None:
    request = TransferRequest.build("/tmp/a", "s3://bucket/replica/")
    assert request.encrypt == "auto"
    assert request.dispatch_options().encrypt == "auto"
    assert DispatchOptions().encrypt == "auto"
    for old, new in ((True, "all"), (False, "none"), ("cross-cloud", "auto"), ("none", "none")):
        assert request.replace(encrypt=old).encrypt == new
    assert TransferRequest.from_json(request.replace(encrypt=False).to_json()).encrypt == "none"
    with pytest.raises(TransferError, match="encrypt"):
        request.replace(encrypt="sometimes")


# ---- chunk tags ---------------------------------------------------------------------------


def _tagged(payload: bytes) -> tuple[dict[str, Any], int]:
    key = wire.frame_key(SECRET)
    tagger = wire.FrameTagger(key)
    crc = wire.crc_and_tag(payload, tagger)
    meta: dict[str, Any] = {"job": "j", "chunk": 3, "path": "0", "segs": [{"key": "k"}]}
    meta["tag"] = tagger.seal(meta, len(payload), crc)
    return meta, crc


def test_a_chunk_tag_covers_payload_metadata_and_crc() -> None:
    key = wire.frame_key(SECRET)
    payload = bytes(range(256)) * 9000  # > 2 pieces of 1 MiB
    meta, crc = _tagged(payload)
    assert crc == crc32c(payload)
    assert wire.check_tag(key, meta, payload, crc)
    # Re-encoding the metadata (as a relay may) changes nothing that is tagged.
    assert wire.check_tag(key, json.loads(json.dumps(meta, indent=1)), payload, crc)
    flipped = bytearray(payload)
    flipped[1_500_000] ^= 1
    # The attacker's move: flip a byte and recompute the CRC32C (anyone can).
    assert not wire.check_tag(key, meta, flipped, crc32c(flipped))
    assert not wire.check_tag(key, {**meta, "chunk": 4}, payload, crc)
    assert not wire.check_tag(key, meta, payload, crc ^ 1)
    assert not wire.check_tag(wire.frame_key(b"o" * 32), meta, payload, crc)
    assert not wire.check_tag(key, {k: v for k, v in meta.items() if k != "tag"}, payload, crc)
    assert not wire.check_tag(key, {**meta, "tag": "zz" * 32}, payload, crc)
    other, _ = _tagged(payload)
    assert other["tag"] != meta["tag"]  # a fresh nonce per frame: no one-time key reused


def test_the_sink_checks_the_tag_while_receiving() -> None:
    a, b = socket.socketpair()
    out: dict[str, Any] = {}

    def serve() -> None:
        out["s"] = wire.server_handshake(b, SECRET)

    t = threading.Thread(target=serve)
    t.start()
    c_sess = wire.client_handshake(a, SECRET, encrypt=False)
    t.join(5)
    payload = bytes(range(256)) * 4096
    meta, crc = _tagged(payload)
    with a, b:
        for forged in (False, True):
            body = bytearray(payload)
            sent_meta = dict(meta)
            if forged:  # a byte flipped and the CRC32C fixed up, as an attacker on the path can
                body[100] ^= 0xFF
                crc_sent = crc32c(body)
                sent_meta["crcs"] = [crc_sent]
            else:
                crc_sent = crc
            sender = threading.Thread(
                target=wire.send_frame, args=(a, c_sess, sent_meta, bytes(body), crc_sent)
            )
            sender.start()
            frame = wire.read_body(b, out["s"], wire.read_header(b), want_crc=lambda _m: True)
            sender.join(5)
            assert frame.computed_crc == crc_sent  # the CRC32C alone cannot tell
            assert frame.tag_ok is (not forged)


def test_a_tampered_sealed_record_names_its_chunk() -> None:
    a, b = socket.socketpair()
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(s=wire.server_handshake(b, SECRET)))
    t.start()
    c_sess = wire.client_handshake(a, SECRET, encrypt=True)
    t.join(5)
    with a, b:
        payload = b"x" * (3 * wire.SEAL_PIECE)
        sender = threading.Thread(
            target=wire.send_frame, args=(a, c_sess, {"job": "j", "chunk": 9}, payload, 0)
        )
        sender.start()
        header = wire.read_header(b)
        sealed = bytearray(wire.recv_exact(b, header[2]))
        sender.join(5)
        sealed[header[1] + wire.TAG + 5000] ^= 1  # inside the first body record
        c, d = socket.socketpair()
        with c, d:
            feeding = threading.Thread(target=c.sendall, args=(bytes(sealed),))
            feeding.start()  # more than the socket buffers hold: sent while it is read
            with pytest.raises(wire.FrameRefused) as refused:
                wire.read_body(d, out["s"], header)
            feeding.join(5)
    assert refused.value.meta == {"job": "j", "chunk": 9}


# ---- signed control answers ---------------------------------------------------------------


def test_an_answer_signature_is_bound_to_its_request() -> None:
    body = b'{"ok": true}'
    sig = auth.sign_answer(SECRET, "GET", "/v1/health", "req-sig-1", 200, body)
    assert auth.answer_matches(SECRET, "GET", "/v1/health", "req-sig-1", 200, body, sig)
    for changed in (
        ("POST", "/v1/health", "req-sig-1", 200, body),
        ("GET", "/v1/lease", "req-sig-1", 200, body),
        ("GET", "/v1/health", "req-sig-2", 200, body),  # another request: no replay
        ("GET", "/v1/health", "req-sig-1", 401, body),
        ("GET", "/v1/health", "req-sig-1", 200, b'{"ok": false}'),
    ):
        assert not auth.answer_matches(SECRET, *changed, sig)
    assert not auth.answer_matches(b"o" * 32, "GET", "/v1/health", "req-sig-1", 200, body, sig)
    assert not auth.answer_matches(SECRET, "GET", "/v1/health", "req-sig-1", 200, body, None)
    assert not auth.answer_matches(SECRET, "GET", "/v1/health", "req-sig-1", 200, body, "")
