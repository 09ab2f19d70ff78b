"""One profiling run: estimate, provision, probe pairs in rounds, journal, deprovision, publish.

``refresh_grid`` is the core function the CLI, the Airflow DAG and the Dagster schedule call.
It never leaves gateways behind: deprovisioning is in a ``finally`` (also on Ctrl-C), and every
measurement is journalled the moment it is taken, so a run that dies keeps what it measured and
the next run (with a freshness window) measures only the rest.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway_agent.probe import DEFAULT_SECONDS, MAX_CONNECTIONS
from skyplane_ops.profiler.budget import CostEstimate, check_budget, estimate_cost
from skyplane_ops.profiler.drivers import ProbeDriver
from skyplane_ops.profiler.errors import ProfilerError
from skyplane_ops.profiler.records import latest_per_pair, to_table, utcnow
from skyplane_ops.profiler.rounds import (
    DEFAULT_CONNECTIONS,
    Progress,
    RefreshResult,
    _deprovision,
    _run_round,
)
from skyplane_ops.profiler.schedule import Pair, all_pairs, schedule_rounds
from skyplane_ops.profiler.store import GridStore
from skyplane_ops.provision.base import Provisioner
from skyplane_ops.provision.fleet import GatewayFleet

log = logging.getLogger(__name__)

# The probing rounds live in rounds; these names stay importable from here.
__all__ = [
    "DEFAULT_CONNECTIONS",
    "Progress",
    "RefreshResult",
    "check_loopback_store",
    "connection_counts",
    "new_run_id",
    "plan_run",
    "refresh_grid",
]


Connections = int | Sequence[int]


def check_loopback_store(backend: str, store_uri: str) -> None:
    """Loopback rates (the ``local`` backend) say nothing about a WAN: they never go into the
    default store that plans read; a user who wants them names a scratch store on purpose."""
    from skyplane_ops.profiler.store import default_store_uri

    if backend == "local" and store_uri.rstrip("/") == default_store_uri().rstrip("/"):
        raise ProfilerError(
            "the local backend measures loopback, which would mislead every plan made on the "
            f"default grid store {store_uri}; pass --store (store_uri=) naming a scratch store"
        )


def new_run_id() -> str:
    """A transfer-id-safe run id (it tags every gateway the run provisions)."""
    return f"prof-{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:6]}"


def connection_counts(connections: Connections) -> tuple[int, ...]:
    """The distinct connection counts to probe at, ascending; each in 1..MAX_CONNECTIONS."""
    counts = (connections,) if isinstance(connections, int) else tuple(connections)
    if not counts:
        raise ProfilerError("give at least one connection count")
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, int):
            raise ProfilerError(f"connection counts must be integers, got {count!r}")
        if not 1 <= count <= MAX_CONNECTIONS:
            raise ProfilerError(f"connections must be in 1..{MAX_CONNECTIONS}, got {count}")
    return tuple(sorted(set(counts)))


def _validate(regions: Sequence[str], connections: Connections, duration_s: float) -> list[str]:
    order = [r.strip() for r in regions if r and r.strip()]
    if len(set(order)) != len(order):
        raise ProfilerError(f"regions repeat: {', '.join(order)}")
    if len(order) < 2:
        raise ProfilerError("profiling needs at least two regions")
    connection_counts(connections)
    if not 0 < duration_s <= 600:
        raise ProfilerError(f"duration must be in (0, 600] seconds, got {duration_s}")
    return order


def _cost_functions(
    profile: Any, budget_usd: float | None
) -> tuple[Callable[[str, str], float], Callable[[str, str], float]]:
    """Modelled rate and egress price per pair from the profile (catalog, prices, grid)."""

    def lookup(what: str, fn: Callable[[str, str], float]) -> Callable[[str, str], float]:
        def get(src: str, dst: str) -> float:
            try:
                return float(fn(src, dst))
            except Exception as exc:
                if budget_usd is None:
                    return 0.0  # no budget to enforce: an unknown pair costs nothing here
                raise ProfilerError(
                    f"cannot estimate the {what} of {src} -> {dst} for the budget check: {exc}"
                ) from exc

        return get

    return (
        lookup("modelled rate", profile.throughput.gbps),
        lookup("egress price", profile.prices.egress_usd_per_gb),
    )


def _default_driver(backend: str, probe_port: int = 0) -> ProbeDriver:
    """Gateway agents host the probes; on local and netns backends, processes started at each
    gateway's network location stand in for agents without the probe endpoint."""
    from skyplane_ops.profiler.drivers import AgentProbeDriver, ProcessProbeDriver

    fallback = ProcessProbeDriver() if backend in ("local", "netns") else None
    return AgentProbeDriver(fallback=fallback, probe_port=probe_port)


