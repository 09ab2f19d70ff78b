"""A detached control-plane process that drives one transfer while its Airflow task is deferred.

``skyplane_ops.api.transfer`` is synchronous: some process must dispatch chunks to the source
gateways, follow their counters, write the journal and verify at the end. For a deferred
``SkyplaneTransferOperator`` or ``SkyplaneCopyOperator`` that process is this driver: the worker
starts it in its own session, hands it the plan, the fleet and the store options on stdin
(never on the command line or on disk), and defers.

Everything the trigger, a retry or ``on_kill`` needs lives in the transfer's state store
(:mod:`skyplane_ops.transfer.state`), not on this host: the driver keeps ``status.json``
current with a heartbeat, snapshots the journal there, stops when a cancellation request
appears and follows a new bandwidth cap written there (``bwlimit_remote``). So the
triggerer, the teardown task and a retry may run on other hosts; a retry on another worker
restores the journal snapshot and resumes. The one host affinity left: the
driver runs on the worker that started it, so that host must outlive the transfer (a
Kubernetes pod deleted on deferral loses it; the trigger then reports ``DriverLost`` once the
heartbeat is stale and a retry resumes from the journal snapshot).

This module never imports Airflow: the driver process loads only the core.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULE = "skyplane_ops.airflow.driver"
TERMINAL_STATES = frozenset({"success", "failed", "cancelled"})
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class DriverHandle:
    """Where a started driver lives: its host and pid (= process group), and its log."""

    pid: int
    host: str
    log_path: str


def run_dir(work_dir: str, transfer_id: str) -> Path:
    """The per-transfer folder on the worker holding the driver's log."""
    return Path(work_dir) / "runs" / transfer_id


