"""Transfer state that lives with the transfer, in a store the user chooses, not on a disk.

A pipeline may plan, provision, transfer, follow and tear down one transfer from different
hosts (Celery or Kubernetes workers, a triggerer elsewhere, a retry on another worker). What
those steps must share is kept as a few small objects under ``<state_uri>/<transfer_id>/``
in any object store the core opens (``file://`` on a shared volume, ``s3://``, ``gs://``,
``az://``):

- ``status.json``: the driver's state (``starting``/``running``/``success``/``failed``/
  ``cancelled``), a heartbeat (``updated_at``), progress counters and the result summary.
  A follower on any host decides "driver lost" from a stale heartbeat, not from a pid.
- ``cancel.json``: a cancellation request; the driver polls it and stops, wherever it runs.
- ``bwlimit.json``: a new bandwidth cap (``skyplane-ops bwlimit ID RATE --state-store URI``);
  the run polls it, wherever it runs, and hands it to its gateways (``bwlimit_remote``).
- ``journal/<name>.jsonl/<offset>``: a snapshot of the resume journal, appended to by the
  driver while it runs and at the end (only what the journal gained, ``journal.snapshot``); a
  retry on another host restores it before resuming. The journal is append-only, so a
  snapshot that lags by a few seconds only re-sends those chunks.
- ``secret``: the fleet's per-transfer secret, so that a transfer started on another host than
  the provisioning one can talk to the gateways. Give the state store the access control you
  give credentials; :meth:`TransferState.delete` removes it at teardown.

Nothing here imports Airflow or Dagster.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.journal.snapshot import JournalSnapshot

STATUS = "status.json"
CANCEL = "cancel.json"
BWLIMIT = "bwlimit.json"
SECRET = "secret"
TERMINAL_STATES = frozenset({"success", "failed", "cancelled"})


def default_state_uri() -> str:
    """``file://$SKYPLANE_OPS_HOME/state``: right for one host, or a volume all hosts mount."""
    home = os.environ.get("SKYPLANE_OPS_HOME") or os.path.join(Path.home(), ".skyplane-ops")
    return Path(home, "state").resolve().as_uri()


def _not_found(exc: Exception) -> bool:
    from gateway_agent.stores.errors import ObjectNotFoundError

    return isinstance(exc, ObjectNotFoundError | FileNotFoundError)


