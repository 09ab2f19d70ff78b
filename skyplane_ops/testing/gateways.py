"""Gateway processes for the fault tests and their benchmarks: real agents, strangers, kills.

Everything here drives real processes on real sockets: ``python -m gateway_agent serve``
agents, a ``LocalProvisioner`` fleet, the ``skyplane-ops`` CLI. ``benchmarks/strangers.py``
and ``benchmarks/kill_matrix.py`` reuse it with larger loads and the default timeouts.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gateway_agent.auth import load_secret, new_secret, sign_request, write_secret
from gateway_agent.client import GatewayClient
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.testing.transfer import DST, RELAY, SRC, make_plan, read_tree
from skyplane_ops.testing.transfer import agents_of as _agents_of
from skyplane_ops.transfer import DispatchOptions, run_transfer
from skyplane_ops.transfer.progress import Progress

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def wait_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    """Poll ``cond`` until it is truthy (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


# ---- one agent process --------------------------------------------------------------------------


@dataclass
class AgentProc:
    proc: subprocess.Popen[bytes]
    control_port: int
    data_port: int
    secret: bytes
    gateway_id: str
    log: Path

    def client(self, **kw: Any) -> GatewayClient:
        return GatewayClient("127.0.0.1", self.control_port, self.secret, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start_agent(
    tmp: Path,
    name: str = "gw-f-0",
    *args: str,
    secret: bytes | None = None,
    nofile: int | None = None,
) -> AgentProc:
    """Start one agent (optionally with a low descriptor limit) and wait for its ready file."""
    secret_file = tmp / f"{name}.secret"
    write_secret(str(secret_file), secret or new_secret())
    ready = tmp / f"{name}.ready"
    log = tmp / f"{name}.log"

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway_agent", "serve", "--host", "127.0.0.1",
             "--secret-file", str(secret_file), "--ready-file", str(ready),
             "--gateway-id", name, "--region", "test:f", "--log-level", "INFO", *args],
            stdout=fh, stderr=subprocess.STDOUT, preexec_fn=limit, cwd=REPO,
        )  # fmt: skip
    wait_for(lambda: ready.exists() or proc.poll() is not None, 30, f"agent {name} ready")
    if proc.poll() is not None:
        raise AssertionError(f"agent exited: {log.read_text()[-500:]}")
    info = json.loads(ready.read_text())
    return AgentProc(
        proc, info["control_port"], info["data_port"], load_secret(str(secret_file)), name, log
    )


