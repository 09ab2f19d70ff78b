"""``python -m gateway_agent serve ...``: start one gateway agent (the contract with provisioning).

Writes ``--ready-file`` atomically as JSON ``{"control_port", "data_port", "pid"}`` once both
listeners accept connections; exits when told to, or after ``--idle-timeout`` seconds without
an authenticated control request, or once its lease (``--lease``, renewed through
``POST /v1/lease``) lapses, and powers the machine off then with ``--poweroff-on-idle``.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from gateway_agent import wire
from gateway_agent.agent import Agent
from gateway_agent.auth import load_secret
from gateway_agent.control import ControlServer


def _tame_malloc() -> None:
    """Fix glibc's mmap threshold at 1 MiB: freed chunk-sized buffers go back to the OS at
    once instead of growing the heap (the dynamic threshold would climb to 32 MiB), so the
    resident size tracks the byte budget."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1024 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _write_ready(path: str, payload: dict[str, int]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway_agent")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a gateway agent")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--control-port", type=int, default=0)
    serve.add_argument("--data-port", type=int, default=0)
    serve.add_argument("--secret-file", required=True)
    serve.add_argument("--ready-file", required=True)
    serve.add_argument("--gateway-id", required=True)
    serve.add_argument("--region", required=True)
    serve.add_argument("--idle-timeout", type=float, default=600.0, help="seconds; 0 = off")
    serve.add_argument(
        "--lease",
        type=float,
        default=0.0,
        help="seconds the agent lives without a lease renewal from its control plane; 0 = off",
    )
    serve.add_argument(
        "--io-timeout",
        type=float,
        default=wire.DATA_IO_TIMEOUT_S,
        help="seconds an authenticated data connection may move no bytes",
    )
    serve.add_argument(
        "--max-pending",
        type=int,
        default=64,
        help="connections per listener that may be unauthenticated at once",
    )
    serve.add_argument("--poweroff-on-idle", action="store_true")
    serve.add_argument(
        "--deadline-command",
        default="",
        help="the VM's root deadline helper (e.g. 'sudo -n /usr/local/sbin/skyplane-ops-deadline'"
        "): lease renewals extend it, a lapsed lease powers off through it",
    )
    serve.add_argument("--buffer-mib", type=int, default=1024, help="byte budget for chunks")
    serve.add_argument("--log-level", default="WARNING")
    serve.add_argument(
        "--enable-test-hooks", action="store_true", help="honour job test hooks (tests only)"
    )
    return parser


# Loggers of the SDKs a gateway's stores use (see ``serve``).
SDK_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "azure", "google", "requests")


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s {args.gateway_id} %(levelname)s %(name)s: %(message)s",
    )
    # The cloud SDKs' DEBUG records quote what they sign (an S3 session token is in the string
    # to sign): a gateway's log holds none of that, whatever its level.
    for sdk in SDK_LOGGERS:
        logging.getLogger(sdk).setLevel(max(logging.INFO, logging.getLogger().level))
    _tame_malloc()
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 PID: every thread's stack to the log
    agent = Agent(
        gateway_id=args.gateway_id,
        region=args.region,
        secret=load_secret(args.secret_file),
        host=args.host,
        data_port=args.data_port,
        buffer_bytes=args.buffer_mib * 1024 * 1024,
        idle_timeout=args.idle_timeout,
        poweroff_on_idle=args.poweroff_on_idle,
        test_hooks=args.enable_test_hooks,
        lease_s=args.lease,
        io_timeout=args.io_timeout,
        max_pending=args.max_pending,
        deadline_command=args.deadline_command,
        secret_file=args.secret_file,
    )
    control = ControlServer(args.host, args.control_port, agent, max_pending=args.max_pending)
    agent.start()

    def stop(signum: int, frame: FrameType | None) -> None:
        agent.shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server_thread = threading.Thread(target=control.serve_forever, name="control", daemon=True)
    server_thread.start()
    _write_ready(
        args.ready_file,
        {"control_port": control.port, "data_port": agent.data_port, "pid": os.getpid()},
    )
    agent.stopping.wait()
    agent.wait_stopped()
    agent.wait_power_off()  # a lapsed lease: the power-off request must not die with us
    control.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
