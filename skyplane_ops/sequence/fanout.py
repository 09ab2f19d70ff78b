"""``FanoutRun``: one source copied to several destinations (a request with ``destinations``).

One plan for all destinations (the multicast planner: ``plan`` with several regions), one
fleet for it, then one ``CopyRun`` per destination on that fleet, each with its sub-plan (the
multicast plan's routes that end at that destination). Each destination therefore keeps what
a single copy has: its own lock, journal, atomic commit and verification. A destination that
fails is reported and the others go on. A re-run resumes each destination from its own
journal, and syncs the destinations an unfinished run reached (``fanout_record``): each
destination gets only what it lacks.

Before those runs, the tree pass (``transfer.tree_pass``) sends every chunk once down the
plan's trees (read once at the source, forwarded to every next hop, written at each sink) and
journals each sink's chunks in its destination's journal: the runs then send only what it did
not land, and commit and verify each destination as a single copy does.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.sequence import fanout_record
from skyplane_ops.sequence.copy_run import CopyRun, Gateways
from skyplane_ops.sequence.events import RunEvents
from skyplane_ops.sequence.fleet import deprovision, new_transfer_id, provision
from skyplane_ops.sequence.planning import check_regions, plan
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.request import TransferRequest
from skyplane_ops.transfer.result import PartialTransferError, TransferResult, warm_lines
from skyplane_ops.transfer.tree_pass import TreePassResult, tree_pass

log = logging.getLogger(__name__)


@dataclass
class FanoutResult:
    """Per destination, in the request's order: its ``TransferResult`` or its one-line error.
    Small, like a ``TransferResult`` (for XCom and Dagster metadata)."""

    transfer_id: str
    src_uri: str
    results: dict[str, TransferResult] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    # The fleet's warm part, as ``TransferResult.warm`` (claimed: billed once, here, not
    # in each destination's result; parked).
    warm: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``ok`` (every destination copied and verified), ``partial`` (some did) or
        ``failed``."""
        ok = [d for d in self.order if d in self.results and self.results[d].status == "ok"]
        return "ok" if len(ok) == len(self.order) else "partial" if self.results else "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "transfer_id": self.transfer_id,
            "src_uri": self.src_uri,
            "status": self.status,
            "destinations": [
                {"dst_uri": d, **self.results[d].to_dict()}
                if d in self.results
                else {"dst_uri": d, "status": "failed", "error": self.errors.get(d, "")}
                for d in self.order
            ],
            **({"warm": dict(self.warm)} if self.warm else {}),
        }

    def summary(self) -> str:
        lines = [f"{len(self.order)} destinations: {self.status}"]
        for d in self.order:
            if d in self.results:
                lines.append(f"  {d}: {self.results[d].summary().splitlines()[0]}")
            else:
                lines.append(f"  {d}: FAILED: {self.errors.get(d, '')}")
        return "\n".join(lines + warm_lines(self.warm))


class FanoutError(TransferError):
    """Some destinations were not copied (each one's error is in ``result.errors``); the
    others are committed and verified (``result.results``)."""

    def __init__(self, result: FanoutResult) -> None:
        failed = [d for d in result.order if d not in result.results or d in result.errors]
        first = result.errors.get(failed[0], "") if failed else ""
        super().__init__(
            f"{len(failed)} of {len(result.order)} destinations not copied "
            f"({', '.join(failed)}): {first}; the others are committed: re-run to resume"
        )
        self.result = result


def destination_plan(plan: TransferPlan, region: str) -> TransferPlan:
    """The part of a multicast plan that reaches ``region``: its routes there (shares made
    whole), their hops and VMs, and a 1/N share of the plan's predicted costs."""
    if len(plan.dsts) == 1:
        return plan
    if region not in plan.dsts:
        raise TransferError(f"the plan has no destination {region} ({', '.join(plan.dsts)})")
    paths = [p for p in plan.paths if p.regions and p.regions[-1] == region and p.share > 0]
    if not paths:
        paths = [dataclasses.replace(plan.paths[0], regions=(plan.src, region), share=1.0)]
    total = sum(p.share for p in paths) or 1.0
    paths = [dataclasses.replace(p, share=p.share / total) for p in paths]
    edges = {e for p in paths for e in zip(p.regions, p.regions[1:], strict=False)}
    regions = {r for p in paths for r in p.regions}
    n = len(plan.dsts)
    return dataclasses.replace(
        plan,
        dsts=(region,),
        paths=paths,
        hops=[h for h in plan.hops if (h.src, h.dst) in edges],
        vms={r: v for r, v in plan.vms.items() if r in regions},
        egress_cost_usd=plan.egress_cost_usd / n,
        vm_cost_usd=plan.vm_cost_usd / n,
        details={"destination_of": list(plan.dsts)},
    )


