"""``CopyRun``: the one run sequence every face uses.

lock -> check regions -> list (a sync that is up to date ends here: no plan, no gateway)
-> plan -> provision -> move and finish (the engine: ``transfer.run_transfer``) ->
deprovision. ``run()`` does it all; the steps are methods, so a face that splits the run
(the Airflow copy operator hands ``move`` and ``deprovision`` to a detached driver; Dagster
shares one fleet between several runs) calls them itself and still repeats none of them.

What the run is given: the ``TransferRequest`` (what to move, JSON, secret-free), the
``Gateways`` (where gateways come from: a backend and its options, which may hold secrets, or
a running fleet; a plan to follow instead of planning) and ``RunEvents`` (what the face is
told). On the local backend the source's and destination's gateways start ahead of the plan
(every plan has them), while the listing runs, and the plan's step adopts them.

A schedule that wants both the worker and the overlay (``sequence.worker.both_plan``) moves
bytes on the worker's in-process gateway from the start while the overlay's gateways are
provisioned on a thread (``sequence.joining``); its paths join the running job when they are
up, and a provisioning the copy outran is abandoned and deprovisioned.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.secrets import ops_home
from skyplane_ops.sequence.events import RunEvents
from skyplane_ops.sequence.fleet import deprovision, new_transfer_id, provision, start_early
from skyplane_ops.sequence.joining import OverlayStart
from skyplane_ops.sequence.planning import check_regions, plan, warm_planning
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.journal import JournalLock
from skyplane_ops.transfer.listing import Listing, list_request, transfer_lock
from skyplane_ops.transfer.preflight import check_before_run
from skyplane_ops.transfer.report import ReportRun, write_report
from skyplane_ops.transfer.request import TransferRequest
from skyplane_ops.transfer.result import PartialTransferError, TransferResult
from skyplane_ops.transfer.run import run_transfer
from skyplane_ops.transfer.uptodate import sync_check

# Backends whose gateways are cloud VMs (a minute to boot): their runs may go to the worker.
CLOUD_BACKENDS = frozenset({"aws", "gcp", "azure", "mixed"})


@dataclass(frozen=True)
class Gateways:
    """Where a run's gateways come from. Not part of the request: backend options may hold
    secrets, and a fleet is a run's resource, not what the user asked for.

    ``fleet``: a running fleet to use (the plan stays in its regions and gateways); it is
    left running unless ``teardown`` says otherwise. ``plan``: follow this plan instead of
    planning. ``max_per_region``: local backend, gateway processes per region at most.
    ``early``: on the local backend, start the source's and destination's gateways while
    the source is listed."""

    backend: str = "local"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    fleet: GatewayFleet | None = None
    plan: TransferPlan | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    max_per_region: int | None = None
    teardown: bool | None = None
    early: bool = True
    # Where parked (warm) fleets are recorded and found (``sequence.warm``): a state store
    # every host of the pipeline shares; None: ``$SKYPLANE_OPS_HOME/state``.
    state_uri: str | None = None
    state_options: Mapping[str, Any] = field(default_factory=dict)

    def universe(self) -> Any:
        """Where a plan may go: the backend's hosts (ssh inventory, netns grid) and, with a
        running fleet, only its gateways; None: anywhere in the catalog."""
        from skyplane_ops.profiler.universe import FleetUniverse

        universe = FleetUniverse.from_backend(self.backend, self.backend_options)
        if self.fleet is not None:
            universe = FleetUniverse.standing(self.fleet, universe)
        return universe


class CopyRun:
    """One run of a request; ``run()`` is the whole sequence, the other methods its steps."""

    def __init__(
        self,
        request: TransferRequest,
        gateways: Gateways | None = None,
        events: RunEvents | None = None,
        *,
        tuning: DispatchOptions | None = None,
        volume_gb: float | None = None,
    ) -> None:
        if request.multi:  # copying to ``dst`` alone would drop the others silently
            raise TransferError(
                f"this request has {len(request.destinations)} destinations: run it with "
                "FanoutRun (api.copy does), or give one destination"
            )
        self.request = request
        self.volume_gb = volume_gb  # plan for this volume instead of the listing's
        self.gateways = gateways or Gateways()
        if self.gateways.fleet is not None:
            self.gateways = _with_backend(self.gateways, self.gateways.fleet.backend)
        self.events = events or RunEvents()
        self.tuning = tuning
        self.transfer_id = request.transfer_id or (
            self.gateways.fleet.transfer_id if self.gateways.fleet else new_transfer_id("cp")
        )
        self.listing: Listing | None = None
        self.plan: TransferPlan | None = self.gateways.plan
        self.fleet: GatewayFleet | None = self.gateways.fleet
        teardown = self.gateways.teardown
        self.owns_fleet = self.fleet is None if teardown is None else teardown
        self.up_to_date = False  # a sync the listing answered: nothing planned or started
        self.warm: dict[str, Any] = {}  # a warm fleet claimed or parked (``sequence.warm``)
        self._moved = False
        self._early: Any = None
        self._universe: Any = None
        # A run of both: the overlay's plan and gateways, and its provisioning once started.
        self._overlay: tuple[TransferPlan, Gateways] | None = None
        self._joining: OverlayStart | None = None
        self._warm_planned = False  # t0 was a parked fleet's claim (``_planning_kwargs``)

    # -- the whole sequence --------------------------------------------------------------

    def run(self) -> TransferResult:
        """Lock, check, list, plan, provision, move, finish and always deprovision."""
        with self.locked():
            try:
                done = self.list()
                if done is not None:
                    return done
                self.make_plan()
                return self.transfer()
            finally:
                self.close()

    # -- the steps -----------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[JournalLock]:
        """The journal lock, held for the whole run: a second identical run stops (or waits,
        ``request.wait_lock``) before it lists or starts anything. Before it, the places are
        checked where the run runs (``transfer.preflight``): a refused run leaves nothing."""
        if self.plan is None and self.request.src_region and self.request.dst_region:
            self.check_regions()  # a misspelt region fails in milliseconds
        check_before_run(self.request, home=ops_home())  # the places, on this host
        lock = transfer_lock(self.request)
        try:
            self.events.locked(self.request)
            yield lock
        finally:
            lock.release()

    def check_regions(self) -> None:
        regions = [self.request.src_region, self.request.dst_region]
        check_regions([r for r in regions if r], fleet=self.universe())

    def universe(self) -> Any:
        if self._universe is None:
            self._universe = self.gateways.universe()
        return self._universe

    def list(self) -> TransferResult | None:
        """The run's one listing (kept in ``self.listing``), or the result of a sync with
        nothing to copy or delete, found before any plan or gateway."""
        request = self.request
        if self.plan is None and not request.sync:
            # The listing waits on the store: the planner loads meanwhile. Not for a sync,
            # which is often up to date and then must load no planner at all.
            warm_planning(request.planning.gcp_tier)
        if not request.sync:
            self._start_early()  # the listing leaves a core idle: gateways boot on it
        with self.events.phase("list", request.src_uri) as note:
            if request.sync:
                got = sync_check(request, transfer_id=self.transfer_id, progress=self._listed)
                if isinstance(got, TransferResult):
                    note["done"] = f"{got.objects_skipped:,} objects up to date"
                    self.up_to_date = True
                    write_report(request, got, _report_run(got))  # counts; no rows listed
                    return got
                self.listing = got
            else:
                self.listing = list_request(request, progress=self._listed)
            note["done"] = f"{self.listing.volume_gb:.3f} GB to consider"
        self._start_early()  # a sync with work: its gateways boot while it plans
        return None

    def make_plan(self) -> TransferPlan:
        """The route: the given plan, or ``plan`` on the request's planning options for the
        listed volume, within the backend's hosts or the running fleet."""
        request = self.request
        if self.plan is None:
            if not (request.src_region and request.dst_region):
                raise TransferError("src_region and dst_region are required to plan a transfer")
            volume = self.volume_gb
            if volume is None:
                volume = self.listing.volume_gb if self.listing is not None else 0.0
            with self.events.phase("plan", f"{request.src_region} -> {request.dst_region}") as n:
                self.plan = plan(
                    request.src_region,
                    request.dst_region,
                    volume,
                    **self._planning_kwargs(),
                    bwlimit_gbps=request.bwlimit_gbps,
                    backend=self.gateways.backend,
                    backend_options=self.gateways.backend_options,
                    fleet=self.universe(),
                    server_side=self._server_side_ends(),
                )
                self._to_worker()
                n["done"] = (
                    f"{len(self.plan.paths)} path(s), "
                    f"{self.plan.predicted_gbps:.2f} Gbit/s predicted"
                )
        self.events.planned(self.plan)
        return self.plan

    def _server_side_ends(self) -> bool:
        """Whether the stores at both ends copy server-side (``sequence.worker``)."""
        from skyplane_ops.sequence.worker import server_side_ends

        src, dst = self.request.src, self.request.dst
        return server_side_ends(src.uri, dst.uri, src.options, dst.options)

    @property
    def on_worker(self) -> bool:
        """The plan's data path starts on this machine (its worker path, in this process):
        alone (no VM pays), or with the overlay joining as its VMs come up."""
        return self.plan is not None and self.plan.details.get("worker") is not None

    def transfer(self) -> TransferResult:
        """Provision, move and always deprovision (the run after its plan)."""
        try:
            self.provision()
            result = self.move()
        finally:
            self.deprovision()
        return self.with_warm(result)

    def with_warm(self, result: TransferResult) -> TransferResult:
        """The result with the warm fleet's part: the idle time a claimed fleet was billed
        (added to the actual cost) and what parking this fleet costs if nobody claims it."""
        if self.warm:
            result.warm = dict(self.warm)
            result.actual_cost_usd = round(
                result.actual_cost_usd + float(self.warm.get("idle_usd", 0.0)), 6
            )
        return result

    def _to_worker(self) -> None:
        """When the schedule starts no VM, the run is the worker's (``sequence.worker``): the
        gateways started early (VMs whose work is done before they boot) are cancelled."""
        from skyplane_ops.sequence.fleet import WORKER_BACKEND
        from skyplane_ops.sequence.worker import both_plan, worker_plan

        assert self.plan is not None
        if not self._worker_wanted():
            return
        worker = worker_plan(self.plan) if self.fleet is None else None
        if worker is None:
            # A parked fleet is up in a claim's second: the overlay alone, on that fleet.
            warm = self._warm_planned
            both = both_plan(self.plan) if self.fleet is None and not warm else None
            if both is None:
                return
            self._overlay = (self.plan, self.gateways)
            worker = both
        from skyplane_ops.provision import get_provisioner

        # The backend is not used, but bad options of it are still the user's mistake to hear.
        get_provisioner(self.gateways.backend, **dict(self.gateways.backend_options))
        self.plan = worker
        self.gateways = dataclasses.replace(
            self.gateways, backend=WORKER_BACKEND, backend_options={}, early=False
        )
        if self._early is not None:
            early, self._early = self._early, None
            early.cancel()

    def _worker_wanted(self) -> bool:
        """Whether the schedule may give the run to the worker: always with ``vms="none"``;
        with ``"auto"`` on the clouds' backends (VMs take a minute; the worker is placed in a
        region) and wherever a ``boot_delay`` emulates them. The user's own hosts (ssh, netns)
        and the plain local backend keep their gateways: they are up in seconds and the
        machine running the job is in none of their regions (``--no-vms`` still applies)."""
        vms = self.request.planning.vms
        if vms != "auto":
            return vms == "none"
        gateways = self.gateways
        return gateways.backend in CLOUD_BACKENDS or bool(
            gateways.backend_options.get("boot_delay")
        )

    def provision(self) -> GatewayFleet:
        """Start the plan's gateways (adopting those started early), unless a fleet was
        given; a failed start cleans up after itself."""
        assert self.plan is not None, "make_plan() first"
        if self.fleet is None and not self.on_worker:
            self._claim_warm()
        if self.fleet is None and self._overlay is not None:
            self._provision_both()
        elif self.fleet is None:
            gateways = self.gateways
            with self.events.phase("provision", f"{gateways.backend} backend") as note:
                early, self._early = self._early, None
                self.fleet = provision(
                    self.plan,
                    backend=gateways.backend,
                    backend_options=gateways.backend_options,
                    transfer_id=early.transfer_id if early is not None else self.transfer_id,
                    tags=gateways.tags,
                    max_per_region=gateways.max_per_region,
                    early=early,
                )
                note["done"] = f"{len(self.fleet.gateways)} gateway(s)"
        assert self.fleet is not None
        self.events.provisioned(self.fleet)
        return self.fleet

    def _provision_both(self) -> None:
        """The worker's gateway now, the overlay's on a thread (they join when up). The
        worker's first: both fleets share the transfer's secret, which it creates."""
        assert self.plan is not None and self._overlay is not None
        overlay, gateways = self._overlay
        label = str(self.plan.details["worker"])
        with self.events.phase("provision", f"worker now, {gateways.backend} joining") as note:
            self.fleet = provision(
                {label: 1}, backend=self.gateways.backend, transfer_id=self.transfer_id
            )
            self._joining = OverlayStart(
                overlay,
                backend=gateways.backend,
                backend_options=gateways.backend_options,
                transfer_id=self.transfer_id,
                tags=gateways.tags,
                max_per_region=gateways.max_per_region,
            )
            note["done"] = f"worker up; {sum(overlay.vms.values())} VM(s) booting"

    def move(self) -> TransferResult:
        """Move, check, commit and verify (the engine), from the run's listing."""
        assert self.plan is not None and self.fleet is not None, "provision() first"
        request = self.request
        progress = self.events.progress if self.events.wants_progress else None
        with self.events.phase("transfer", f"{request.src_uri} -> {request.dst_uri}") as note:
            partial: PartialTransferError | None = None
            try:
                result = run_transfer(
                    self.plan,
                    self.fleet,
                    request,
                    listing=self.listing,
                    progress=progress,
                    dispatch=self.tuning,
                    arrivals=self._joining,
                )
            except PartialTransferError as exc:
                partial, result = exc, exc.result
            finally:
                self.listing = None  # the engine closed it
            if self._joining is not None:
                result = self._with_schedule(result)
                if partial is not None:
                    partial.result = result
            note["done"] = f"verification {result.verification.get('status', 'n/a')}"
        if partial is not None:
            raise partial
        self._moved = True
        return result

    def _with_schedule(self, result: TransferResult) -> TransferResult:
        """``result`` with what became of the overlay and the bytes each kind of path moved."""
        assert self._joining is not None and self.plan is not None
        label = str(self.plan.details["worker"])
        on_worker = sum(int(p["bytes"]) for p in result.paths if p["regions"] == [label])
        overlay = [p for p in result.paths if p["regions"] != [label]]
        joined = min((float(p.get("joined_s", 0.0)) for p in overlay), default=None)
        summary = {
            **self._joining.summary(joined is not None),
            "joined_s": joined,
            "worker_bytes": on_worker,
            "overlay_bytes": sum(int(p["bytes"]) for p in overlay),
        }
        return dataclasses.replace(result, schedule=summary)

    def _cancel_overlay(self) -> None:
        """Abandon the overlay's provisioning; deprovision whatever of it came up."""
        if self._joining is None or self._overlay is None:
            return
        joining, self._joining = self._joining, None
        fleet = joining.cancel()
        if fleet is not None:
            with self.events.phase("teardown", f"{len(fleet.gateways)} overlay gateway(s)"):
                deprovision(fleet, backend_options=self._overlay[1].backend_options)

    def deprovision(self) -> None:
        """Delete the fleet this run started (a given fleet stays, unless ``teardown``)."""
        self._cancel_overlay()
        if self.fleet is not None and self.owns_fleet:
            fleet, self.fleet = self.fleet, None
            with self.events.phase("teardown", f"{len(fleet.gateways)} gateway(s)") as note:
                if self._moved and self._park_warm(fleet):
                    note["done"] = f"parked for {self.request.keep_warm:g} s"
                    return
                deprovision(fleet, backend_options=self.gateways.backend_options)
                if "claimed" in self.warm:  # its claim's records go with it
                    from skyplane_ops.sequence.warm import forget_warm

                    forget_warm(fleet, self.gateways.state_uri, self.gateways.state_options)

    def detach(self) -> None:
        """Hand the fleet to another process (a driver that moves and deprovisions): this
        run neither deletes it nor keeps its listing."""
        self.owns_fleet = False
        self.close()

    def close(self) -> None:
        """Stop early gateways nobody adopted and drop the listing's scratch file."""
        self._cancel_overlay()
        if self._early is not None:
            early, self._early = self._early, None
            early.cancel()
        if self.listing is not None:
            listing, self.listing = self.listing, None
            listing.close()

    # -- helpers -------------------------------------------------------------------------

    def _planning_kwargs(self) -> dict[str, Any]:
        """The request's planner options; with a parked fleet that could serve this run and
        no t0 given, t0 is a claim's (``sequence.warm.warm_t0``), not the backend's boot."""
        from skyplane_ops.sequence.warm import warm_t0

        kwargs = self.request.planning.kwargs()
        gateways, request = self.gateways, self.request
        if kwargs.get("provisioning_seconds") is None and self.fleet is None:
            t0 = warm_t0(
                [str(request.src_region), str(request.dst_region)],
                backend=gateways.backend,
                backend_options=gateways.backend_options,
                state_uri=gateways.state_uri,
                state_options=gateways.state_options,
            )
            if t0 is not None:
                kwargs["provisioning_seconds"] = t0
                self._warm_planned = True
        return kwargs

    def _claim_warm(self) -> None:
        """Take a parked fleet that fits the plan instead of booting one (``sequence.warm``);
        none, a lost race or a dead gateway leave the run to boot its own."""
        from skyplane_ops.sequence.warm import claim_warm

        assert self.plan is not None
        gateways = self.gateways
        got = claim_warm(
            self.plan,
            backend=gateways.backend,
            backend_options=gateways.backend_options,
            claimant=self.transfer_id,
            max_per_region=gateways.max_per_region,
            state_uri=gateways.state_uri,
            state_options=gateways.state_options,
        )
        if got is None:
            return
        with self.events.phase("provision", f"{gateways.backend} backend, warm") as note:
            self.fleet, self.warm = got
            if self._early is not None:
                early, self._early = self._early, None
                early.cancel()
            note["done"] = (
                f"claimed warm fleet {self.warm['claimed']} "
                f"(parked {self.warm['idle_s']:.0f} s, ${self.warm['idle_usd']:.4f})"
            )

    def _park_warm(self, fleet: GatewayFleet) -> bool:
        """Park the fleet for ``keep_warm`` instead of deleting it (False: delete it)."""
        from skyplane_ops.sequence.warm import park_warm, vm_usd_per_hour

        keep = self.request.keep_warm
        if not keep or self.plan is None:
            return False
        parked = park_warm(
            fleet,
            keep_warm_s=keep,
            backend_options=self.gateways.backend_options,
            usd_per_hour=vm_usd_per_hour(self.plan, fleet),
            state_uri=self.gateways.state_uri,
            state_options=self.gateways.state_options,
        )
        if parked is None:
            return False
        self.warm = {**self.warm, **parked}
        return True

    def _listed(self, src_objects: int, dst_objects: int) -> None:
        self.events.listing(src_objects, dst_objects)

    def _start_early(self) -> None:
        """Local backend: start the source's and destination's gateways now (every plan has
        them); provision adopts them. A failure here is provision's to report."""
        request, gateways = self.request, self.gateways
        wanted = (
            gateways.early
            and gateways.backend == "local"
            # An emulated VM start-up stands for a cloud, where nothing starts before the plan
            # (which may start no VM at all).
            and not gateways.backend_options.get("boot_delay")
            and request.planning.vms != "none"  # the worker's run starts no gateway
            and self.fleet is None
            and self._early is None
            and request.src_region
            and request.dst_region
        )
        if not wanted:
            return
        try:
            self._early = start_early(
                [str(request.src_region), str(request.dst_region)],
                transfer_id=self.transfer_id,
                backend_options=gateways.backend_options,
            )
        except Exception:
            self._early = None


def _report_run(result: TransferResult) -> ReportRun:
    return ReportRun(result.transfer_id, result.job_id, result.src_uri, result.dst_uri)


def _with_backend(gateways: Gateways, backend: str) -> Gateways:
    """A running fleet's backend is the run's backend."""
    return (
        gateways if gateways.backend == backend else dataclasses.replace(gateways, backend=backend)
    )


def run_copy(
    request: TransferRequest,
    gateways: Gateways | None = None,
    events: RunEvents | None = None,
    *,
    tuning: DispatchOptions | None = None,
) -> TransferResult:
    """The whole sequence for ``request``: ``CopyRun(...).run()``."""
    return CopyRun(request, gateways, events, tuning=tuning).run()
