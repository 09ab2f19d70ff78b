"""Pure parts of provisioning: durations, options files, secrets, bundle, grid and tbf maths."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gateway_agent
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import UnknownBackendError, get_provisioner
from skyplane_ops.provision.bundle import build_bundle, bundle_bytes
from skyplane_ops.provision.netns.testbed import Testbed, tbf_args
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    secret_bytes,
)
from skyplane_ops.provision.sweeper import (
    backend_options_for,
    load_backend_options,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration_is_explained() -> None:
    with pytest.raises(ProvisionError, match=r"use e\.g\. 90s"):
        parse_duration("two hours")


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(
        UnknownBackendError, match="choose one of aws, azure, gcp, local, mixed, netns, ssh"
    ):
        get_provisioner("azure-vm")


def test_backend_options_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "opts.toml"
    path.write_text('[aws]\nsweep_regions = ["us-east-1"]\n[ssh]\ninventory = "h.json"\n')
    assert load_backend_options(path) == {
        "aws": {"sweep_regions": ["us-east-1"]},
        "ssh": {"inventory": "h.json"},
    }
    path.write_text('aws = "nope"\n')
    with pytest.raises(ProvisionError, match="option tables"):
        load_backend_options(path)


def test_backend_options_for_inline_flat_per_backend_and_inventory(tmp_path: Path) -> None:
    assert backend_options_for(None, "local") == {}
    assert backend_options_for(' {"idle_timeout": 5} ', "local") == {"idle_timeout": 5}
    flat = tmp_path / "flat.json"
    flat.write_text('{"inventory": "hosts.toml"}')
    assert backend_options_for(str(flat), "ssh") == {"inventory": "hosts.toml"}
    tables = tmp_path / "all.toml"
    tables.write_text('[ssh]\ninventory = "h.json"\n[netns]\nscale = 0.5\n')
    assert backend_options_for(str(tables), "netns") == {"scale": 0.5}
    assert backend_options_for(str(tables), "local") == {}  # no table for it: defaults
    inventory = tmp_path / "inventory.json"
    inventory.write_text('{"regions": {"aws:us-east-1": [{"address": "10.0.0.1"}]}}')
    assert backend_options_for(str(inventory), "ssh") == {
        "inventory": {"regions": {"aws:us-east-1": [{"address": "10.0.0.1"}]}}
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"idle_timeout": ', "not valid JSON"),
        ("/no/such/options.json", "neither a JSON object nor an existing file"),
        ('{"ssh": {"inventory": "h"}, "scale": 1}', "mixes per-backend tables"),
    ],
)
def test_bad_backend_options_are_explained(value: str, message: str) -> None:
    with pytest.raises(ProvisionError, match=message):
        backend_options_for(value, "ssh")


def test_unknown_backend_option_is_a_provision_error() -> None:
    with pytest.raises(ProvisionError, match=r"bad options for backend 'local'.*no_such_option"):
        get_provisioner("local", no_such_option=1)


def test_secret_file_is_private_and_referenced_not_embedded() -> None:
    ref = create_secret("unit-secret")
    try:
        assert stat.S_IMODE(os.stat(ref).st_mode) == 0o600
        assert len(secret_bytes(ref)) == 32
        assert create_secret("unit-secret") == ref  # stable per transfer
    finally:
        delete_secret(ref)
    assert not Path(ref).exists()


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "x" * 64, "a b", "-lead"])
def test_transfer_ids_are_checked(bad: str) -> None:
    with pytest.raises(ProvisionError, match="invalid transfer id"):
        check_transfer_id(bad)


def _sources_in(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".py")}


def test_bundle_is_deterministic_and_holds_only_the_agent(tmp_path: Path) -> None:
    assert _sources_in(bundle_bytes()) == _sources_in(bundle_bytes())
    bundle = build_bundle(out_dir=tmp_path)
    names = zipfile.ZipFile(bundle.path).namelist()
    assert "gateway_agent/__main__.py" in names
    assert all(n.startswith("gateway_agent/") and n.endswith((".py", ".pyc")) for n in names)
    sources = {n for n in names if n.endswith(".py")}
    assert {n + "c" for n in sources} == set(names) - sources  # bytecode beside every source
    assert not any("skyplane_ops" in n or "__pycache__" in n for n in names)
    assert bundle.remote_name == f"gateway_agent-{bundle.digest[:12]}.zip"
    # Another process names it alike (its bytecode may differ by a reference flag: marshal
    # writes what the process's reference counts say, so a bundle is named by its sources).
    code = "from skyplane_ops.provision.bundle import sources_digest as d; print(d())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert other.stdout.decode().strip() == bundle.digest
    # Named by its sources (nothing compiled to find it): an edited source is a new bundle.
    package = tmp_path / "pkg" / "gateway_agent"
    shutil.copytree(Path(gateway_agent.__file__).parent, package)
    first = build_bundle(package, out_dir=tmp_path / "out")
    assert build_bundle(package, out_dir=tmp_path / "out") == first
    (package / "wire.py").write_text((package / "wire.py").read_text() + "\n# edited\n")
    edited = build_bundle(package, out_dir=tmp_path / "out")
    assert edited.digest != first.digest and edited.path.exists() and first.path.exists()


# Run with the bundle alone on the path: counts the agent modules compiled from source.
_COMPILES = """
import builtins, sys
real, compiled = builtins.compile, []
def spy(source, filename, *args, **kwargs):
    if "gateway_agent" in str(filename):
        compiled.append(filename)
    return real(source, filename, *args, **kwargs)
