"""Chunk submits sent in the background, in order per gateway.

The dispatcher's poll loop used to wait for each gateway's answer to every submit, so while
one gateway took a batch the others were neither polled nor fed and the window ran dry. Here
each gateway has one sending thread (its submits stay in the order they were made) and the
loop only collects failures (``raise_failed``) on its next turn.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Submitter:
    """One single-thread queue per gateway; a failed send surfaces in ``raise_failed``."""

    def __init__(self) -> None:
        self._queues: dict[str, ThreadPoolExecutor] = {}
        self._futures: list[Future[Any]] = []

    def send(self, gateway_id: str, fn: Callable[[], Any]) -> None:
        queue = self._queues.get(gateway_id)
        if queue is None:
            queue = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"submit-{gateway_id}")
            self._queues[gateway_id] = queue
        self._futures.append(queue.submit(fn))

    def raise_failed(self) -> None:
        """Raise the first error of a finished send (sends still running are kept)."""
        failed = [f for f in self._futures if f.done() and f.exception() is not None]
        self._futures = [f for f in self._futures if not f.done()]
        if failed:
            failed[0].result()

    def wait(self) -> None:
        """Wait for every send and raise the first error."""
        for fut in self._futures:
            fut.result()
        self._futures = []

    def close(self) -> None:
        """Drop queued sends and do not wait for running ones (a hung gateway must not hold
        the caller; its job is stopped next)."""
        for queue in self._queues.values():
            queue.shutdown(wait=False, cancel_futures=True)
        self._queues = {}
        self._futures = []
