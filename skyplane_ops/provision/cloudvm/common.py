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
extra groups; the image's default user (``ubuntu``, with passwordless sudo) is not created
because the ``users`` list omits ``default``. Its one privilege is a single sudoers rule: the
root-owned deadline helper's ``extend S`` and ``poweroff`` (``deadline_grant``), nothing else.
What boot needs as root is done by cloud-init itself (its ``write_files``/``runcmd``, passed as
``extra``) before the agent is started.
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


def default_creator() -> str:
    """Who provisions, as every resource's creator tag says (``user@host``); a backend's
    ``creator`` option replaces it (Airflow workers on several hosts: give them one name)."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def fleet_tags(
    transfer_id: str,
    ttl_seconds: float,
    extra: Mapping[str, str] | None,
    creator: str | None = None,
) -> dict:
    """Transfer id, creator, creation and expiry time: what every resource carries."""
    now = datetime.now(UTC)
    return {
        **(extra or {}),
        TAG_TRANSFER: transfer_id,
        TAG_CREATOR: creator or default_creator(),
        TAG_CREATED: now.isoformat(timespec="seconds"),
        TAG_EXPIRES: (now + timedelta(seconds=ttl_seconds)).isoformat(timespec="seconds"),
    }


def _when(stamp: str | None) -> datetime | None:
    """An ISO or epoch-seconds time stamp (None when absent or unreadable)."""
    if not stamp:
        return None
    try:
        if stamp.isdigit():
            return datetime.fromtimestamp(int(stamp), UTC)
        when = datetime.fromisoformat(stamp)
    except (ValueError, OverflowError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def expired(expires_at: str | None) -> bool:
    """Whether a resource's ``expires-at`` stamp (ISO or epoch) has passed."""
    when = _when(expires_at)
    return when is not None and when <= datetime.now(UTC)


def sweepable(
    name: str,
    tags: Mapping[str, str],
    *,
    creator: str,
    transfer_id: str | None,
    older_than_seconds: float | None,
    labels: bool = False,
) -> bool:
    """Whether the sweeper may delete a resource: it must be ours by name (``skyplane-ops-``),
    transfer tag AND creator tag (a resource that merely carries the tag key is never
    touched); then of this transfer (when one is given), and old enough or past its
    ``expires-at``. ``labels``: the tags as GCP labels (``gcp_labels``)."""
    keys = {k: gcp_labels({k: "x"}).popitem()[0] for k in (TAG_TRANSFER, TAG_CREATOR)}
    keys.update({TAG_CREATED: GCP_LABEL_CREATED, TAG_EXPIRES: GCP_LABEL_EXPIRES})
    key = (lambda k: keys[k]) if labels else (lambda k: k)
    value = (lambda k, v: gcp_labels({k: v})[keys[k]]) if labels else (lambda k, v: v)
    if not name.lower().startswith(NAME_PREFIX):
        return False
    if key(TAG_TRANSFER) not in tags or tags.get(key(TAG_CREATOR)) != value(TAG_CREATOR, creator):
        return False
    if transfer_id is not None and tags[key(TAG_TRANSFER)] != value(TAG_TRANSFER, transfer_id):
        return False
    return expired(tags.get(key(TAG_EXPIRES))) or created_before(
        tags.get(key(TAG_CREATED)), older_than_seconds
    )


def created_before(created_at: str | None, older_than_seconds: float | None) -> bool:
    """Whether a resource stamped ``created_at`` (ISO or epoch) is old enough to sweep."""
    if older_than_seconds is None:
        return True
    when = _when(created_at)
    if when is None:
        return True  # ours but undated: treat as old
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
GCP_LABEL_EXPIRES = "skyplane-ops_expires-at"


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


