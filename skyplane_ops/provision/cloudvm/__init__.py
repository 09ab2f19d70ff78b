"""What the azure and gcp backends share: ``common`` (tags, per-fleet keys and the cloud-init
the VMs boot with, whose host keys the control plane generates; its names are importable from
here, as from the module cloudvm was) and ``boot`` (``CloudBoot``: the SSH side, options,
bootstrap, agent stop, failure path; not imported here, since it builds on ``cloudhosts``,
which imports the tags from here)."""

from __future__ import annotations

from skyplane_ops.provision.cloudvm.common import (
    AGENT_USER,
    GCP_LABEL_CREATED,
    GCP_LABEL_TRANSFER,
    NAME_PREFIX,
    TAG_CREATED,
    TAG_CREATOR,
    TAG_EXPIRES,
    TAG_TRANSFER,
    KeyPair,
    QuotaError,
    cloud_init,
    created_before,
    fleet_tags,
    gcp_labels,
    parse_cloud_init,
    parse_console_host_key,
    region_of,
    save_client_key,
)

__all__ = [
    "AGENT_USER",
    "GCP_LABEL_CREATED",
    "GCP_LABEL_TRANSFER",
    "NAME_PREFIX",
    "TAG_CREATED",
    "TAG_CREATOR",
    "TAG_EXPIRES",
    "TAG_TRANSFER",
    "KeyPair",
    "QuotaError",
    "cloud_init",
    "created_before",
    "fleet_tags",
    "gcp_labels",
    "parse_cloud_init",
    "parse_console_host_key",
    "region_of",
    "save_client_key",
]
