"""Every input validated, no traceback, no litter (issue 35, "Every input validated").

The real CLI in a subprocess with its own ``SKYPLANE_OPS_HOME``: each bad input is rc 2 with
one ``error:`` line naming the problem (in today's option spellings), the source and every
destination object are byte-identical afterwards, and a refused run leaves nothing in the
home; a run that ends leaves no lock file.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyplane_ops.testing.transfer import read_tree, write_dataset
from tests.faults.engine_helpers import REGIONS, one_line_error, run_cli

DEEP = 100_000


@pytest.fixture
def ends(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes], dict[str, bytes]]:
    """A source and a destination that already holds an object of its own."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"a": 1000, "s/b": 2000})
    old = write_dataset(dst, {"keep": 300})
    return src, dst, data, old


def _refused(
    tmp_path: Path,
    ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]],
    *flags: str,
    named: str,
    dst: Path | None = None,
    home: Path | None = None,
    drop_dac: bool = False,
) -> str:
    src, default_dst, data, old = ends
    home = home or tmp_path / "home"
    target = dst or default_dst
    before = read_tree(target) if target.is_dir() else None
    proc = run_cli(
        home, "cp", f"file://{src}", f"file://{target}", *REGIONS, *flags, drop_dac=drop_dac
    )
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)
    assert named in line, line
    assert read_tree(src) == data
    assert read_tree(default_dst) == old
    if before is not None:
        assert read_tree(target) == before
    assert not home.exists() or not any(home.rglob("*")), sorted(home.rglob("*"))
    return line


def _deep_file(tmp_path: Path, name: str = "deep.json") -> Path:
    path = tmp_path / name
    path.write_text('{"a":' * DEEP + "1" + "}" * DEEP)
    return path


@pytest.mark.parametrize("flag", ["--dst-options", "--src-options", "--backend-options"])
def test_json_options_nested_100000_deep(
    tmp_path: Path, ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]], flag: str
) -> None:
    line = _refused(tmp_path, ends, flag, str(_deep_file(tmp_path)), named="levels deep")
    assert "deep.json" in line


@pytest.mark.parametrize("flag", ["--plan", "--fleet"])
def test_plan_and_fleet_files_nested_100000_deep(
    tmp_path: Path, ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]], flag: str
) -> None:
    _refused(tmp_path, ends, flag, str(_deep_file(tmp_path)), named="levels deep")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ('{"idle_timeout": NaN}', "NaN"),
        ('{"idle_timeout": 1e999}', "idle_timeout"),
        ('{"idle_timeout": -5}', "idle_timeout"),
        ('{"buffer_mib": 0}', "buffer_mib"),
        ('{"buffer_mib": "big"}', "buffer_mib"),
        ('{"buffer_mb": 64}', "unknown option"),
        ('{"local": {"start_timeout": 0}}', "start_timeout"),
        ('{"log_level": "LOUD"}', "log_level"),
    ],
)
def test_local_backend_options_are_checked(
    tmp_path: Path,
    ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]],
    options: str,
    named: str,
) -> None:
    _refused(tmp_path, ends, "--backend-options", options, named=named)


@pytest.mark.parametrize(
    ("flag", "options", "named"),
    [
        ("--dst-options", '{"max_attempts": -1}', "max_attempts"),
        ("--src-options", '{"max_attempts": 0}', "max_attempts"),
        ("--src-options", '{"max_retry_seconds": NaN}', "NaN"),
        ("--dst-options", '{"backoff_seconds": -1}', "backoff_seconds"),
    ],
)
def test_store_retry_options_are_checked(
    tmp_path: Path,
    ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]],
    flag: str,
    options: str,
    named: str,
) -> None:
    _refused(tmp_path, ends, flag, options, named=named)


def test_journal_dir_naming_a_file(
    tmp_path: Path, ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]]
) -> None:
    plain = tmp_path / "journal-file"
    plain.write_text("mine\n")
    for extra in ((), ("--dry-run",)):
        line = _refused(
            tmp_path, ends, "--journal-dir", str(plain), *extra, named="is a file, not a folder"
        )
        assert "--journal-dir" in line
    assert plain.read_text() == "mine\n"


def test_unwritable_home(
    tmp_path: Path, ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]]
) -> None:
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o555)
    home = locked / "home"
    for extra in ((), ("--dry-run",)):
        line = _refused(tmp_path, ends, *extra, named="permission denied", home=home, drop_dac=True)
        assert "SKYPLANE_OPS_HOME" in line
    assert not home.exists()


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("kind", ["file", "dangling-link", "under-a-file"])
def test_destination_that_is_not_a_folder(
    tmp_path: Path,
    ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]],
    kind: str,
    dry_run: bool,
) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(b"precious")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    target, named = {
        "file": (plain, "is a file, not a folder"),
        "dangling-link": (link, "dangling symbolic link"),
        "under-a-file": (plain / "sub", f"{plain} is a file"),
    }[kind]
    flags = ("--dry-run",) if dry_run else ()
    _refused(tmp_path, ends, *flags, named=named, dst=target)
    assert plain.read_bytes() == b"precious"
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(
    ("args", "named", "old"),
    [
        (("--connections", "0"), "--connections-per-hop", "--connections "),
        (("--max-vms", "0"), "--max-vms-per-region", "--max-vms "),
        (("--max-conns", "0"), "--max-connections-per-vm", "--max-conns "),
    ],
)
def test_errors_name_todays_spelling(
    tmp_path: Path,
    ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]],
    args: tuple[str, ...],
    named: str,
    old: str,
) -> None:
    line = _refused(tmp_path, ends, *args, named=named)
    assert old not in line + " "


def test_a_run_that_ends_leaves_no_lock_file(
    tmp_path: Path, ends: tuple[Path, Path, dict[str, bytes], dict[str, bytes]]
) -> None:
    src, dst, data, old = ends
    home = tmp_path / "home"
    for _ in range(2):  # the second run is an up-to-date sync: it locks too
        proc = run_cli(home, "sync", f"file://{src}", f"file://{dst}", *REGIONS, "--no-progress")
        assert proc.returncode == 0, proc.stderr
        assert not list(home.rglob("*.lock")), sorted(home.rglob("*"))
    assert read_tree(dst) == {**old, **data}


@pytest.fixture
def not_ssh() -> Iterator[int]:
    """A TCP port that answers like a web server, not an SSH server."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_bad_inventory_is_one_line_without_paramiko_traceback(tmp_path: Path, not_ssh: int) -> None:
    inventory = tmp_path / "hosts.json"
    host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    host = {"address": "127.0.0.1", "port": not_ssh, "host_key": host_key}
    inventory.write_text(json.dumps({"regions": {"lab:a": {"hosts": [host]}}}))
    home = tmp_path / "home"
    args = ("provision", "--vms", "lab:a=1", "--backend", "ssh", "--inventory", str(inventory))
    proc = run_cli(home, *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    line = one_line_error(proc)  # also: no "Traceback" anywhere on stderr
    assert "SSH" in line and f"127.0.0.1:{not_ssh}" in line, line
    assert "paramiko" not in proc.stderr, proc.stderr
