"""The dispatcher's background submits: order per gateway, failures surface."""

from __future__ import annotations

import threading

import pytest

from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.submitter import Submitter


def test_sends_keep_their_order_per_gateway() -> None:
    sender = Submitter()
    seen: dict[str, list[int]] = {"a": [], "b": []}
    try:
        for i in range(200):
            for gid in ("a", "b"):
                sender.send(gid, lambda gid=gid, i=i: seen[gid].append(i))
        sender.wait()
    finally:
        sender.close()
    assert seen == {"a": list(range(200)), "b": list(range(200))}


def test_a_failed_send_is_raised_on_the_next_check() -> None:
    sender = Submitter()
    gate = threading.Event()

    def fail() -> None:
        raise TransferError("gateway a failed")

    try:
        sender.send("b", gate.wait)  # still running: not an error
        sender.send("a", fail)
        with pytest.raises(TransferError, match="gateway a failed"):
            for _ in range(10_000):
                sender.raise_failed()
                threading.Event().wait(0.001)
        gate.set()
        sender.wait()  # the failure was reported once; the rest finished cleanly
    finally:
        gate.set()
        sender.close()
