"""What the azure and gcp backends share: tags, per-fleet keys and the cloud-init they boot with.

Host keys are never trusted on first use. On Azure the control plane *generates* each VM's SSH
host key and hands it to the VM in its custom data (cloud-init ``ssh_keys``): Azure keeps custom
data root-only on the VM (``/var/lib/waagent``) and returns it neither from the VM's metadata
service nor from the API. GCE and EC2 metadata (user-data included) are readable by every
process on the VM and by anyone allowed to get the instance, so there the VM generates its own
host key and cloud-init prints the public half on the serial console, which the backend reads
back through the provider's API (``parse_console_host_key``). Either way paramiko verifies the
key strictly.

The VM's only login is ``AGENT_USER``: created by cloud-init, key-only, password locked, no
sudo; the image's default user (``ubuntu``, with passwordless sudo) is not created because the
``users`` list omits ``default``. What boot needs as root is done by cloud-init itself (its
``write_files``/``runcmd``, passed as ``extra``) before the agent is started.
"""

from __future__ import annotations

import getpass
import json
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.secrets import private_dir, write_private

TAG_TRANSFER = "skyplane-ops:transfer-id"
TAG_CREATOR = "skyplane-ops:creator"
TAG_CREATED = "skyplane-ops:created-at"
TAG_EXPIRES = "skyplane-ops:expires-at"
NAME_PREFIX = "skyplane-ops-"
AGENT_USER = "skyplane"  # the unprivileged user gateway VMs are logged into and run the agent as


class QuotaError(ProvisionError):
    """A cloud refused for lack of quota or capacity; the message names region and quota."""


def fleet_tags(transfer_id: str, ttl_seconds: float, extra: Mapping[str, str] | None) -> dict:
    """Transfer id, creator, creation and expiry time: what every resource carries."""
    now = datetime.now(UTC)
    return {
        TAG_TRANSFER: transfer_id,
        TAG_CREATOR: f"{getpass.getuser()}@{socket.gethostname()}",
        TAG_CREATED: now.isoformat(timespec="seconds"),
        TAG_EXPIRES: (now + timedelta(seconds=ttl_seconds)).isoformat(timespec="seconds"),
        **(extra or {}),
    }


def created_before(created_at: str | None, older_than_seconds: float | None) -> bool:
    """Whether a resource stamped ``created_at`` (ISO or epoch) is old enough to sweep."""
    if older_than_seconds is None:
        return True
    if not created_at:
        return True  # ours but undated: treat as old
    try:
        when = (
            datetime.fromtimestamp(int(created_at), UTC)
            if created_at.isdigit()
            else datetime.fromisoformat(created_at)
        )
    except ValueError:
        return True
    return (datetime.now(UTC) - when).total_seconds() >= older_than_seconds


_LABEL_BAD = re.compile(r"[^a-z0-9_-]")


def gcp_labels(tags: Mapping[str, str]) -> dict[str, str]:
    """GCP labels allow only ``[a-z0-9_-]`` (63 chars): ``skyplane-ops:created-at`` becomes
    ``skyplane-ops_created-at`` and times become epoch seconds so they stay comparable."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        if key in (TAG_CREATED, TAG_EXPIRES):
            value = str(int(datetime.fromisoformat(value).timestamp()))
        k = _LABEL_BAD.sub("_", key.lower())[:63]
        out[k] = _LABEL_BAD.sub("_", str(value).lower())[:63]
    return out


GCP_LABEL_TRANSFER = gcp_labels({TAG_TRANSFER: "x"}).popitem()[0]
GCP_LABEL_CREATED = "skyplane-ops_created-at"


@dataclass(frozen=True)
class KeyPair:
    """An ed25519 key: private half (OpenSSH PEM) and the public ``TYPE BASE64`` line."""

    private_pem: str
    public: str

    @classmethod
    def generate(cls) -> KeyPair:
        key = ed25519.Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        return cls(pem, public.decode())


def save_client_key(provider: str, transfer_id: str, region: str, key: KeyPair) -> Path:
    """The fleet's SSH client key for one region, 0600 under the state home."""
    path = private_dir("keys") / f"{transfer_id}-{provider}-{region}.pem"
    return write_private(path, key.private_pem.encode())


def cloud_init(
    *,
    user: str,
    authorized_key: str,
    host_key: KeyPair | None = None,
    extra: Mapping = {},
) -> str:
    """``#cloud-config`` (JSON is YAML): one unprivileged login user holding the fleet's client
    key (no sudo, no password, no image default user), password SSH off, and either our host
    key (``host_key``) or a fresh ed25519 one generated on the VM and printed on its console."""
    config: dict = {
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [] if host_key else ["ed25519"],
        "ssh_pwauth": False,
        "disable_root": True,
        "users": [
            {
                "name": user,
                "shell": "/bin/bash",
                "lock_passwd": True,
                "ssh_authorized_keys": [authorized_key],
            },
        ],
        **extra,
    }
    if host_key is not None:
        config["ssh_keys"] = {
            "ed25519_private": host_key.private_pem,
            "ed25519_public": host_key.public,
        }
    return "#cloud-config\n" + json.dumps(config, indent=1, sort_keys=True) + "\n"


def parse_cloud_init(text: str) -> dict:
    """The config ``cloud_init`` wrote (used by the fakes that play the VMs)."""
    body = text.split("\n", 1)[1] if text.startswith("#cloud-config") else text
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("cloud-config is not a mapping")
    return data


def parse_console_host_key(output: str, key_type: str = "ssh-ed25519") -> str | None:
    """The ``TYPE BASE64`` host key cloud-init printed between its SSH HOST KEY KEYS markers
    (the first block: printed at first boot, before anything of ours runs on the VM)."""
    begin, end = "-----BEGIN SSH HOST KEY KEYS-----", "-----END SSH HOST KEY KEYS-----"
    if begin not in output or end not in output.split(begin, 1)[1]:
        return None
    block = output.split(begin, 1)[1].split(end, 1)[0]
    for line in block.splitlines():
        parts = line.strip().split()
        if len(parts) >= 2 and parts[0] == key_type:
            return f"{parts[0]} {parts[1]}"
    return None


def region_of(region: str, provider: str) -> str:
    """``gcp:us-central1`` -> ``us-central1``; other providers are refused clearly."""
    prefix, _, name = region.rpartition(":")
    if prefix != provider:
        raise ProvisionError(
            f"region {region!r} is not a {provider} region; the {provider} backend cannot host it"
        )
    return name