class FanoutRun:
    """A several-destination request's run: plan once, provision once, one ``CopyRun`` per
    destination, always deprovision. ``run()`` returns a ``FanoutResult`` or raises
    ``FanoutError`` (carrying it) after every destination had its turn."""

    def __init__(
        self,
        request: TransferRequest,
        gateways: Gateways | None = None,
        events: RunEvents | None = None,
        *,
        tuning: DispatchOptions | None = None,
    ) -> None:
        if not request.multi:
            raise TransferError("FanoutRun is for several destinations; use CopyRun for one")
        self.request = request
        self.gateways = gateways or Gateways()
        self.events = events or RunEvents()
        self.tuning = tuning
        self.transfer_id = request.transfer_id or (
            self.gateways.fleet.transfer_id if self.gateways.fleet else new_transfer_id("cp")
        )
        self.plan: TransferPlan | None = self.gateways.plan
        self.fleet: GatewayFleet | None = self.gateways.fleet
        self.tree: TreePassResult | None = None  # what the tree pass did
        self.warm: dict[str, Any] = {}  # a warm fleet claimed or parked (``sequence.warm``)

    def run(self) -> FanoutResult:
        requests = self.request.per_destination()
        regions = self._regions(requests)
        self.make_plan(regions)
        owns = self.fleet is None if self.gateways.teardown is None else self.gateways.teardown
        out = FanoutResult(self.transfer_id, self.request.src_uri)
        out.order = [r.dst_uri for r in requests]
        before = fanout_record.reached_before(self.request)
        requests = [
            r.replace(sync=True) if r.dst_uri in before and not r.sync else r for r in requests
        ]  # those reached by the unfinished run
        try:
            fleet = self.provision()
            self.tree = self.send_down_trees(fleet, requests, regions)
            for req, region in zip(requests, regions, strict=True):
                assert self.plan is not None
                gateways = dataclasses.replace(
                    self.gateways,
                    backend=fleet.backend,
                    fleet=fleet,
                    plan=destination_plan(self.plan, region),
                    teardown=False,
                    early=False,
                )
                run = CopyRun(req, gateways, self.events, tuning=self.tuning)
                try:
                    out.results[req.dst_uri] = run.run()
                except PartialTransferError as exc:  # some objects: said, the rest committed
                    out.results[req.dst_uri] = exc.result
                    out.errors[req.dst_uri] = str(exc).splitlines()[0]
                except TransferError as exc:  # this destination only: the others go on
                    out.errors[req.dst_uri] = str(exc).splitlines()[0]
        finally:
            if self.fleet is not None and owns:
                self.release(succeeded=out.status == "ok")
            out.warm = dict(self.warm)
        reached = set(out.results) | set(out.errors) | before
        fanout_record.record(self.request, reached if out.errors else None)
        if out.errors:
            raise FanoutError(out)
        return out

    def release(self, *, succeeded: bool) -> None:
        """Park the fleet for ``keep_warm`` after a run in which every destination was
        copied, else delete it (and a claimed fleet's records in the pool)."""
        from skyplane_ops.sequence.warm import forget_warm, park_warm, vm_usd_per_hour

        assert self.fleet is not None
        fleet, self.fleet = self.fleet, None
        gw, keep = self.gateways, self.request.keep_warm
        with self.events.phase("teardown", f"{len(fleet.gateways)} gateway(s)") as note:
            if succeeded and keep and self.plan is not None:
                parked = park_warm(
                    fleet,
                    keep_warm_s=keep,
                    backend_options=gw.backend_options,
                    usd_per_hour=vm_usd_per_hour(self.plan, fleet),
                    state_uri=gw.state_uri,
                    state_options=gw.state_options,
                )
                if parked is not None:
                    self.warm = {**self.warm, **parked}
                    note["done"] = f"parked for {keep:g} s"
                    return
            deprovision(fleet, backend_options=gw.backend_options)
            if "claimed" in self.warm:
                forget_warm(fleet, gw.state_uri, gw.state_options)

    def prepare(self) -> GatewayFleet:
        """Plan and provision only: a deferred face's part on its worker (the driver then
        runs ``run()`` on this plan and fleet, and deletes the fleet)."""
        self.make_plan(self._regions(self.request.per_destination()))
        return self.provision()

    def send_down_trees(
        self, fleet: GatewayFleet, requests: list[TransferRequest], regions: list[str]
    ) -> TreePassResult:
        """The tree pass (``transfer.tree_pass``): every chunk read once at the source and
        sent down the plan's trees, journaled per destination; the per-destination runs then
        send only what it did not land. Best effort: whatever stops it, they finish."""
        assert self.plan is not None
        detail = f"{self.request.src_uri} -> {len(requests)} destinations"
        with self.events.phase("multicast", detail) as note:
            try:
                tree = tree_pass(
                    self.plan,
                    fleet,
                    requests,
                    regions,
                    options=self.tuning,
                    progress=self.events.progress if self.events.wants_progress else None,
                )
            except Exception as exc:  # the destinations' runs copy it all, as without it
                log.warning("tree pass stopped: %s: each destination is copied on its own", exc)
                tree = TreePassResult(why_not=str(exc).splitlines()[0])
            note["done"] = (
                f"{sum(tree.landed.values())} chunk(s) to {len(tree.served)} destinations"
                if tree.served
                else f"not used: {tree.why_not}"
            )
        return tree

    def _regions(self, requests: list[TransferRequest]) -> list[str]:
        """Each destination's region: the request's, or the given plan's destinations; a
        given plan must name every destination's region (checked before anything starts)."""
        regions = list(self.request.dst_regions)
        if self.plan is not None:
            if not regions and len(self.plan.dsts) == len(requests):
                regions = list(self.plan.dsts)
            if sorted(self.plan.dsts) != sorted(regions):
                raise TransferError(
                    f"the plan goes to {', '.join(self.plan.dsts)}, not to every destination's "
                    f"region ({', '.join(regions) or 'none given'}): plan them together"
                )
        if regions:
            return regions
        raise TransferError(
            "dst_regions (--dst-region): one region per destination, in order, to plan a copy "
            "to several destinations"
        )

    def make_plan(self, regions: list[str]) -> TransferPlan:
        """One multicast plan for every destination, sized by the source's listing."""
        request = self.request
        if self.plan is None:
            if not request.src_region:
                raise TransferError("src_region is required to plan a transfer")
            check_regions([request.src_region, *regions], fleet=self.gateways.universe())
            # The first destination's listing sizes the plan (each run lists its own again).
            sizing = CopyRun(
                request.per_destination()[0],
                dataclasses.replace(self.gateways, early=False),
                self.events,
            )
            with sizing.locked():
                try:
                    sizing.list()
                    volume = sizing.listing.volume_gb if sizing.listing is not None else 0.0
                finally:
                    sizing.close()
            with self.events.phase("plan", f"{request.src_region} -> {', '.join(regions)}") as n:
                self.plan = plan(
                    request.src_region,
                    regions,
                    volume,
                    **request.planning.kwargs(),
                    backend=self.gateways.backend,
                    fleet=self.gateways.universe(),
                )
                n["done"] = f"{len(self.plan.paths)} path(s) to {len(regions)} destinations"
        self.events.planned(self.plan)
        return self.plan

    def provision(self) -> GatewayFleet:
        """One fleet for every destination's routes, unless one was given."""
        assert self.plan is not None
        if self.fleet is None:
            self._claim_warm()
        if self.fleet is None:
            gw = self.gateways
            with self.events.phase("provision", f"{gw.backend} backend") as note:
                self.fleet = provision(
                    self.plan,
                    backend=gw.backend,
                    backend_options=gw.backend_options,
                    transfer_id=self.transfer_id,
                    tags=gw.tags,
                    max_per_region=gw.max_per_region,
                )
                note["done"] = f"{len(self.fleet.gateways)} gateway(s)"
        self.events.provisioned(self.fleet)
        return self.fleet

    def _claim_warm(self) -> None:
        """Take a parked fleet that fits the plan instead of booting (``sequence.warm``)."""
        from skyplane_ops.sequence.warm import claim_warm

        assert self.plan is not None
        gw = self.gateways
        got = claim_warm(
            self.plan,
            backend=gw.backend,
            backend_options=gw.backend_options,
            claimant=self.transfer_id,
            max_per_region=gw.max_per_region,
            state_uri=gw.state_uri,
            state_options=gw.state_options,
        )
        if got is not None:
            with self.events.phase("provision", f"{gw.backend} backend, warm") as note:
                self.fleet, self.warm = got
                note["done"] = (
                    f"claimed warm fleet {self.warm['claimed']} "
                    f"(parked {self.warm['idle_s']:.0f} s, ${self.warm['idle_usd']:.4f})"
                )