def is_alive(pid: int) -> bool:
    """True while ``pid`` is a running (not zombie) skyplane driver process on this host."""
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
    """Stop a local driver and its process group (TERM, then KILL); True if it was running."""
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
    request: Any,
    plan: Mapping[str, Any],
    fleet: Mapping[str, Any],
    env: Mapping[str, str],
    work_dir: str,
    state_uri: str,
    state_options: Mapping[str, Any] | None = None,
    teardown: Mapping[str, Any] | None = None,
    heartbeat_s: float = HEARTBEAT_S,
    warm: Mapping[str, Any] | None = None,
) -> DriverHandle:
    """Start a detached driver for ``request`` (a ``TransferRequest``, whose ``transfer_id``
    and ``journal_dir`` are set); credentials (``env``, ``teardown``) go through a pipe only.

    ``teardown`` (``{"backend": ..., "backend_options": ...}``) makes the driver delete the
    fleet when the transfer ends, whatever the outcome (the one-task copy's contract).
    ``warm``: the task's claim of a parked fleet (``CopyRun.warm``), for the result's idle.
    """
    from skyplane_ops.api import TransferState

    transfer_id = str(request.transfer_id)
    folder = run_dir(work_dir, transfer_id)
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "driver.log"
    state = TransferState(state_uri, transfer_id, state_options)
    # A fresh attempt starts from a fresh status; the journal keeps what was already sent.
    state.clear_cancel()
    state.write_status("starting", host=socket.gethostname())
    spec = {
        "transfer_id": transfer_id,
        "request": request.to_dict(),
        "plan": dict(plan),
        "fleet": dict(fleet),
        "env": dict(env),
        "state_uri": state_uri,
        "state_options": dict(state_options or {}),
        "teardown": dict(teardown) if teardown else None,
        "heartbeat_s": heartbeat_s,
        "warm": dict(warm or {}),
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
    return DriverHandle(pid=proc.pid, host=socket.gethostname(), log_path=str(log_path))


class _Cancelled(BaseException):
    """Raised in the driver's main thread on SIGTERM or a cancellation request."""


class _Beat(threading.Thread):
    """Writes the heartbeat, snapshots the journal and watches for a cancellation request.

    A thread, so the heartbeat goes on while the engine lists, completes uploads or verifies
    (phases without progress callbacks). A cancellation request is turned into SIGTERM to this
    process, which the main thread turns into ``_Cancelled``.
    """

    def __init__(self, state: Any, journal_dir: str, every: float, base: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.state = state
        self.journal_dir = journal_dir
        self.every = every
        self.base = base
        self.progress: dict[str, Any] | None = None
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    def beat(self) -> None:
        with self.lock:
            if self.stopped.is_set():
                return
            extra = {"progress": self.progress} if self.progress else {}
            self.state.write_status("running", **self.base, **extra)
            self.state.save_journal(self.journal_dir)

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.beat()
                reason = self.state.cancel_requested()
            except Exception as exc:  # a flaky store must not kill the transfer
                print(f"heartbeat failed: {exc}", file=sys.stderr, flush=True)
                continue
            if reason is not None:
                print(f"cancellation requested: {reason}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()


def _teardown(
    spec: Mapping[str, Any], fleet: Any, keep_warm: float | None = None, parked: Any = None
) -> dict[str, Any] | None:
    """Delete the fleet when asked to, or park it for ``keep_warm`` (a run that succeeded;
    docs/warm-fleets.md; what the parking says goes into ``parked``); returns an error record
    instead of raising."""
    teardown = spec.get("teardown")
    if not teardown:
        return None
    from skyplane_ops import api

    options = teardown.get("backend_options") or {}
    store = {"state_uri": spec["state_uri"], "state_options": spec.get("state_options")}
    if keep_warm:
        rate = api.vm_usd_per_hour(api.TransferPlan.from_dict(spec["plan"]), fleet)
        got = api.park_warm(
            fleet, keep_warm_s=keep_warm, backend_options=options, usd_per_hour=rate, **store
        )
        if got is not None:
            if parked is not None:
                parked.update(got)
            return None
    try:
        api.deprovision(fleet, backend_options=options or None)
        api.forget_warm(fleet, **store)  # a claimed fleet's records (no-op for others)
    except Exception as exc:
        print(f"deprovision failed: {exc}", file=sys.stderr, flush=True)
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


def run(spec: Mapping[str, Any]) -> int:
    """Run the transfer described by ``spec`` and keep its state store current."""
    import dataclasses

    from skyplane_ops import api
    from skyplane_ops.airflow.summaries import progress_counters
    from skyplane_ops.api import (
        CapFollower,
        CopyRun,
        GatewayFleet,
        RunEvents,
        SkyplaneOpsError,
        TransferPlan,
        TransferRequest,
        TransferState,
    )

    def on_term(signum: int, frame: Any) -> None:
        raise _Cancelled()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # its own: a background start leaves SIGINT ignored
    os.environ.update(spec.get("env") or {})
    state = TransferState(spec["state_uri"], spec["transfer_id"], spec.get("state_options"))
    base = {"pid": os.getpid(), "host": socket.gethostname()}
    request = TransferRequest.from_dict(spec["request"])
    journal_dir = str(request.journal_dir)
    fleet = GatewayFleet.from_dict(spec["fleet"])
    beat = _Beat(state, journal_dir, float(spec.get("heartbeat_s") or HEARTBEAT_S), base)

    class Beating(RunEvents):
        """Progress counters into the heartbeat the trigger reads."""

        wants_progress = True

        def progress(self, update: Any) -> None:
            beat.progress = progress_counters(update)

    metrics_file = api.textfile_path(spec["transfer_id"])  # SKYPLANE_OPS_METRICS_DIR
    metrics = api.RunMetrics(spec["transfer_id"]) if metrics_file else None
    events: RunEvents = Beating() if metrics is None else api.MetricsEvents(metrics, Beating())
    final: Any = None
    outcome: tuple[str, dict[str, Any]]
    code = 0
    try:
        # The snapshot comes back before the first heartbeat, which snapshots the local journal.
        restored = state.restore_journal(journal_dir)
        if restored:
            print(f"restored {restored} journal file(s) from {state.uri}", flush=True)
        fleet = dataclasses.replace(fleet, secret_ref=state.local_secret_ref(fleet.secret_ref))
        beat.beat()
        beat.start()
        # The run sequence on the given plan and fleet: lock, list, move, finish (the fleet
        # is deleted below, whatever the outcome, when the spec says so).
        gateways = api.Gateways(
            backend=fleet.backend, fleet=fleet, plan=TransferPlan.from_dict(spec["plan"])
        )
        # A cap changed through the state store (``skyplane-ops bwlimit --state-store``,
        # ``SkyplaneHook.set_bwlimit``) reaches the run's gateways as cancel.json reaches us.
        with CapFollower(state, api.live_path(spec["transfer_id"])):
            if request.multi:  # several destinations: the fan-out on this plan and fleet
                result = api.FanoutRun(request, gateways, events).run()
            else:
                run = CopyRun(request, gateways, events)
                run.warm = dict(spec.get("warm") or {})  # the task's claim: its idle is ours
                result = final = run.run()
        outcome = ("success", {"result": result.to_dict()})
    except _Cancelled:
        outcome, code = ("cancelled", {}), 3
    except SkyplaneOpsError as exc:
        final = getattr(exc, "result", None)  # a partial run still has its figures
        error = {"type": type(exc).__name__, "message": str(exc), "user_error": True}
        outcome, code = ("failed", {"error": error}), 1
    except Exception as exc:  # reported through the state store; traceback in driver.log
        import traceback

        traceback.print_exc()
        error = {"type": type(exc).__name__, "message": str(exc), "user_error": False}
        outcome, code = ("failed", {"error": error}), 2
    beat.stop()
    if metrics is not None and metrics_file is not None:
        try:
            api.write_final_metrics(metrics, metrics_file, final)
        except Exception as exc:
            print(f"writing the metrics failed: {exc}", file=sys.stderr, flush=True)
    # The final status and the teardown must not be cut short (stop_driver escalates to KILL).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        state.save_journal(journal_dir)
    except Exception as exc:
        print(f"saving the journal failed: {exc}", file=sys.stderr, flush=True)
    keep_warm = request.keep_warm if outcome[0] == "success" else None
    parked: dict[str, Any] = {}
    teardown_error = _teardown(spec, fleet, keep_warm, parked)
    if parked and isinstance(outcome[1].get("result"), dict):  # as the in-task run's result
        outcome[1]["result"]["warm"] = {**outcome[1]["result"].get("warm", {}), **parked}
    if teardown_error is not None:
        outcome[1]["teardown_error"] = teardown_error
    elif spec.get("teardown"):
        try:
            state.forget_secret()
        except Exception as exc:
            print(f"deleting the stored secret failed: {exc}", file=sys.stderr, flush=True)
    state.write_status(outcome[0], **base, **outcome[1])
    return code


def main() -> int:
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    return run(spec)


if __name__ == "__main__":
    sys.exit(main())
