"""Shared pytest setup: fixtures live in tests/fixtures/, one module per kind of real part."""

import os

# Fixture modules are registered here; each owns one kind of real server or testbed.
pytest_plugins = [
    "tests.fixtures.ports",
    "tests.fixtures.sshd",
    "tests.fixtures.emulators",
    "tests.fixtures.airflow_env",
]

# Make every test run hermetic with respect to user configuration.
os.environ.setdefault("SKYPLANE_OPS_HOME", os.path.join(os.getcwd(), ".cache", "test-home"))
