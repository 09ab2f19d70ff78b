"""The ``worker`` backend: the machine running the job is its own gateway, in this process.

A transfer the plan's schedule gives to the worker (``planner.schedule``: no VM pays) runs on
the same data-plane code as every other path: an agent (``gateway_agent.Agent`` and its
control API, threads in this process on loopback) whose job reads each chunk from the source
and, its route being this one region, hands it straight to its own sink writers. So the
worker path checks every chunk's checksum, journals, resumes and verifies as any path does,
with no process started, no relay and no data connection. Nothing outlives this process (the
agent is its threads), so there is nothing to record or sweep. Its byte budget is a share of
the machine's memory, which the pipeline running the job also needs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from gateway_agent.agent import Agent
from gateway_agent.control import ControlServer
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    secret_bytes,
)

#: The worker's byte budget: this share of the machine's memory, at most ``MAX_BUDGET``.
MEMORY_SHARE = 1 / 8
MAX_BUDGET = 1 << 30
MIN_BUDGET = 64 << 20


def default_budget_bytes() -> int:
    """A share of this machine's memory (an Airflow worker often has 2-4 GiB), 64 MiB..1 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return MIN_BUDGET
    return int(max(MIN_BUDGET, min(MAX_BUDGET, total * MEMORY_SHARE)))


@dataclass
class _Running:
    agent: Agent
    control: ControlServer


_RUNNING: dict[tuple[str, str], _Running] = {}  # (transfer id, gateway id) -> its agent
_LOCK = threading.Lock()


class WorkerProvisioner:
    """One in-process agent per region asked for (a worker plan asks for its one region)."""

    name = "worker"

    def __init__(self, buffer_mib: int | None = None) -> None:
        if buffer_mib is not None and (isinstance(buffer_mib, bool) or buffer_mib < 1):
            raise ProvisionError(
                f"bad options for backend 'worker': buffer_mib must be >= 1, not {buffer_mib!r}"
            )
        self.budget = default_budget_bytes() if buffer_mib is None else buffer_mib << 20

    def provision(
        self, vms: Mapping[str, int], *, transfer_id: str, tags: Mapping[str, str] | None = None
    ) -> GatewayFleet:
        check_transfer_id(transfer_id)
        secret_ref = create_secret(transfer_id)
        gateways: list[Gateway] = []
        fleet = GatewayFleet.create(transfer_id, self.name, gateways, secret_ref, tags)
        try:
            secret = secret_bytes(secret_ref)
            for region in sorted(r for r, n in vms.items() if n > 0):
                gid = "worker-" + "".join(c if c.isalnum() else "-" for c in region)
                agent = Agent(
                    gateway_id=gid,
                    region=region,
                    secret=secret,
                    buffer_bytes=self.budget,
                    idle_timeout=0,  # it lives as long as this process's run, no longer
                )
                control = ControlServer("127.0.0.1", 0, agent)
                with _LOCK:
                    _RUNNING[(transfer_id, gid)] = _Running(agent, control)
                agent.start()
                threading.Thread(target=control.serve_forever, name=gid, daemon=True).start()
                gateways.append(
                    Gateway(gid, region, "127.0.0.1", control.port, agent.data_port,
                            {"pid": os.getpid(), "in_process": True})
                )  # fmt: skip
        except BaseException as exc:
            _stop(transfer_id, None)
            delete_secret(secret_ref)
            if isinstance(exc, ProvisionError | KeyboardInterrupt):
                raise
            raise ProvisionError(f"starting the worker's gateway failed: {exc}") from exc
        return fleet

    def deprovision(self, fleet: GatewayFleet) -> None:
        """Stop this process's agents of ``fleet`` (another process's died with it)."""
        _stop(fleet.transfer_id, {g.gateway_id for g in fleet.gateways})
        delete_secret(fleet.secret_ref)

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Nothing to sweep: the worker's agents are threads of the run's own process."""
        return []


def _stop(transfer_id: str, gateway_ids: set[str] | None) -> None:
    """Stop the agents of ``transfer_id`` started here (of ``gateway_ids``; None: all)."""
    with _LOCK:
        keys = [
            k
            for k in _RUNNING
            if k[0] == transfer_id and (gateway_ids is None or k[1] in gateway_ids)
        ]
        running = [_RUNNING.pop(k) for k in keys]
    for one in running:
        one.agent.shutdown()
        one.control.stop()


def running_agents() -> int:
    """In-process agents running now (tests check that a run left none)."""
    with _LOCK:
        return len(_RUNNING)
