"""Sensors that sweep gateways left behind by runs that died between provision and transfer.

The transfer step deprovisions in ``finally``, which covers failures and terminations inside
it. What it cannot cover is a run whose process dies after provisioning and before the
transfer step starts (a killed worker, a terminated run): those fleets are found again by
their deterministic transfer id and deleted here, from the daemon, using the same resource.
"""

from collections.abc import Sequence

import dagster as dg

from skyplane_ops.dagster.resource import SkyplaneResource
from skyplane_ops.dagster.spec import ReplicationSpec, transfer_id_for


def _sweep(
    context: dg.RunStatusSensorContext, skyplane: SkyplaneResource, specs: Sequence[ReplicationSpec]
) -> None:
    run = context.dagster_run
    selection = run.asset_selection
    for spec in specs:
        keys = {d.asset_key for d in spec.destinations}
        if selection and not (keys & set(selection)):  # empty: unknown, sweep all
            continue
        tid = transfer_id_for(run.run_id, spec.name)
        try:
            deleted = skyplane.deprovision(transfer_id=tid)
        except Exception as exc:
            context.log.error(
                skyplane.redact(f"sweep of {tid} failed: {type(exc).__name__}: {exc}")
            )
            continue
        if deleted:
            context.log.info(f"swept {len(deleted)} leftover resource(s) of {tid}")


def build_leftover_sweepers(
    specs: Sequence[ReplicationSpec], *, name: str = "skyplane_leftover_sweeper"
) -> list[dg.SensorDefinition]:
    """A failure sensor and a cancellation sensor that deprovision by transfer id."""

    @dg.run_failure_sensor(
        name=f"{name}_on_failure",
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Deprovision gateways of skyplane replica runs that failed.",
    )
    def on_failure(context: dg.RunFailureSensorContext, skyplane: SkyplaneResource) -> None:
        _sweep(context, skyplane, specs)

    @dg.run_status_sensor(
        name=f"{name}_on_cancel",
        run_status=dg.DagsterRunStatus.CANCELED,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Deprovision gateways of skyplane replica runs that were terminated.",
    )
    def on_cancel(context: dg.RunStatusSensorContext, skyplane: SkyplaneResource) -> None:
        _sweep(context, skyplane, specs)

    return [on_failure, on_cancel]