class TransferState:
    """The shared state of one transfer under ``<state_uri>/<transfer_id>/``."""

    def __init__(
        self, state_uri: str, transfer_id: str, options: Mapping[str, Any] | None = None
    ) -> None:
        from gateway_agent.stores import open_store

        if not transfer_id or "/" in transfer_id:
            raise TransferError(f"invalid transfer id for the state store: {transfer_id!r}")
        self.state_uri = state_uri.rstrip("/")
        self.transfer_id = transfer_id
        self.uri = f"{self.state_uri}/{transfer_id}"
        try:
            self._store = open_store(self.uri, dict(options or {}))
        except Exception as exc:
            raise TransferError(f"cannot open the state store {self.uri}: {exc}") from exc
        self._journal = JournalSnapshot(self._store)

    # -- small JSON objects -----------------------------------------------------------------

    def _get_json(self, key: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._store.read(key))
        except Exception as exc:
            if _not_found(exc):
                return None
            if isinstance(exc, ValueError):
                return None  # a torn write of a store without atomic replace
            raise TransferError(f"cannot read {self.uri}/{key}: {exc}") from exc
        return data if isinstance(data, dict) else None

    def _put_json(self, key: str, data: Mapping[str, Any]) -> None:
        body = json.dumps(dict(data), default=str, sort_keys=True).encode()
        try:
            self._store.write(key, body)
        except Exception as exc:
            raise TransferError(f"cannot write {self.uri}/{key}: {exc}") from exc

    def write_status(self, state: str, **fields: Any) -> dict[str, Any]:
        """Replace the status; stamps the transfer id and the heartbeat (``updated_at``)."""
        status = {**fields, "state": state, "transfer_id": self.transfer_id}
        status["updated_at"] = time.time()
        self._put_json(STATUS, status)
        return status

    def read_status(self) -> dict[str, Any] | None:
        """The last status, or None when no driver has written one yet."""
        return self._get_json(STATUS)

    def request_cancel(self, reason: str = "cancelled by the user") -> None:
        """Ask the driver (on whatever host) to stop; it polls this between progress rounds."""
        self._put_json(CANCEL, {"reason": reason, "at": time.time()})

    def cancel_requested(self) -> str | None:
        """The reason of a pending cancellation request, or None."""
        found = self._get_json(CANCEL)
        return None if found is None else str(found.get("reason") or "cancelled")

    def clear_cancel(self) -> None:
        """A new attempt starts without the previous attempt's cancellation."""
        self._delete(CANCEL)

    def set_bwlimit(self, rate: str) -> None:
        """Ask the running transfer (on whatever host) to take the cap ``rate`` (as given,
        with its unit: ``bwlimit.parse_rate`` validated it)."""
        self._put_json(BWLIMIT, {"rate": rate, "at": time.time()})

    def read_bwlimit(self) -> str | None:
        """The last cap asked for through the store (as given), or None."""
        found = self._get_json(BWLIMIT)
        rate = None if found is None else found.get("rate")
        return rate if isinstance(rate, str) else None

    # -- journal and secret -----------------------------------------------------------------

    def save_journal(self, directory: str | Path) -> int:
        """Snapshot every ``*.jsonl`` journal of ``directory``: only what each gained since the
        last save, in bounded pieces (``journal.snapshot``); returns how many."""
        try:
            return self._journal.save(directory)
        except Exception as exc:
            raise TransferError(f"cannot save the journal to {self.uri}: {exc}") from exc

    def restore_journal(self, directory: str | Path) -> int:
        """Download the journal snapshot into ``directory`` where it is longer than the local
        file (a local journal never loses what it has); returns files written."""
        try:
            return self._journal.restore(directory)
        except Exception as exc:
            if _not_found(exc):
                return 0
            raise TransferError(f"cannot restore the journal from {self.uri}: {exc}") from exc

    def save_secret(self, secret_ref: str) -> None:
        """Keep the fleet's secret with the transfer (read from the local reference)."""
        from skyplane_ops.provision.secrets import read_secret

        try:
            self._store.write(SECRET, read_secret(secret_ref).encode("ascii"))
        except Exception as exc:
            raise TransferError(f"cannot save the fleet secret to {self.uri}: {exc}") from exc

    def local_secret_ref(self, secret_ref: str) -> str:
        """A secret reference usable on this host: ``secret_ref`` if it exists here, else the
        secret from the state store written to this host's 0600 secrets folder."""
        from skyplane_ops.provision.secrets import private_dir, write_private

        if secret_ref and Path(secret_ref).is_file():
            return secret_ref
        try:
            secret = self._store.read(SECRET)
        except Exception as exc:
            raise TransferError(
                f"the fleet secret is neither at {secret_ref} on this host nor in the state "
                f"store {self.uri} ({type(exc).__name__}); the provision step must save it"
            ) from exc
        path = private_dir("secrets") / f"{self.transfer_id}.secret"
        write_private(path, secret)
        return str(path)

    def forget_secret(self) -> None:
        """Delete the stored secret once the fleet is gone (idempotent)."""
        self._delete(SECRET)

    # -- cleanup ----------------------------------------------------------------------------

    def _delete(self, key: str) -> None:
        try:
            self._store.delete(key)
        except Exception as exc:
            if not _not_found(exc):
                raise TransferError(f"cannot delete {self.uri}/{key}: {exc}") from exc

    def delete(self) -> int:
        """Remove every object of this transfer (idempotent); returns how many."""
        try:
            keys = [info.key for info in self._store.list("")]
        except Exception as exc:
            if _not_found(exc):
                return 0
            raise TransferError(f"cannot list {self.uri}: {exc}") from exc
        for key in keys:
            self._delete(key)
        return len(keys)


def heartbeat_age(status: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds since the status was written (None when there is no status)."""
    if not status or status.get("updated_at") is None:
        return None
    try:
        return max(0.0, (time.time() if now is None else now) - float(status["updated_at"]))
    except (TypeError, ValueError):
        return None
