"""Per-transfer secrets kept in 0600 files under ``$SKYPLANE_OPS_HOME``.

A ``GatewayFleet`` travels through XCom and logs, so it only carries ``secret_ref`` (the file
path); the secret itself stays on the control-plane host and is uploaded 0600 to gateways.
"""

from __future__ import annotations

import os
import re
import secrets as _secrets
from pathlib import Path

from skyplane_ops.errors import ProvisionError

_TRANSFER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


def ops_home() -> Path:
    """The control plane's state directory (``$SKYPLANE_OPS_HOME``, default ``~/.skyplane-ops``)."""
    return Path(os.environ.get("SKYPLANE_OPS_HOME") or Path.home() / ".skyplane-ops")


def check_transfer_id(transfer_id: str) -> str:
    """Transfer ids end up in resource names, tags and paths: keep them to a safe alphabet."""
    if not _TRANSFER_ID.match(transfer_id):
        raise ProvisionError(
            f"invalid transfer id {transfer_id!r}: use 1-63 letters, digits, '-' or '_'"
        )
    return transfer_id


def private_dir(*parts: str) -> Path:
    """A 0700 directory under the state home (created on demand)."""
    path = ops_home().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that it is never readable by others, not even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def create_secret(transfer_id: str) -> str:
    """Create (or reuse) the transfer's secret; returns its reference (a 0600 file path)."""
    path = private_dir("secrets") / f"{check_transfer_id(transfer_id)}.secret"
    if not path.exists():
        write_private(path, _secrets.token_hex(32).encode("ascii"))
    return str(path)


def read_secret(secret_ref: str) -> str:
    """The secret a reference points to (hex text)."""
    try:
        return Path(secret_ref).read_text(encoding="ascii").strip()
    except OSError as exc:
        raise ProvisionError(f"cannot read transfer secret {secret_ref}: {exc}") from exc


def secret_bytes(secret_ref: str) -> bytes:
    """The secret as the raw bytes the gateway agent and its client use."""
    text = read_secret(secret_ref)
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise ProvisionError(f"transfer secret {secret_ref} is not hex text") from exc


def delete_secret(secret_ref: str) -> None:
    """Forget a transfer's secret once its fleet is gone (idempotent)."""
    if secret_ref:
        Path(secret_ref).unlink(missing_ok=True)
