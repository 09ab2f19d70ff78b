"""boto3 sessions that share one botocore data loader per process.

Why: a new boto3 session reads and parses botocore's JSON data again (S3's service model, the
endpoint rules, the partitions, the list of services): 0.1-0.2 s of CPU per client on a loaded
machine. A copy opens five to seven clients before its first byte (source and destination
stores, the listing, credential minting, the worker's own stores), so this was about a second
of the everyday job's fixed cost. The loader only caches that read-only data, which botocore
already shares between the clients of one session; credentials, region and configuration stay
per session.
"""

from __future__ import annotations

import os
import threading
from typing import Any

_LOCK = threading.Lock()
_LOADERS: dict[str | None, Any] = {}


def shared_loader() -> Any:
    """This process's botocore ``Loader`` for the current ``AWS_DATA_PATH`` (created once)."""
    from botocore.loaders import create_loader

    data_path = os.environ.get("AWS_DATA_PATH")
    with _LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = create_loader(data_path)
        return loader


def core_session() -> Any:
    """A new botocore session (its own credentials and config) on the shared loader."""
    import botocore.session

    core = botocore.session.Session()
    core.register_component("data_loader", shared_loader())
    return core


def new_session(**kwargs: Any) -> Any:
    """A new ``boto3.session.Session(**kwargs)`` on the shared loader."""
    import boto3

    return boto3.session.Session(botocore_session=core_session(), **kwargs)
