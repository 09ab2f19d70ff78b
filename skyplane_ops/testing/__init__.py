"""Helpers shared by the test suite and the benchmarks: real parts started on this machine.

* ``ports`` -- free loopback ports, waiting for a listener;
* ``sshd`` -- OpenSSH ``sshd`` servers on loopback (``start_sshd``/``stop_sshd``);
* ``emulators`` -- S3 (moto), Azure Blob (Azurite) and GCS emulator servers (``run_moto`` ...);
* ``transfer`` -- hand-made plans, datasets, local fleets, tree comparisons;
* ``gateways`` -- real gateway agent processes, strangers and the kill cases.

``tests/`` wraps them in pytest fixtures (``tests/fixtures``); ``benchmarks/`` calls them
directly. Nothing here imports ``tests`` or pytest, and nothing in the product imports this
package (``tests/unit/test_architecture.py`` checks both).
"""