@dataclass
class _Prepared:
    order: list[str]
    store: GridStore
    fresh: set[Pair]
    todo: list[Pair]
    rounds: list[list[Pair]]
    estimate: CostEstimate
    profile: Any


def _prepare(
    regions: Sequence[str],
    *,
    connections: Connections = DEFAULT_CONNECTIONS,
    duration_s: float = DEFAULT_SECONDS,
    budget_usd: float | None = None,
    store_uri: str,
    store_options: Mapping[str, Any] | None = None,
    freshness_s: float = 0.0,
    exclusive: bool = False,
    profile: Any = None,
    **_ignored: Any,
) -> _Prepared:
    """Everything decided before provisioning: pairs left, rounds, cost estimate."""
    order = _validate(regions, connections, duration_s)
    if freshness_s < 0:
        raise ProfilerError(f"freshness must not be negative, got {freshness_s}")
    store = GridStore(store_uri, store_options)
    # pyarrow's first array conversion costs seconds (lazy imports): pay it before any
    # gateway is running, not between the first probes and their journal entries.
    to_table([])
    if profile is None:
        from skyplane_ops.profiles import load_default_profile

        profile = load_default_profile()
    now = utcnow()
    # A "no link" row does not make a pair fresh: the next run tries it again.
    known = latest_per_pair([m for m in store.measurements(include_pending=True) if not m.no_link])
    wanted = all_pairs(order)
    fresh = {
        p for p in wanted if freshness_s > 0 and p in known and known[p].age_s(now) < freshness_s
    }
    todo = [p for p in wanted if p not in fresh]
    rate_of, price_of = _cost_functions(profile, budget_usd)
    # Every pair is probed once per connection count, one after the other.
    probe_seconds = duration_s * len(connection_counts(connections))
    estimate = estimate_cost(todo, probe_seconds, rate_of, price_of)
    rounds = schedule_rounds(order, todo, exclusive=exclusive)
    return _Prepared(order, store, fresh, todo, rounds, estimate, profile)


def plan_run(regions: Sequence[str], **options: Any) -> dict[str, Any]:
    """What ``refresh_grid`` would do (pairs, rounds, estimate), without provisioning; takes
    ``refresh_grid``'s keyword arguments (those about gateways are ignored)."""
    prep = _prepare(regions, **options)
    budget_usd = options.get("budget_usd")
    return {
        "regions": prep.order,
        "pairs": len(prep.todo),
        "skipped_fresh": len(prep.fresh),
        "rounds": len(prep.rounds),
        "schedule": [[list(p) for p in rnd] for rnd in prep.rounds],
        "estimate_gb": round(prep.estimate.total_gb, 6),
        "estimate_usd": round(prep.estimate.total_usd, 6),
        "budget_usd": budget_usd,
        "within_budget": budget_usd is None or prep.estimate.total_usd <= budget_usd,
    }


