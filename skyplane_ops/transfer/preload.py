"""What a run's finish needs, loaded on a daemon thread while the data still moves.

After the last byte a run writes its report (Parquet) and records its paths' passive
measurements (the grid store's Parquet journal): both import pyarrow and its Parquet module,
0.2-0.4 s of one core on a loaded machine that every run paid after its copy was done. Loaded
while the engine waits on the stores and gateways, they cost the run (almost) nothing; started
once the first chunk is done, they do not delay the first byte either.
"""

from __future__ import annotations

import threading


def preload_finish() -> threading.Thread:
    """Import the finish's modules on a daemon thread. Only module caches are filled; an
    error is the finish's to report when it imports them itself."""

    def preload() -> None:
        try:
            import pyarrow.parquet  # noqa: F401  (the report and the grid store's journal)

            from skyplane_ops.profiler import store  # noqa: F401  (the passive record)
            from skyplane_ops.transfer.report import schema

            schema.arrow_schema()
        except Exception:  # the finish imports them again and says why
            return

    thread = threading.Thread(target=preload, name="preload-finish", daemon=True)
    thread.start()
    return thread