# ---- the VM's root-owned deadline -------------------------------------------------------------
#
# Every cloud VM powers itself off at a deadline that root holds, set at first boot by cloud-init
# (``deadline_cloud_init``): ``start BOOT CAP`` sets the deadline BOOT seconds and the hard cap
# CAP seconds from boot and starts the watcher (a systemd service; a background process where
# there is no systemd). The login user may run exactly two things as root (sudoers, below):
# ``extend S`` pushes the deadline to now + S but never earlier than it is and never past the
# cap; ``poweroff`` powers off now. Nothing lifts the deadline. At the deadline the watcher runs
# the ``before-poweroff`` hook (Azure: the VM deletes itself) and ``shutdown -P now`` (AWS:
# terminates, ``InstanceInitiatedShutdownBehavior``; GCP: ``maxRunDuration`` deletes it anyway).
DEADLINE_HELPER = "/usr/local/sbin/skyplane-ops-deadline"
DEADLINE_DIR = "/var/lib/skyplane-ops"
BEFORE_POWEROFF = "/usr/local/sbin/skyplane-ops-before-poweroff"
DEADLINE_COMMAND = f"sudo -n {DEADLINE_HELPER}"  # what the agent runs (``--deadline-command``)
DEADLINE_SCRIPT = f"""#!/bin/sh
# skyplane-ops: this VM's root-owned power-off deadline (installed by cloud-init at boot).
#   start BOOT_S CAP_S  root, at boot: deadline = now + BOOT_S, hard cap = now + CAP_S (once)
#   extend SECONDS      deadline = min(now + SECONDS, cap) if that is later; never earlier
#   poweroff            power off now
#   watch               root: power off once the deadline passes
set -eu
dir={DEADLINE_DIR}
now=$(date +%s)
number() {{ case "$1" in ''|*[!0-9]*) echo "not a number: $1" >&2; exit 2;; esac; }}
fire() {{
  [ -x {BEFORE_POWEROFF} ] && {BEFORE_POWEROFF} || true
  exec shutdown -P now
}}
case "${{1:-}}" in
start)
  number "$2"; number "$3"
  if [ ! -e "$dir/cap" ]; then
    mkdir -p -m 0755 "$dir"
    echo $((now + $2)) > "$dir/deadline"
    echo $((now + $3)) > "$dir/cap"
  fi
  if [ -d /run/systemd/system ]; then
    systemctl enable --now skyplane-ops-deadline.service
  else
    setsid "$0" watch < /dev/null > /dev/null 2>&1 &
  fi
  ;;
extend)
  number "${{2:-}}"
  cap=$(cat "$dir/cap"); cur=$(cat "$dir/deadline")
  new=$((now + $2))
  [ "$new" -gt "$cap" ] && new=$cap
  if [ "$new" -gt "$cur" ]; then
    echo "$new" > "$dir/deadline.new"; mv "$dir/deadline.new" "$dir/deadline"
  fi
  cat "$dir/deadline"
  ;;
poweroff)
  echo "$now" > "$dir/deadline"
  fire
  ;;
watch)
  while [ "$(date +%s)" -lt "$(cat "$dir/deadline" 2>/dev/null || echo 0)" ]; do sleep 1; done
  fire
  ;;
*)
  echo "usage: $0 start BOOT_S CAP_S | extend SECONDS | poweroff | watch" >&2; exit 2
  ;;
esac
"""
DEADLINE_UNIT = f"""[Unit]
Description=skyplane-ops: power this VM off at its deadline
[Service]
ExecStart={DEADLINE_HELPER} watch
Restart=always
[Install]
WantedBy=multi-user.target
"""


def deadline_grant(user: str) -> str:
    """The one sudoers rule the login user gets: the deadline helper's two verbs, as root."""
    return f"{user} ALL=(root) NOPASSWD: {DEADLINE_HELPER} extend *, {DEADLINE_HELPER} poweroff\n"


def deadline_cloud_init(
    user: str, boot_s: float, cap_s: float, before_poweroff: str | None = None
) -> dict:
    """cloud-config fragment: the root-owned helper, its unit, the sudoers grant, the start."""
    files = [
        {"path": DEADLINE_HELPER, "permissions": "0755", "owner": "root:root",
         "content": DEADLINE_SCRIPT},
        {"path": "/etc/systemd/system/skyplane-ops-deadline.service", "content": DEADLINE_UNIT},
        {"path": "/etc/sudoers.d/90-skyplane-ops", "permissions": "0440", "owner": "root:root",
         "content": deadline_grant(user)},
    ]  # fmt: skip
    if before_poweroff:
        files.append(
            {"path": BEFORE_POWEROFF, "permissions": "0755", "owner": "root:root",
             "content": before_poweroff}
        )  # fmt: skip
    cap = max(int(cap_s), 1)
    return {
        "write_files": files,
        "runcmd": [[DEADLINE_HELPER, "start", str(min(max(int(boot_s), 1), cap)), str(cap)]],
    }


def merge_cloud_config(*parts: Mapping) -> dict:
    """cloud-config fragments merged: lists (``write_files``, ``runcmd``) concatenated."""
    out: dict = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list) and isinstance(out.get(key), list):
                out[key] = [*out[key], *value]
            else:
                out[key] = value
    return out


def cloud_init(
    *,
    user: str,
    authorized_key: str,
    host_key: KeyPair | None = None,
    extra: Mapping = {},
) -> str:
    """``#cloud-config`` (JSON is YAML): one unprivileged login user holding the fleet's client
    key (no sudo of its own, no password, no image default user), password SSH off, and either
    our host key (``host_key``) or a fresh ed25519 one generated on the VM and printed on its
    console. ``extra`` is merged in (``merge_cloud_config``: its ``write_files``/``runcmd`` add
    to ours): it grants what the login user may run as root (``deadline_cloud_init``'s helper,
    nothing else)."""
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
    }
    config = merge_cloud_config(config, extra)
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
