"""Shared pytest setup: fixtures live in tests/fixtures/, one module per kind of real part."""

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Fixture modules are registered here; each owns one kind of real server or testbed.
pytest_plugins = [
    "tests.fixtures.ports",
    "tests.fixtures.sshd",
    "tests.fixtures.emulators",
    "tests.fixtures.airflow_env",
    "tests.fixtures.workdirs",
]

# Make every test run hermetic with respect to user configuration.
os.environ.setdefault("SKYPLANE_OPS_HOME", os.path.join(os.getcwd(), ".cache", "test-home"))

# Property tests explore new random examples on a developer's machine; in CI they run a fixed,
# derandomized set so that a red CI is reproducible (a failure found locally is kept in
# .hypothesis/ and replayed first).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _signal_dispositions_restored() -> Iterator[None]:
    """Every test leaves SIGINT and SIGTERM as it found them. Dagster's in-process runs
    (``capture_interrupts``) end by giving SIGTERM the SIGINT handler, which is SIG_IGN when
    the suite starts from a background shell: every child started later inherited an ignored
    SIGTERM, and tests that stop a child with SIGTERM waited for their KILL step."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        if signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
