"""One transfer job on one gateway: source, relay and sink roles, chosen per chunk by its path.

``runner`` holds ``Job`` (start, status, stop, routing and relaying); ``base`` what every role
shares (state, stores, counters and events), ``source`` reading chunks and ``sink`` writing
them. The names the agent and its users import are importable from here.
"""

from __future__ import annotations

from gateway_agent.job.base import (
    COUNTERS,
    LOCAL_BATCH_READERS,
    LOCAL_BATCH_WRITERS,
    InChunk,
    JobError,
    ObjectFailed,
)
from gateway_agent.job.runner import STOP_GRACE_S, Job
from gateway_agent.job.sink import ZERO_COPY_SCHEMES

__all__ = [
    "COUNTERS",
    "LOCAL_BATCH_READERS",
    "LOCAL_BATCH_WRITERS",
    "STOP_GRACE_S",
    "ZERO_COPY_SCHEMES",
    "InChunk",
    "Job",
    "JobError",
    "ObjectFailed",
]
