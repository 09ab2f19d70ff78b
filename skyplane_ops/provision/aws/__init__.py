"""The ``aws`` backend: ephemeral EC2 gateways, bootstrapped over SSH, leak-proof.

``provisioner`` holds ``AWSProvisioner``; ``teardown`` the tags every resource carries, what
one region created so far and deleting it (by that record, or by tag for the sweeper). The
names its users import are importable from here.
"""

from __future__ import annotations

from skyplane_ops.provision.aws.provisioner import METADATA_OPTIONS, AWSProvisioner
from skyplane_ops.provision.aws.teardown import (
    LIVE_STATES,
    TAG_CREATED,
    TAG_CREATOR,
    TAG_EXPIRES,
    TAG_TRANSFER,
    UBUNTU_2204,
    UBUNTU_OWNER,
    aws_region,
)
from skyplane_ops.provision.cloudhosts import Bootstrap, InstanceHost
from skyplane_ops.provision.cloudvm.common import parse_console_host_key

__all__ = [
    "LIVE_STATES",
    "METADATA_OPTIONS",
    "TAG_CREATED",
    "TAG_CREATOR",
    "TAG_EXPIRES",
    "TAG_TRANSFER",
    "UBUNTU_2204",
    "UBUNTU_OWNER",
    "AWSProvisioner",
    "Bootstrap",
    "InstanceHost",
    "aws_region",
    "parse_console_host_key",
]
