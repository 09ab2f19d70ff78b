"""A status poll may wait at the gateway for news (a long poll): it answers as soon as an event
comes or the job stops, and holds an empty answer for the wait it was given. The control plane
then learns of a finished chunk when it lands instead of at its next poll."""

from __future__ import annotations

import threading
import time
from typing import Any

from gateway_agent.flow import ByteBudget
from gateway_agent.job import Job


def _job() -> Job:
    spec = {"job_id": "job-poll", "routes": {"0": ["here"]}, "gateways": {"here": []}}
    return Job(spec, gateway_id="gw", region="here", secret=b"s" * 32, budget=ByteBudget(1 << 20))


def _poll_in_thread(job: Job, cursor: int, wait: float) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def poll() -> None:
        out["status"] = job.status(cursor, wait)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    # Wait until the poll is parked on the job's condition (CPython keeps its waiters in
    # ``_waiters``), so what follows exercises the wake-up, not a check made before waiting.
    deadline = time.monotonic() + 30
    while not job._news._waiters:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the poll never waited"
        time.sleep(0.005)
    return t, out


def test_a_waiting_poll_answers_when_an_event_comes() -> None:
    job = _job()
    try:
        t, out = _poll_in_thread(job, 0, wait=60)
        job._event(t="done", chunk=7, crcs=[1])
        t.join(timeout=30)  # without the wake-up it would answer after 60 s
        assert not t.is_alive()
        assert out["status"]["events"] == [{"t": "done", "chunk": 7, "crcs": [1]}]
        assert out["status"]["cursor"] == 1
    finally:
        job.stop()


def test_a_waiting_poll_answers_when_the_job_fails_or_stops() -> None:
    job = _job()
    t, out = _poll_in_thread(job, 0, wait=60)
    job._fail("disk full")
    t.join(timeout=30)
    assert not t.is_alive() and out["status"]["error"] == "disk full"
    t, out = _poll_in_thread(job, 1, wait=60)
    job.stop()
    t.join(timeout=30)
    assert not t.is_alive() and out["status"]["stopped"] and out["status"]["events"] == []


def test_an_empty_poll_is_held_for_its_wait_and_a_poll_behind_news_is_not() -> None:
    job = _job()
    try:
        job._event(t="done", chunk=1, crcs=[1])
        t0 = time.monotonic()
        st = job.status(0, wait=60)  # news already there: no waiting at all
        assert st["cursor"] == 1 and time.monotonic() - t0 < 30
        t0 = time.monotonic()
        st = job.status(1, wait=0.3)
        assert st["events"] == [] and st["cursor"] == 1
        assert time.monotonic() - t0 >= 0.3  # held (an old gateway would answer at once)
    finally:
        job.stop()
