"""skyplane-ops: cloud-aware overlay transfers of bulk data, for data pipelines.

The control plane (this package) plans transfers over relay regions, provisions gateway VMs,
drives the transfer through them and verifies the result. The data plane lives in
``gateway_agent`` and is what runs on every gateway.
"""

__version__ = "0.2.0"