builtins.compile = spy
import gateway_agent.agent, gateway_agent.job.sink, gateway_agent.stores.local
assert ".zip" in gateway_agent.agent.__file__, gateway_agent.agent.__file__
print(len(compiled))
"""


def _compiles(bundle: Path) -> int:
    code = f"import sys; sys.path[:0] = [{str(bundle)!r}]\n{_COMPILES}"
    # -I: no PYTHONPATH, no checkout on the path; the agent can only come from the bundle.
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_bundle_bytecode_is_used_and_another_python_compiles_the_source(tmp_path: Path) -> None:
    """This interpreter imports the agent from the bundle without compiling a module; a
    Python of another version (its bytecode's magic number differs: simulated by changing
    it) falls back to the sources beside it."""
    bundle = build_bundle(out_dir=tmp_path)
    assert _compiles(bundle.path) == 0
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(bundle.path) as src, zipfile.ZipFile(foreign, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".pyc"):
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            out.writestr(info, data)
    assert _compiles(foreign) > 10


def test_testbed_plan_scales_the_grid_per_direction() -> None:
    tb = Testbed.plan("unit", ["A", "B", "C"], {"A->B": 1.0, "B->A": 2.0}, default_gbps=4.0)
    assert tb.shaped_mbit("A", "B") == 100 and tb.shaped_mbit("B", "A") == 200
    assert tb.shaped_mbit("A", "C") == tb.shaped_mbit("C", "B") == 400
    with pytest.raises(ProvisionError, match="no address slot"):
        tb.address("A")
    tb.slot = 2
    assert [tb.address(r) for r in "ABC"] == ["10.77.242.1", "10.77.242.2", "10.77.242.3"]
    assert tb.link("A", "C").addresses(2) == ("10.77.60.9", "10.77.60.10")
    assert tb.namespace("C") == "skyplane-ops.unit.r2"
    with pytest.raises(ProvisionError, match="no rate for A -> C"):
        Testbed.plan("unit", ["A", "B", "C"], {"A->B": 1.0})


def test_tbf_burst_exceeds_the_mtu() -> None:
    args = tbf_args(100.0)
    burst = int(args[args.index("burst") + 1])
    assert burst > 1500 and args[1] == "100mbit"
    big = tbf_args(4000.0)
    assert int(big[big.index("burst") + 1]) >= 4000e6 / 8 / 250


def test_ctrl_c_during_parallel_bootstrap_keeps_the_finished_results() -> None:
    """A real SIGINT while waiting: the running calls finish and are handed back for undo."""
    import signal
    import time

    from skyplane_ops.provision.ssh.bootstrap import InterruptedDuringBatch, _parallel

    def slow(i: int) -> int:
        time.sleep(0.3)
        return i

    signal.setitimer(signal.ITIMER_REAL, 0.1)
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        with pytest.raises(InterruptedDuringBatch) as info:
            _parallel(slow, [(1,), (2,), (3,)])
    finally:
        signal.signal(signal.SIGALRM, old)
    assert [res for _, res, exc in info.value.results if exc is None] == [1, 2, 3]
    assert isinstance(info.value, KeyboardInterrupt)