def refresh_grid(
    regions: Sequence[str],
    *,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    connections: Connections = DEFAULT_CONNECTIONS,
    duration_s: float = DEFAULT_SECONDS,
    budget_usd: float | None = None,
    store_uri: str,
    store_options: Mapping[str, Any] | None = None,
    freshness_s: float = 0.0,
    exclusive: bool = False,
    profile: Any = None,
    provisioner: Provisioner | None = None,
    driver: ProbeDriver | None = None,
    progress: Progress | None = None,
    run_id: str | None = None,
    probe_port: int = 0,
) -> RefreshResult:
    """Measure every ordered pair of ``regions`` not measured within ``freshness_s``.

    Each pair is probed at every count in ``connections`` (default 4 and 64), so the grid
    knows both its per-connection and its saturation rate. A pair no probe reaches is stored
    as a "no link" row (gbps 0) and listed in ``failed``; the run raises ``ProfilerError``
    only when nothing at all could be measured.

    Raises ``BudgetExceededError`` (before provisioning anything) when the egress estimate is
    above ``budget_usd``. ``probe_port`` fixes the port gateways listen for probes on (0: the
    one the fleet names in ``resources["probe_port"]``, for backends whose firewall or WAN
    emulation only passes known ports; else any). Publishes a new grid version at
    ``store_uri`` with what was measured, also when the run fails or is interrupted half-way.
    """
    started = time.monotonic()
    check_loopback_store(backend, store_uri)
    options = dict(backend_options or {})
    run_id = run_id or new_run_id()
    emit = progress or (lambda event: None)
    prep = _prepare(
        regions,
        connections=connections,
        duration_s=duration_s,
        budget_usd=budget_usd,
        store_uri=store_uri,
        store_options=store_options,
        freshness_s=freshness_s,
        exclusive=exclusive,
        profile=profile,
    )
    check_budget(prep.estimate, budget_usd)
    order, store, fresh, todo, rounds, estimate, profile = (
        prep.order,
        prep.store,
        prep.fresh,
        prep.todo,
        prep.rounds,
        prep.estimate,
        prep.profile,
    )
    wanted = all_pairs(order)
    result = RefreshResult(
        run_id=run_id,
        store_uri=store_uri,
        regions=order,
        version=None,
        pairs_total=len(wanted),
        skipped_fresh=len(fresh),
        estimate=estimate,
        rounds=len(rounds),
        seconds=0.0,
        backend=backend,
        connections=connection_counts(connections),
    )
    emit(
        {
            "event": "plan",
            "pairs": len(todo),
            "skipped": len(fresh),
            "rounds": len(rounds),
            "estimate_usd": estimate.total_usd,
            "run_id": run_id,
        }
    )
    if not todo:
        result.version = store.publish()
        result.seconds = time.monotonic() - started
        return result

    if provisioner is None:
        from skyplane_ops.provision import get_provisioner

        provisioner = get_provisioner(backend, **options)
    fleet: GatewayFleet | None = None
    try:
        emit({"event": "provision", "regions": order})
        fleet = provisioner.provision(
            {r: 1 for r in order},
            transfer_id=run_id,
            tags={"skyplane-ops:purpose": "profiler", "skyplane-ops:run": run_id},
        )
        gateways = {r: fleet.in_region(r)[0] for r in order}
        # A backend whose firewall or WAN emulation only passes known ports names the one for
        # probes in its fleet (aws: the security group's; netns: the delay relays').
        driver = driver or _default_driver(
            backend, probe_port or int(fleet.resources.get("probe_port") or 0)
        )
        driver.start(fleet)
        for index, rnd in enumerate(rounds, 1):
            emit({"event": "round", "round": index, "rounds": len(rounds), "pairs": rnd})
            _run_round(
                rnd,
                gateways,
                driver,
                result.connections,
                duration_s,
                store,
                result,
                run_id,
                backend,
                options,
                profile,
                emit,
            )
    finally:
        try:
            if driver is not None:
                driver.close()
        finally:
            if fleet is not None:
                emit({"event": "deprovision"})
                _deprovision(provisioner, fleet)
            try:
                result.version = store.publish()
            except Exception:
                log.exception("could not publish the grid version of run %s", run_id)
            result.seconds = time.monotonic() - started
    if result.failed and not result.measurements:
        first = next(iter(result.failed.values()))
        raise ProfilerError(f"every probe failed ({len(result.failed)}); first: {first}")
    return result
