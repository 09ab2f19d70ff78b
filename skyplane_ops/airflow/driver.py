"""A detached control-plane process that drives one transfer while its Airflow task is deferred.

``skyplane_ops.api.transfer`` is synchronous: some process must dispatch chunks to the source
gateways, follow their counters, write the journal and verify at the end. For
``SkyplaneTransferOperator(deferrable=True)`` that process is this driver: the worker starts it
in its own session, hands it the plan, the fleet and the store options on stdin (never on the
command line or on disk), and defers; the trigger then only reads the small status file the
driver keeps up to date. The bytes go gateway to gateway and never through the worker, the
triggerer or this driver.

Limits (documented in the README): the driver runs on the worker's host, so the triggerer must
see the status file (same host or a shared ``work_dir``) and the worker host must outlive the
task (Local/Celery executors; not a Kubernetes pod that is deleted on deferral).

This module never imports Airflow: the driver process loads only the core.

Proposed core split (would let the trigger poll the gateways directly, with no driver and no
host affinity); the dispatcher already submits every chunk up front and then only polls
cursors, so the state between polls is small and JSON-friendly::

    api.start_transfer(plan, fleet, src_uri, dst_uri, *, ..., journal_uri) -> TransferHandle
        # manifest, uploads, start jobs, submit chunks; handle = job id, cursors, journal URI
    api.poll_transfer(handle) -> tuple[TransferHandle, Progress, bool]
        # one status round: journal finished chunks, re-submit bad/lost ones, done flag
    api.finish_transfer(handle) -> TransferResult   # complete uploads, verify
    api.cancel_transfer(handle) -> None             # stop the jobs on the gateways
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULE = "skyplane_ops.airflow.driver"
TERMINAL_STATES = frozenset({"success", "failed", "cancelled"})


@dataclass(frozen=True)
class DriverHandle:
    """Where a started driver lives: its pid (= process group) and its status file."""

    pid: int
    status_path: str
    log_path: str


def run_dir(work_dir: str, transfer_id: str) -> Path:
    """The per-transfer folder holding the driver's status and log."""
    return Path(work_dir) / "runs" / transfer_id


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=str, sort_keys=True))
    os.replace(tmp, path)


def read_status(status_path: str) -> dict[str, Any] | None:
    """The driver's last status, or None when it has not written one yet."""
    try:
        with open(status_path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def is_alive(pid: int) -> bool:
    """True while ``pid`` is a running (not zombie) skyplane driver process."""
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    except ChildProcessError:
        pass
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and MODULE in cmdline


def stop_driver(pid: int, grace_seconds: float = 10.0) -> bool:
    """Stop a driver and its process group (TERM, then KILL); True if it was running."""
    if not is_alive(pid):
        return False
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not is_alive(pid):
                return True
            time.sleep(0.05)
    return True


def start_driver(
    *,
    transfer_id: str,
    plan: Mapping[str, Any],
    fleet: Mapping[str, Any],
    src: str,
    dst: str,
    include: Sequence[str],
    exclude: Sequence[str],
    sync: bool,
    journal_dir: str,
    src_options: Mapping[str, Any],
    dst_options: Mapping[str, Any],
    env: Mapping[str, str],
    engine_options: Mapping[str, Any],
    work_dir: str,
) -> DriverHandle:
    """Start a detached driver; credentials (``env``) go through a pipe, never to disk."""
    folder = run_dir(work_dir, transfer_id)
    folder.mkdir(parents=True, exist_ok=True)
    status_path = folder / "status.json"
    log_path = folder / "driver.log"
    # A fresh attempt starts from a fresh status; the journal keeps what was already sent.
    _write_json_atomic(status_path, {"state": "starting", "transfer_id": transfer_id})
    spec = {
        "transfer_id": transfer_id,
        "plan": dict(plan),
        "fleet": dict(fleet),
        "src": src,
        "dst": dst,
        "include": list(include),
        "exclude": list(exclude),
        "sync": sync,
        "journal_dir": journal_dir,
        "src_options": dict(src_options),
        "dst_options": dict(dst_options),
        "env": dict(env),
        "engine_options": dict(engine_options),
        "status_path": str(status_path),
    }
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", MODULE],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(spec).encode())
    proc.stdin.close()
    return DriverHandle(pid=proc.pid, status_path=str(status_path), log_path=str(log_path))


class _Cancelled(Exception):
    """Raised in the driver's main thread when it receives SIGTERM."""


def run(spec: Mapping[str, Any]) -> int:
    """Run the transfer described by ``spec`` and keep ``status_path`` current."""
    from skyplane_ops import api
    from skyplane_ops.airflow.summaries import progress_counters
    from skyplane_ops.errors import SkyplaneOpsError
    from skyplane_ops.planner.plan import TransferPlan
    from skyplane_ops.provision.fleet import GatewayFleet

    status_path = Path(spec["status_path"])
    base = {"transfer_id": spec["transfer_id"], "pid": os.getpid()}
    last_write = 0.0

    def progress(update: Any) -> None:
        nonlocal last_write
        now = time.monotonic()
        if now - last_write >= 0.5:
            last_write = now
            _write_json_atomic(
                status_path,
                {
                    **base,
                    "state": "running",
                    "updated_at": time.time(),
                    "progress": progress_counters(update),
                },
            )

    def on_term(signum: int, frame: Any) -> None:
        raise _Cancelled()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # its own: a background start leaves SIGINT ignored
    os.environ.update(spec.get("env") or {})
    _write_json_atomic(status_path, {**base, "state": "running", "updated_at": time.time()})
    try:
        result = api.transfer(
            TransferPlan.from_dict(spec["plan"]),
            GatewayFleet.from_dict(spec["fleet"]),
            spec["src"],
            spec["dst"],
            src_options=spec["src_options"] or None,
            dst_options=spec["dst_options"] or None,
            include=spec["include"],
            exclude=spec["exclude"],
            journal_dir=spec["journal_dir"],
            sync=spec["sync"],
            progress=progress,
            **(spec.get("engine_options") or {}),
        )
    except _Cancelled:
        _write_json_atomic(status_path, {**base, "state": "cancelled", "updated_at": time.time()})
        return 3
    except SkyplaneOpsError as exc:
        error = {"type": type(exc).__name__, "message": str(exc), "user_error": True}
        _write_json_atomic(status_path, {**base, "state": "failed", "error": error})
        return 1
    except Exception as exc:  # reported through the status file; traceback in driver.log
        import traceback

        traceback.print_exc()
        error = {"type": type(exc).__name__, "message": str(exc), "user_error": False}
        _write_json_atomic(status_path, {**base, "state": "failed", "error": error})
        return 2
    summary = result.to_dict()
    _write_json_atomic(
        status_path, {**base, "state": "success", "updated_at": time.time(), "result": summary}
    )
    return 0


def main() -> int:
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
