"""Provider metadata for the ``apache_airflow_provider`` entry point.

Airflow reads this without importing the hook, so the ``skyplane`` connection form (its
fields and which standard fields are hidden) is declared here, not in hook methods.
"""

from __future__ import annotations

from typing import Any

INTEGRATION = "Skyplane"

# The provisioner backends (kept in step with skyplane_ops.provision.BACKENDS by a test).
BACKENDS = ("local", "ssh", "aws", "gcp", "azure", "mixed", "netns")
# A JSON editor in the connection form (Airflow renders "object" fields as JSON widgets).
_JSON = {"type": ["object", "null"], "format": "json"}

CONN_FIELDS: dict[str, dict[str, Any]] = {
    "backend": {
        "label": "Provisioner backend",
        "description": "Where gateways run: local processes, SSH hosts, cloud VMs, netns testbed.",
        "schema": {"type": ["string", "null"], "default": "local", "enum": list(BACKENDS)},
    },
    "backend_options": {
        "label": "Backend options",
        "description": 'Options of the backend, e.g. {"hosts": [...]} for ssh or '
        '{"subnet_id": "..."} for aws.',
        "schema": dict(_JSON),
    },
    "secret_option": {
        "label": "Backend option that receives the password",
        "description": "The password field is passed to the backend under this option name.",
        "schema": {"type": ["string", "null"]},
    },
    "max_vms_per_region": {
        "label": "Max gateway VMs per region",
        "schema": {"type": ["integer", "null"], "minimum": 1},
    },
    "max_connections_per_vm": {
        "label": "Max TCP connections per VM",
        "schema": {"type": ["integer", "null"], "minimum": 1},
    },
    "max_cost_usd": {
        "label": "Cost ceiling per transfer (USD)",
        "description": "Used when a plan task gives no bound of its own.",
        "schema": {"type": ["number", "null"]},
    },
    "tags": {
        "label": "Tags",
        "description": 'Extra tags on every resource a transfer creates, e.g. {"team": "data"}.',
        "schema": dict(_JSON),
    },
    "grid_store": {
        "label": "Measured throughput grid",
        "description": (
            "Path or URI of the grid store the profiler publishes to and plans read "
            "(default: <work_dir>/grid)."
        ),
        "schema": {"type": ["string", "null"]},
    },
    "profile_overrides": {
        "label": "Profile overrides",
        "description": "A profile overrides file (YAML/JSON path) laid over the default regions, "
        "prices and grid.",
        "schema": {"type": ["string", "null"]},
    },
    "work_dir": {
        "label": "Work directory",
        "description": "Plans, journals and driver logs on each worker "
        "(default ~/.skyplane-ops/airflow).",
        "schema": {"type": ["string", "null"]},
    },
    "state_store": {
        "label": "Transfer state store",
        "description": "URI every worker and the triggerer reach (s3://, gs://, az://, file:// on "
        "a shared volume): status, heartbeat, journal snapshot and fleet secret of each transfer. "
        "Default file://<work_dir>/state (one host only).",
        "schema": {"type": ["string", "null"]},
    },
    "state_store_options": {
        "label": "State store options",
        "description": 'Store options such as {"endpoint_url": "..."}; credentials come from the '
        "SDK's default chain.",
        "schema": dict(_JSON),
    },
}


def get_provider_info() -> dict[str, Any]:
    """What ``airflow providers list`` and the connection UI know about skyplane-ops."""
    from skyplane_ops import __version__

    return {
        "package-name": "skyplane-ops",
        "name": "Skyplane",
        "description": "Cloud-aware overlay transfers of bulk data between regions and clouds: "
        "plan, provision gateways, transfer with resume and verification.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://www.usenix.org/conference/nsdi23/presentation/jain",
                "tags": ["service"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["skyplane_ops.airflow.operators"],
            }
        ],
        "hooks": [
            {"integration-name": INTEGRATION, "python-modules": ["skyplane_ops.airflow.hooks"]}
        ],
        "extra-links": [
            "skyplane_ops.airflow.links.SkyplanePlanLink",
            "skyplane_ops.airflow.links.SkyplaneRouteLink",
            "skyplane_ops.airflow.links.SkyplaneReportLink",
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["skyplane_ops.airflow.triggers"],
            }
        ],
        "connection-types": [
            {
                "connection-type": "skyplane",
                "hook-class-name": "skyplane_ops.airflow.hooks.SkyplaneHook",
                "hook-name": "Skyplane",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "port", "schema", "login"],
                    "relabeling": {"password": "Backend secret (optional)"},
                    "placeholders": {"backend": "local"},
                },
            }
        ],
    }
