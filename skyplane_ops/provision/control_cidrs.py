"""The control plane's address, as the cloud firewalls admit it (SSH and the gateway ports).

Give it explicitly for unattended runs: ``client_cidr="203.0.113.7/32"`` or several,
``client_cidr=["203.0.113.0/28", "198.51.100.7"]`` (a bare address means ``/32``). Each entry is
checked with ``ipaddress``: a malformed one, one with host bits set, ``/0`` (the whole Internet)
and IPv6 (the gateways have IPv4 addresses only) are refused with a one-line error. When none is
given the address is *detected* by asking an IP-echo service, which is wrong behind NAT, a proxy
or several egress addresses: a documented fallback for interactive use, and the log says so.
"""

from __future__ import annotations

import ipaddress
import logging
import urllib.request
from collections.abc import Iterable

from skyplane_ops.errors import ProvisionError

log = logging.getLogger(__name__)

ECHO_URL = "https://checkip.amazonaws.com"


def parse_cidrs(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """Normalized IPv4 CIDRs from a string (comma-separated) or a list; None stays None."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for raw in items:
        if not isinstance(raw, str):
            raise ProvisionError(f"client_cidr entry {raw!r} is not a string")
        text = raw.strip()
        if not text:
            continue
        out.append(check_cidr(text))
    if not out:
        raise ProvisionError("client_cidr is empty: give the control plane's address(es)")
    return tuple(dict.fromkeys(out))


def check_cidr(text: str) -> str:
    """One IPv4 CIDR (or address, meaning /32), normalized; anything else is refused."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        try:
            loose = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ProvisionError(
                f"client_cidr {text!r} is not an IPv4 address or CIDR (e.g. 203.0.113.7/32)"
            ) from exc
        raise ProvisionError(
            f"client_cidr {text!r} has host bits set: did you mean {loose} or "
            f"{text.split('/')[0]}/32?"
        ) from exc
    if net.version != 4:
        raise ProvisionError(
            f"client_cidr {text!r} is IPv6: the gateways have IPv4 addresses only, "
            "give the control plane's IPv4 address"
        )
    if net.prefixlen == 0:
        raise ProvisionError(
            f"client_cidr {text!r} admits the whole Internet to SSH and the gateway ports; "
            "give the control plane's own address(es)"
        )
    return str(net)


def detect_client_cidr(url: str = ECHO_URL, timeout: float = 10.0) -> tuple[str, ...]:
    """The fallback: this machine's address as an IP-echo service sees it, logged as such."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        answer = resp.read(64).decode(errors="replace").strip()
    try:
        address = ipaddress.ip_address(answer)
    except ValueError as exc:
        raise ProvisionError(
            f"{url} answered {answer[:40]!r}, not an address; pass client_cidr explicitly"
        ) from exc
    cidr = check_cidr(str(address))  # an IPv4 address: /32; IPv6 is refused
    log.warning(
        "client_cidr not given: admitting %s as the control plane, DETECTED via %s (wrong "
        "behind NAT, a proxy or several egress addresses); pass client_cidr for unattended runs",
        cidr,
        url,
    )
    return (cidr,)
