"""The control plane's allowed address(es): given explicitly and validated, detected only as a
logged fallback (the IP-echo service is a local HTTP server here: nothing leaves the machine)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.control_cidrs import check_cidr, detect_client_cidr, parse_cidrs


def test_explicit_cidrs_are_normalized() -> None:
    assert parse_cidrs(None) is None
    assert parse_cidrs("198.51.100.7") == ("198.51.100.7/32",)
    assert parse_cidrs(" 203.0.113.0/28, 198.51.100.7/32 ,203.0.113.0/28") == (
        "203.0.113.0/28",
        "198.51.100.7/32",
    )
    assert parse_cidrs(["10.0.0.0/8", "192.0.2.1"]) == ("10.0.0.0/8", "192.0.2.1/32")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.0.0.0/0", "admits the whole Internet"),
        ("10.0.0.0/8,0.0.0.0/0", "admits the whole Internet"),
        ("::/0", "is IPv6"),
        ("2001:db8::1/128", "is IPv6"),
        ("2001:db8::1", "is IPv6"),
        ("::ffff:198.51.100.7", "is IPv6"),
        ("198.51.100.7/24", r"host bits set: did you mean 198\.51\.100\.0/24 or .*\.7/32"),
        ("198.51.100.300/32", "is not an IPv4 address or CIDR"),
        ("my-laptop", "is not an IPv4 address or CIDR"),
        ("198.51.100.7/33", "is not an IPv4 address or CIDR"),
        ("", "is empty"),
        (" , ", "is empty"),
        ([], "is empty"),
    ],
)
def test_bad_cidrs_are_refused_in_one_line(value: str | list[str], message: str) -> None:
    with pytest.raises(ProvisionError, match=message) as info:
        parse_cidrs(value)
    assert "\n" not in str(info.value)


def test_every_backend_refuses_a_bad_cidr_when_built() -> None:
    """Before any cloud call: the constructors validate (the old code accepted 0.0.0.0/0)."""
    from skyplane_ops.provision.aws import AWSProvisioner
    from skyplane_ops.provision.gcp import GCPProvisioner

    with pytest.raises(ProvisionError, match="whole Internet"):
        AWSProvisioner(client_cidr="0.0.0.0/0", session=object())
    with pytest.raises(ProvisionError, match="whole Internet"):
        GCPProvisioner(project="p", credentials="anonymous", client_cidr="0.0.0.0/0")
    with pytest.raises(ProvisionError, match="is IPv6"):
        GCPProvisioner(project="p", credentials="anonymous", client_cidr=["::1"])
    assert check_cidr("127.0.0.1") == "127.0.0.1/32"


@pytest.fixture
def echo() -> Iterator[list[bytes]]:
    """A local IP-echo service; the test sets what it answers."""
    answers = [b"198.51.100.7\n"]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(answers[0])

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    answers.append(f"http://127.0.0.1:{server.server_address[1]}/".encode())
    try:
        yield answers
    finally:
        server.shutdown()
        server.server_close()


def test_detection_is_a_logged_fallback_and_checks_the_answer(
    echo: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    url = echo[1].decode()
    with caplog.at_level(logging.WARNING, logger="skyplane_ops.provision.control_cidrs"):
        assert detect_client_cidr(url) == ("198.51.100.7/32",)
    assert "DETECTED" in caplog.text and "pass client_cidr for unattended runs" in caplog.text
    echo[0] = b"<html>captive portal</html>"
    with pytest.raises(ProvisionError, match="not an address; pass client_cidr explicitly"):
        detect_client_cidr(url)
    echo[0] = b"2001:db8::7"
    with pytest.raises(ProvisionError, match="is IPv6"):
        detect_client_cidr(url)
