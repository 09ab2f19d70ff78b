"""The gateway agent: jobs, the data listener, the byte budget, the lease and idle watchdog.

Every accepted data connection gets its own thread. It must pass the HMAC handshake (bounded
in time) before a single frame is read; a stranger is counted and dropped without touching any
job, and at most ``max_pending`` connections may be mid-handshake at once. Authenticated
connections carry kernel I/O timeouts, so a peer that stops moving bytes frees its thread.
Receivers acquire the gateway's byte budget *before* reading a payload, which is what bounds
memory and propagates back-pressure upstream.

The lease: started with ``lease_s > 0`` the agent stops (and cleans up) once that many seconds
pass without a renewal (``POST /v1/lease``) from its control plane, so a control plane killed
mid-transfer leaves nothing running. The idle watchdog stays as a fallback.

Powering off: an agent runs as an unprivileged user, so it cannot power its VM off itself. A
cloud VM boots with a root-owned deadline (``deadline_command``, the helper cloud-init installs
and sudoers grants): every lease renewal pushes that deadline later (never past its hard cap),
and a lapsed lease asks the helper to power off now. A failure of either is logged, never
ignored; the root deadline still fires on its own, whatever happens to this process.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
import subprocess
import threading
import time
from typing import Any

from gateway_agent import wire
from gateway_agent.auth import new_epoch, write_secret
from gateway_agent.flow import ByteBudget
from gateway_agent.guard import ConnectionGate, accept_forever, set_io_timeout
from gateway_agent.guard import shut as _shut
from gateway_agent.job.base import JobError
from gateway_agent.job.runner import Job

log = logging.getLogger(__name__)

# How far past a renewed lease the VM's root deadline is pushed: the agent's own lapse (and its
# clean shutdown) comes first, the root deadline only if the agent is gone or hung.
DEADLINE_GRACE_S = 120.0


class Agent:
    """State shared by the control API and the data listener of one gateway."""

    def __init__(
        self,
        *,
        gateway_id: str,
        region: str,
        secret: bytes,
        host: str = "127.0.0.1",
        data_port: int = 0,
        buffer_bytes: int = 1024 * 1024 * 1024,
        idle_timeout: float = 600.0,
        poweroff_on_idle: bool = False,
        test_hooks: bool = False,
        lease_s: float = 0.0,
        io_timeout: float = wire.DATA_IO_TIMEOUT_S,
        max_pending: int = 64,
        deadline_command: str = "",
        secret_file: str = "",
    ) -> None:
        self.gateway_id = gateway_id
        self.secret_file = secret_file  # rewritten by ``rekey`` (a restarted agent reads it)
        self.region = region
        self.secret = secret
        # This process's boot epoch: every signed control request names it, so a request made
        # for an earlier process of this gateway (captured before a restart) is refused.
        self.epoch = new_epoch()
        self.budget = ByteBudget(buffer_bytes)
        self.idle_timeout = idle_timeout
        self.poweroff_on_idle = poweroff_on_idle
        # e.g. "sudo -n /usr/local/sbin/skyplane-ops-deadline": "extend S" and "poweroff"
        self.deadline_command = shlex.split(deadline_command)
        self.deadline_failures = 0
        self._powering_off = threading.Event()
        self._power_off_done = threading.Event()
        self.test_hooks = test_hooks
        self.jobs: dict[str, Job] = {}
        self.rejected_connections = 0
        self.started = time.time()
        self.last_control = time.monotonic()
        self.io_timeout = io_timeout
        self.lease_deadline = time.monotonic() + lease_s if lease_s > 0 else None
        self.gate = ConnectionGate(max_pending)
        self.stopping = threading.Event()
        self._stopped = threading.Event()
        self._shutdown_lock = threading.Lock()
        self._lock = threading.Lock()
        self._data_socks: set[socket.socket] = set()
        # (job, path, sending gateway) of the clear frame each inbound connection is reading
        # (see drop_path and leave_out)
        self._frame_path: dict[socket.socket, tuple[str, str, str]] = {}
        self._listener = socket.create_server((host, data_port), backlog=128, reuse_port=False)
        self.data_port: int = self._listener.getsockname()[1]

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="data-accept", daemon=True).start()
        if self.idle_timeout > 0 or self.lease_deadline is not None:
            threading.Thread(target=self._watchdog, name="idle-watchdog", daemon=True).start()

    def touch(self) -> None:
        """Record an authenticated control request (keeps the idle watchdog quiet)."""
        self.last_control = time.monotonic()

    def shutdown(self) -> None:
        """Stop promptly: refuse new work, stop every job (its readers and writers finish the
        call they are in, held chunks are dropped), then wake every blocked thread.

        Idempotent; a concurrent caller returns once the first one is done.
        """
        with self._shutdown_lock:
            if self._stopped.is_set():
                return
            self.stopping.set()
            # Shutting the listening socket down wakes the thread blocked in accept().
            _shut(self._listener)
            try:
                self._listener.close()
            except OSError:
                pass
            self.budget.wake()  # receivers waiting for a lease see ``stopping``
            stoppers = [
                threading.Thread(target=job.stop, name=f"stop-{job.job_id}", daemon=True)
                for job in list(self.jobs.values())
            ]
            for t in stoppers:
                t.start()
            for t in stoppers:
                t.join()
            # Receivers blocked in recv()/splice() on upstream connections wake up and exit.
            with self._lock:
                socks = list(self._data_socks)
            for sock in socks:
                _shut(sock)
            self._stopped.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until ``shutdown`` has finished (jobs stopped); False on timeout."""
        return self._stopped.wait(timeout)

    def renew_lease(self, seconds: float, idle_timeout: float | None = None) -> dict[str, Any]:
        """Extend (or shorten) the lease to ``seconds`` from now; returns what it holds.
        ``idle_timeout`` raises the idle watchdog's (never lowers it, never turns it on): a
        parked gateway gets no control request for its whole ``keep_warm``."""
        if not 0 < seconds <= 86400:
            raise JobError(f"lease seconds must be in (0, 86400], not {seconds}")
        if idle_timeout is not None:
            if not 0 < idle_timeout <= 2 * 86400:
                raise JobError(f"idle_timeout must be in (0, 172800], not {idle_timeout}")
            if self.idle_timeout > 0:
                self.idle_timeout = max(self.idle_timeout, idle_timeout)
        self.lease_deadline = time.monotonic() + seconds
        if self.deadline_command:  # push the VM's root deadline past this lease (in background)
            extend = int(seconds + DEADLINE_GRACE_S)
            threading.Thread(
                target=self._run_deadline, args=("extend", str(extend)), daemon=True
            ).start()
        return {"ok": True, "lease_s": seconds, "idle_timeout_s": self.idle_timeout}

    def _run_deadline(self, *args: str) -> bool:
        """Run the VM's deadline helper; a failure is logged loudly and counted."""
        try:
            done = subprocess.run(
                [*self.deadline_command, *args], capture_output=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.deadline_failures += 1
            log.error("deadline helper %s failed: %s", " ".join(args), exc)
            return False
        if done.returncode != 0:
            self.deadline_failures += 1
            log.error(
                "deadline helper %s failed (exit %d): %s",
                " ".join(args),
                done.returncode,
                done.stderr.decode(errors="replace").strip()[-300:],
            )
            return False
        return True

    def power_off(self) -> bool:
        """Power the machine off: through the root deadline helper when there is one (an
        unprivileged user may not call ``shutdown``), else ``shutdown -h now``. Logged."""
        if self.deadline_command:
            return self._run_deadline("poweroff")
        try:
            done = subprocess.run(["shutdown", "-h", "now"], capture_output=True, check=False)
        except OSError as exc:
            log.error("power-off failed: %s", exc)
            return False
        if done.returncode != 0:
            log.error(
                "power-off refused (exit %d): %s",
                done.returncode,
                done.stderr.decode(errors="replace").strip()[-300:],
            )
            return False
        return True

    def _watchdog(self) -> None:
        periods = [1.0]
        if self.idle_timeout > 0:
            periods.append(max(0.2, self.idle_timeout / 10))
        while not self.stopping.wait(min(5.0, *periods)):
            now = time.monotonic()
            why = ""
            if self.idle_timeout > 0 and now - self.last_control > self.idle_timeout:
                why = f"no control request for {self.idle_timeout:.0f}s"
            deadline = self.lease_deadline
            if deadline is not None and now > deadline:
                why = "the control plane's lease lapsed"
            if why:
                log.warning("%s: shutting down", why)
                if self.poweroff_on_idle:
                    self._powering_off.set()  # before shutdown: serve() waits for the power-off
                self.shutdown()
                if self.poweroff_on_idle:
                    try:
                        self.power_off()
                    finally:
                        self._power_off_done.set()
                return

    def wait_power_off(self, timeout: float = 60.0) -> None:
        """If the watchdog is powering the machine off, wait for it to have asked."""
        if self._powering_off.is_set():
            self._power_off_done.wait(timeout)

    # ---- jobs ----------------------------------------------------------------------------------

    def start_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        job_id = str(spec.get("job_id", ""))
        if not job_id:
            raise JobError("job spec has no job_id")
        largest = spec.get("max_chunk_bytes")
        if isinstance(largest, int) and largest > self.budget.capacity:
            # A chunk is held whole while it is read, relayed or written: one larger than the
            # budget would hold more memory than the budget allows.
            raise JobError(
                f"chunks of up to {largest / 2**20:g} MiB do not fit gateway {self.gateway_id}'s "
                f"byte budget of {self.budget.capacity / 2**20:g} MiB: choose a smaller chunk "
                "size (--chunk-mib) or a larger budget (backend option buffer_mib)"
            )
        with self._lock:
            if job_id in self.jobs:
                return {"job_id": job_id, "started": False, "reason": "already running"}
            job = Job(
                spec,
                gateway_id=self.gateway_id,
                region=self.region,
                secret=self.secret,
                budget=self.budget,
                test_hooks=self.test_hooks,
            )
            self.jobs[job_id] = job
        job.start()
        return {"job_id": job_id, "started": True}

    def job(self, job_id: str) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobError(f"unknown job {job_id!r}") from None

    def drop_path(self, job_id: str, path: str) -> dict[str, Any]:
        """A path of a job was declared dead: the job drops what waits for it, and inbound
        connections caught mid-frame on it (a stopped upstream) are cut, so the budget their
        half-read frames hold goes back to the paths still alive."""
        result = self.job(job_id).drop_path(path)
        with self._lock:
            cut = [s for s, key in self._frame_path.items() if key[:2] == (job_id, path)]
        for sock in cut:
            _shut(sock)
        return {**result, "connections_cut": len(cut)}

    def leave_out(self, job_id: str, gateway_id: str) -> dict[str, Any]:
        """A gateway of a job died while its region has others: send it nothing more, and cut
        its connections caught mid-frame (a stopped sender), so the budget their half-read
        frames hold goes back to the live gateways' frames."""
        result = self.job(job_id).leave_out(gateway_id)
        with self._lock:
            cut = [
                s
                for s, (job, _path, sender) in self._frame_path.items()
                if job == job_id and sender == gateway_id
            ]
        for sock in cut:
            _shut(sock)
        return {**result, "connections_cut": len(cut)}

    def rekey(self, secret: bytes) -> dict[str, Any]:
        """Take a new secret and forget every job (a warm gateway handed to the next transfer:
        the previous one's jobs, their store credentials and its secret are no longer good
        here). The secret file is rewritten too, so a restarted agent comes back with it."""
        if len(secret) < 16:
            raise JobError("a new secret must have at least 16 bytes")
        with self._lock:
            jobs, self.jobs = list(self.jobs.values()), {}
        for job in jobs:
            job.stop()
        if self.secret_file:
            tmp = f"{self.secret_file}.rekey"
            try:
                write_secret(tmp, secret)
                os.replace(tmp, self.secret_file)
            except OSError as exc:  # this process still takes it; a restart would not
                log.warning("cannot rewrite the secret file after a rekey: %s", exc)
        self.secret = secret
        return {"ok": True, "jobs_dropped": len(jobs)}

    def stop_job(self, job_id: str) -> dict[str, Any]:
        job = self.job(job_id)
        job.stop()
        return job.status(len(job.events))

    def health(self) -> dict[str, Any]:
        return {
            "ok": not self.stopping.is_set(),
            "gateway_id": self.gateway_id,
            "epoch": self.epoch,
            "region": self.region,
            "pid": os.getpid(),
            "data_port": self.data_port,
            "uptime_s": round(time.time() - self.started, 3),
            "jobs": {
                j: (job.error or ("stopped" if job.status()["stopped"] else "running"))
                for j, job in self.jobs.items()
            },
            "rejected_connections": self.rejected_connections,
            "pending_data_connections": self.gate.pending,
            "evicted_data_connections": self.gate.evicted,
            "threads": threading.active_count(),
            "open_fds": _open_fds(),
            "lease_left_s": (
                None
                if self.lease_deadline is None
                else round(self.lease_deadline - time.monotonic(), 1)
            ),
            "buffer": {
                "capacity": self.budget.capacity,
                "in_use": self.budget.in_use,
                "peak": self.budget.peak,
            },
            "max_rss_kb": _max_rss_kb(),
            # Per running job: chunks and bytes waiting per next hop, for the sink's writers,
            # and descriptors for its readers (the byte budget above holds them all).
            "queues": {j: job.queues() for j, job in list(self.jobs.items()) if job.running},
        }

    # ---- data listener -------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        accept_forever(self._listener, self._spawn, self.stopping, "data listener")

    def _spawn(self, sock: socket.socket, addr: Any) -> None:
        self.gate.admit(sock)
        try:
            threading.Thread(
                target=self._serve_connection, args=(sock, addr), name="data-in", daemon=True
            ).start()
        except RuntimeError:
            self.gate.release(sock)
            sock.close()

    def _serve_connection(self, sock: socket.socket, addr: Any) -> None:
        with self._lock:
            self._data_socks.add(sock)
        if self.stopping.is_set():  # accepted just before the listener closed
            _shut(sock)
        try:
            self._serve_authenticated(sock, addr)
        finally:
            with self._lock:
                self._data_socks.discard(sock)
                self._frame_path.pop(sock, None)

    def _serve_authenticated(self, sock: socket.socket, addr: Any) -> None:
        with sock:
            wire.tune_socket(sock)
            try:
                session = wire.server_handshake(sock, self.secret)
            except wire.HandshakeError as exc:
                with self._lock:
                    self.rejected_connections += 1
                log.warning("rejected data connection from %s: %s", addr, exc)
                return
            finally:
                self.gate.release(sock)
            set_io_timeout(sock, self.io_timeout)
            pipes: list[tuple[int, int]] = []
            try:
                self._receive_frames(sock, addr, session, pipes)
            finally:
                for r, w in pipes:
                    os.close(r)
                    os.close(w)

    def _receive_frames(
        self, sock: socket.socket, addr: Any, session: wire.Session, pipes: list[tuple[int, int]]
    ) -> None:
        """Read frames until the peer closes; each holds a budget lease (or is spliced)."""
        decompressor: Any = None
        while not self.stopping.is_set():
            try:
                header = wire.read_header(sock)
            except (wire.ConnectionClosed, OSError):
                return
            except wire.HandshakeError as exc:
                log.warning("dropping connection from %s: %s", addr, exc)
                return
            flags, meta_len, raw_len = header[0], header[1], header[3]
            meta_b: bytes | None = None
            meta: dict[str, Any] | None = None
            if not flags & wire.FRAME_SEALED:
                try:
                    meta_b = bytes(wire.recv_exact(sock, meta_len))
                    meta = json.loads(meta_b)
                    if not isinstance(meta, dict):
                        raise ValueError("frame metadata is not an object")
                    with self._lock:
                        self._frame_path[sock] = (
                            str(meta.get("job")),
                            str(meta.get("path")),
                            session.peer,
                        )
                    if self._try_splice(sock, header, meta_b, meta, pipes):
                        continue
                except (wire.ConnectionClosed, wire.UpstreamError, OSError, ValueError):
                    return
            # The decoded chunk's size is what it occupies while held here.
            lease = None
            while lease is None:
                lease = self.budget.lease(raw_len, timeout=0.5, cancel=self.stopping)
                if self.stopping.is_set():
                    if lease is not None:
                        lease.release()
                    return
            if not flags & wire.FRAME_ZSTD:  # the decoded payload is exactly raw_len bytes
                lease.buffer = self.budget.take_buffer(raw_len)
            try:
                if flags & wire.FRAME_ZSTD and decompressor is None:
                    import zstandard

                    decompressor = zstandard.ZstdDecompressor()
                frame = wire.read_body(
                    sock, session, header, decompressor, lease.buffer, self._is_sink, meta_b, meta
                )
            except wire.FrameRefused as exc:  # read whole: the connection is still in step
                lease.release()
                log.warning("refused a frame from %s: %s", addr, exc)
                self._refused(exc.meta, exc)
                continue
            except Exception as exc:  # a broken frame drops the connection
                lease.release()
                log.warning("bad frame from %s: %s", addr, exc)
                if isinstance(exc, wire.HandshakeError):  # not a peer that went away
                    self._refused(meta, exc)
                return
            job = self.jobs.get(str(frame.meta.get("job")))
            if job is None:
                lease.release()
                continue
            job.on_frame(
                frame.meta, frame.payload, frame.crc32c, lease, frame.computed_crc, frame.tag_ok
            )

    def _refused(self, meta: dict[str, Any] | None, exc: Exception) -> None:
        """Tell the job of a frame refused after its metadata was read (a sealed record that
        failed its tag, a malformed body) which chunk it was, so the control plane sends it
        again instead of waiting for it."""
        job = self.jobs.get(str(meta.get("job"))) if isinstance(meta, dict) else None
        if job is not None and meta is not None:
            job.frame_refused(meta, f"frame refused on arrival: {exc}")

    def _try_splice(
        self,
        sock: socket.socket,
        header: tuple[int, int, int, int, int, int, int],
        meta_b: bytes,
        meta: dict[str, Any],
        pipes: list[tuple[int, int]],
    ) -> bool:
        """Relay a clear frame kernel-side when its job allows; True if it was forwarded."""
        if not wire.HAVE_SPLICE or header[0] & wire.FRAME_ZSTD:
            return False
        job = self.jobs.get(str(meta.get("job")))
        if job is None or not job.can_splice(meta):
            return False
        if not pipes:
            pipes.append(wire.make_pipe())
        job.splice_forward(meta, meta_b, header, sock, pipes[0])
        return True

    def _is_sink(self, meta: dict[str, Any]) -> bool:
        job = self.jobs.get(str(meta.get("job")))
        return job is not None and job.is_sink_for(meta)


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


def _max_rss_kb() -> int:
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    except (ImportError, OSError):
        return 0
