"""The "replica matches source" asset check, one per replica, blocking by default.

The check is partitioned like its replica: run for a partition, it compares that partition's
folder and its result belongs to that partition only, so one bad day does not paint the
whole replica red (a single-run backfill of a range checks the range, and its description
names the partitions that differ). Blocking means that in a run which materialises the
replica and something downstream of it,
the downstream assets wait for this check and are skipped when it fails: nobody reads a
replica that differs from its source.
"""

from typing import Any

import dagster as dg

from skyplane_ops.dagster.compare import Comparison, compare_stores
from skyplane_ops.dagster.locations import ReplicaDestination, join_uri, prefix_for
from skyplane_ops.dagster.spec import ReplicationSpec, run_partition_keys

CHECK_NAME = "replica_matches_source"


def check_replica(
    context: Any, skyplane: Any, spec: ReplicationSpec, dest: ReplicaDestination
) -> dg.AssetCheckResult:
    """Compare source and replica for the run's partitions (or the whole dataset)."""
    total = Comparison()
    bad: list[str] = []
    for key in run_partition_keys(context, spec.partitions_def):
        prefix = prefix_for(key, spec.partition_prefix) if key is not None else ""
        src_uri = join_uri(spec.source.uri, prefix)
        dst_uri = join_uri(dest.uri, prefix)
        try:
            part = compare_stores(
                skyplane.open_store(src_uri),
                skyplane.open_store(dst_uri),
                checksums=skyplane.check_checksums,
            )
        except Exception as exc:
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description=skyplane.redact(
                    f"cannot compare {dst_uri}: {type(exc).__name__}: {exc}"
                ),
            )
        total.add(part)
        if key is not None and not part.passed:
            bad.append(key)
    meta = total.metadata()
    if bad:
        meta["partitions_differing"] = ", ".join(bad[:50])
    context.log.info(meta["summary"])
    return dg.AssetCheckResult(
        passed=total.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=total.summary(),
        metadata=meta,
    )


def build_replica_checks(
    spec: ReplicationSpec, *, blocking: bool = True, resource_key: str = "skyplane"
) -> list[dg.AssetChecksDefinition]:
    """One ``replica_matches_source`` check per destination of ``spec``."""
    checks: list[dg.AssetChecksDefinition] = []
    for dest in spec.destinations:

        def _make(dest: ReplicaDestination) -> dg.AssetChecksDefinition:
            @dg.asset_check(
                asset=dest.asset_key,
                name=CHECK_NAME,
                blocking=blocking,
                partitions_def=spec.partitions_def,
                required_resource_keys={resource_key},
                description=(
                    "The replica holds exactly the source's objects: same count, same bytes, "
                    "same checksums (native where both stores have one, else CRC32C read back)."
                ),
            )
            def _check(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
                return check_replica(context, getattr(context.resources, resource_key), spec, dest)

            return _check

        checks.append(_make(dest))
    return checks
