"""Shared pytest setup: fixtures live in tests/fixtures/, one module per kind of real part."""

import os

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