def proc_usage(pid: int) -> dict[str, int]:
    """Resident KiB, threads and open descriptors of a process, from /proc."""
    out = {"rss_kib": 0, "threads": 0, "fds": 0}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                out["rss_kib"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


# ---- strangers ----------------------------------------------------------------------------------


def raw_exchange(port: int, head: bytes, body: bytes = b"", timeout: float = 10.0) -> int | None:
    """Send ``head`` (+ ``body``) and return the status code of the reply (None: closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head + body)
        try:
            data = s.recv(4096)
        except (ConnectionResetError, TimeoutError):
            return None
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data.split()[1])


def hello(port: int) -> dict[str, Any]:
    """The unsigned ``GET /v1/hello`` answer of the gateway at ``port`` (its id and epoch)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/v1/hello")
        answer: dict[str, Any] = json.loads(conn.getresponse().read())
        return answer
    finally:
        conn.close()


@dataclass(frozen=True)
class SignedRequest:
    """A signed control request as it crosses the wire (what an eavesdropper captures)."""

    method: str
    path: str
    body: bytes
    headers: dict[str, str]

    def send(self, port: int) -> tuple[int, dict[str, Any]]:
        """Send it (again) to the gateway at ``port``: (status, JSON answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request(self.method, self.path, body=self.body, headers=self.headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}")
        finally:
            conn.close()


def sign_for(
    port: int,
    secret: bytes,
    gateway_id: str,
    method: str,
    path: str,
    payload: Any = None,
    epoch: str | None = None,
) -> SignedRequest:
    """A request signed for ``gateway_id`` and ``epoch`` (default: the boot epoch the gateway
    at ``port`` announces), as the control plane signs it."""
    body = json.dumps(payload).encode() if payload is not None else b""
    if epoch is None:
        epoch = str(hello(port).get("epoch", ""))
    return SignedRequest(
        method, path, body, sign_request(secret, method, path, body, gateway_id, epoch)
    )


def signed_request(
    port: int, secret: bytes, gateway_id: str, method: str, path: str, payload: Any = None
) -> tuple[int, dict[str, Any]]:
    """One request signed for ``gateway_id`` (which may not be the gateway at ``port``)."""
    return sign_for(port, secret, gateway_id, method, path, payload).send(port)


def announce_body(port: int, nbytes: int, timeout: float = 10.0) -> tuple[int | None, float]:
    """A stranger announcing an ``nbytes`` body with a forged signature, sending none of it:
    the status of the reply and how long it took (a gateway that waited for the body would
    time out here instead of answering)."""
    head = (
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {nbytes}\r\nX-Sky-Timestamp: {time.time():.3f}\r\n"
        f"X-Sky-Expires: {time.time() + 30:.3f}\r\nX-Sky-Nonce: {uuid.uuid4().hex}\r\n"
        f"X-Sky-Gateway: x\r\nX-Sky-Body-SHA256: {'0' * 64}\r\nX-Sky-Signature: {'ab' * 32}\r\n"
        "\r\n"
    ).encode()
    t0 = time.monotonic()
    status = raw_exchange(port, head, timeout=timeout)
    return status, time.monotonic() - t0


@contextmanager
def idle_connections(port: int, n: int) -> Iterator[list[socket.socket]]:
    """``n`` connections that send nothing (closed on exit)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def closed_by_peer(sock: socket.socket) -> bool:
    """True once the server has closed this (idle) connection."""
    sock.settimeout(0.0)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


# ---- transfers through a local fleet ------------------------------------------------------------


def dataset(
    src: Path, dst: Path, big: int = 3, big_mib: int = 8, small: int = 40
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """New versions in ``src``; old versions of some keys already in ``dst`` (old, new)."""
    new: dict[str, bytes] = {}
    for i in range(big):
        new[f"big/{i}.bin"] = os.urandom(big_mib * MiB + 1000 * i)
    for i in range(small):
        new[f"small/{i:03d}.txt"] = os.urandom(20_000 + i)
    old = {k: os.urandom(len(v) // 2 + 1) for k, v in list(new.items())[::5]}
    for root, files in ((src, new), (dst, old)):
        for k, v in files.items():
            (root / k).parent.mkdir(parents=True, exist_ok=True)
            (root / k).write_bytes(v)
    return old, new


def nothing_lost(src: Path, dst: Path, old: dict[str, bytes], new: dict[str, bytes]) -> list[str]:
    """Problems found: a changed source, or a destination object neither old nor new."""
    bad = []
    if read_tree(src) != new:
        bad.append("the source changed")
    for key, blob in read_tree(dst).items():
        if blob != new.get(key) and blob != old.get(key):
            bad.append(f"{key}: partial or foreign content ({len(blob)} bytes)")
    for key in old:
        if not (dst / key).exists():
            bad.append(f"{key}: an existing destination object vanished")
    return bad


@dataclass
class KillCase:
    target: str  # source | relay | sink | cli
    signal: str  # SIGKILL | SIGSTOP | SIGTERM
    outcome: str = ""
    seconds_to_error: float | None = None
    error: str = ""
    bytes_resent_on_resume: int | None = None
    gateways_left_after_s: float | None = None
    problems: list[str] = field(default_factory=list)
    routed_around: list[str] = field(default_factory=list)  # from the completed run's result

    def row(self) -> dict[str, Any]:
        return asdict(self)


REGION_OF = {"source": SRC, "relay": RELAY, "sink": DST}


def slow_hooks(rate_bps: float) -> dict[str, dict[str, float]]:
    """A source that reads at ``rate_bps`` per reader thread (test hook of the agent): the
    source is the bottleneck, so when a process is signalled most bytes are still unread and
    kernel socket buffers cannot carry the copy past a stopped gateway."""
    return {SRC: {"source_rate_bps": rate_bps}}


def _fleet(
    plan: TransferPlan, lease_s: float, home: Path | None = None
) -> tuple[LocalProvisioner, GatewayFleet]:
    prov = LocalProvisioner(
        idle_timeout=300,
        buffer_mib=4,  # small budgets: back-pressure keeps work in every process
        extra_args=["--enable-test-hooks"],
        lease_s=lease_s,
    )
    return prov, prov.provision(plan.vms, transfer_id=f"t-{uuid.uuid4().hex[:10]}")


def _src_bytes_read(fleet: GatewayFleet, job_id: str) -> int:
    g = fleet.in_region(SRC)[0]
    client = GatewayClient(g.host, g.control_port, load_secret(fleet.secret_ref))
    return int(client.status(job_id)["counters"]["bytes_read"])


def resume(
    plan: TransferPlan, dirs: tuple[Path, Path, Path], journaled: int, total: int, lease_s: float
) -> int:
    """Re-run the same copy on a fresh fleet; bytes read again that were already journaled."""
    src, dst, journal = dirs
    prov, fleet = _fleet(plan, lease_s)
    try:
        result = run_transfer(
            plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal,
            part_size=2 * MiB, dispatch=DispatchOptions(lease_linger_s=0),
        )  # fmt: skip
        read = _src_bytes_read(fleet, result.job_id)
    finally:
        prov.deprovision(fleet)
    return max(0, read - (total - journaled))


def gateway_kill_case(
    target: str,
    sig: str,
    root: Path,
    *,
    hop_timeout: float,
    lease_s: float,
    rate_bps: float,
    paths: tuple[list[str], ...] = ([SRC, RELAY, DST],),
    big: int = 3,
    big_mib: int = 8,
    vms: int = 1,
) -> KillCase:
    """Kill one gateway of ``paths`` (src -> relay -> sink) mid-copy; check, resume, check.
    With ``vms`` > 1 the target's region has that many gateways, and the first is killed."""
    case = KillCase(target, sig)
    src, dst, journal = root / "src", root / "dst", root / "journal"
    src.mkdir(parents=True)
    dst.mkdir()
    old, new = dataset(src, dst, big=big, big_mib=big_mib)
    total = sum(len(v) for v in new.values())
    plan = make_plan(*paths)
    plan.vms[REGION_OF[target]] = vms
    prov, fleet = _fleet(plan, lease_s)
    pid = int(fleet.in_region(REGION_OF[target])[0].resources["pid"])
    seen = {"bytes": 0}
    quarter = threading.Event()

    def on_progress(p: Progress) -> None:
        seen["bytes"] = p.bytes_done
        if p.bytes_done >= total // 4:
            quarter.set()

    outcome: dict[str, Any] = {}

    def copy() -> None:
        try:
            outcome["result"] = run_transfer(
                plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal,
                part_size=2 * MiB, progress=on_progress,
                dispatch=DispatchOptions(
                    hop_timeout=hop_timeout, lease_linger_s=0,
                    test_hooks=slow_hooks(rate_bps),
                ),
            )  # fmt: skip
        except TransferError as exc:
            outcome["error"] = exc
        outcome["t"] = time.monotonic()

    worker = threading.Thread(target=copy, daemon=True)
    worker.start()
    try:
        wait_for(lambda: quarter.is_set() or "t" in outcome, 120, "a quarter of the bytes")
        t_kill = time.monotonic()
        os.kill(pid, getattr(signal, sig))
        worker.join(timeout=max(120.0, 4 * hop_timeout))
        if worker.is_alive():
            case.outcome = "hung"
            return case
    finally:
        if sig == "SIGSTOP":
            os.kill(pid, signal.SIGCONT)
        prov.deprovision(fleet)
    if "error" in outcome:
        case.outcome = "failed cleanly"
        case.seconds_to_error = round(outcome["t"] - t_kill, 2)
        case.error = str(outcome["error"])[:300]
    else:
        case.outcome = "completed"  # rerouted or finished before the kill landed
        case.routed_around = list(outcome["result"].routed_around)
    case.problems = nothing_lost(src, dst, old, new)
    if "error" not in outcome and read_tree(dst) != new:
        case.problems.append("completed, but the copy is not byte-identical")
    if "error" in outcome:
        case.bytes_resent_on_resume = resume(
            plan, (src, dst, journal), seen["bytes"], total, lease_s
        )
    if read_tree(dst) != new:
        case.problems.append("the resumed copy is not byte-identical")
    return case


def cli_kill_case(
    sig: str,
    root: Path,
    *,
    hop_timeout: float,
    lease_s: float,
    rate_bps: float,
    big: int = 3,
    big_mib: int = 8,
) -> KillCase:
    """Signal the ``skyplane-ops cp`` process mid-copy; its gateways must not outlive it."""
    case = KillCase("cli", sig)
    src, dst, journal, home = root / "src", root / "dst", root / "journal", root / "home"
    src.mkdir(parents=True)
    dst.mkdir()
    old, new = dataset(src, dst, big=big, big_mib=big_mib)
    total = sum(len(v) for v in new.values())
    plan = make_plan([SRC, RELAY, DST])
    plan_file = root / "plan.json"
    plan_file.write_text(plan.to_json())
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home), "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable, "-m", "skyplane_ops.cli", "cp", f"file://{src}", f"file://{dst}",
        "--src-region", SRC, "--dst-region", DST, "--plan", str(plan_file),
        "--journal-dir", str(journal), "--chunk-mib", "2", "--json",
        "--backend-options", json.dumps({"lease_s": lease_s, "idle_timeout": 300}),
        "--gateway-test-hooks", json.dumps(slow_hooks(rate_bps)),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    journaled = 0
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            try:
                journaled = int(json.loads(line).get("bytes_done", 0))
            except (ValueError, AttributeError):
                continue
            if journaled >= total // 4:
                break
        t_kill = time.monotonic()
        proc.send_signal(getattr(signal, sig))
        tail: list[str] = []
        drain = threading.Thread(target=lambda: tail.extend(proc.stderr or []), daemon=True)
        drain.start()  # keep the pipe drained, keep what it says
        if sig == "SIGTERM":
            proc.wait(timeout=120)
            case.seconds_to_error = round(time.monotonic() - t_kill, 2)
        wait_for(lambda: not _agents_of(home), lease_s + 60, "the CLI's gateways to stop", 0.2)
        case.gateways_left_after_s = round(time.monotonic() - t_kill, 2)
        if sig == "SIGSTOP":  # wake it: it must fail cleanly, its gateways are gone
            proc.send_signal(signal.SIGCONT)
            proc.wait(timeout=120)
            case.seconds_to_error = round(time.monotonic() - t_kill, 2)
        if sig != "SIGKILL":
            drain.join(timeout=10)
            said = [ln.strip() for ln in tail if ln.strip() and '"progress"' not in ln]
            case.error = f"exit status {proc.returncode}: " + (said[-1][:300] if said else "")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait()
        for pid in _agents_of(home):
            os.kill(pid, signal.SIGKILL)
    case.outcome = "gateways stopped" if proc.returncode != 0 else "completed"
    case.problems = nothing_lost(src, dst, old, new)
    if proc.returncode != 0:
        case.bytes_resent_on_resume = resume(plan, (src, dst, journal), journaled, total, lease_s)
    if read_tree(dst) != new:
        case.problems.append("the resumed copy is not byte-identical")
    return case
