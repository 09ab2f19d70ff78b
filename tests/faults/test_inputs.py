"""Bad input gets a clear error before any work; two runs on one journal never share it
(issue 12, part 6). Through the real CLI and the API; real local gateways for the lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import DST, SRC, read_tree, write_dataset
from skyplane_ops.transfer import DispatchOptions
from tests.faults.engine_helpers import REGIONS, REPO, agents_of, one_line_error, run_cli

MiB = 1024 * 1024


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, bytes]]:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    data = write_dataset(src, {"big.bin": 2 * MiB, **{f"s/{i}": 1000 for i in range(5)}})
    dst.mkdir()
    return src, dst, home, data


BAD_OPTIONS = [
    (("cp", "--chunk-mib", "0"), "part size"),
    (("cp", "--chunk-mib", "-8"), "part size"),
    (("cp", "--chunk-mib", "999999"), "part size"),
    (("cp", "--connections", "0"), "--connections"),
    (("cp", "--connections", "-3"), "--connections"),
    (("cp", "--connections", "100000"), "--connections"),
    (("cp", "--local-gateways-per-region", "0"), "--local-gateways-per-region"),
    (("sync", "--delete", "--max-delete", "-1"), "--max-delete"),
    (("sync", "--max-delete", "3"), "--max-delete only applies with --delete"),
]


@pytest.mark.parametrize(("args", "named"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_numbers_are_one_line_errors_before_any_work(
    dataset: tuple[Path, Path, Path, dict[str, bytes]], args: tuple[str, ...], named: str
) -> None:
    src, dst, home, data = dataset
    command, *flags = args
    proc = run_cli(home, command, f"file://{src}", f"file://{dst}", *REGIONS, *flags)
    assert proc.returncode == 2, proc.stderr
    assert named in one_line_error(proc)
    assert read_tree(dst) == {} and read_tree(src) == data
    assert not (home / "journal").exists() and not (home / "local").exists()  # nothing started


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"part_size": 0}, "part size"),
        ({"part_size": -8 * MiB}, "part size"),
        ({"part_size": 1.5}, "part_size"),
        ({"verify": "maybe"}, "verify"),
        ({"max_delete": -1}, "max_delete"),
        ({"dispatch": DispatchOptions(connections=0)}, "connections"),
        ({"dispatch": DispatchOptions(compress_level=99)}, "compress_level"),
        ({"dispatch": DispatchOptions(max_attempts=0)}, "max_attempts"),
        ({"dispatch": DispatchOptions(stall_timeout=-1)}, "stall_timeout"),
        ({"dispatch": DispatchOptions(poll_interval=float("nan"))}, "poll_interval"),
        ({"dispatch": DispatchOptions(reader_threads=0)}, "reader_threads"),
    ],
)
def test_api_copy_checks_ranges_before_planning(
    dataset: tuple[Path, Path, Path, dict[str, bytes]], kwargs: dict[str, object], named: str
) -> None:
    src, dst, _home, _data = dataset
    with pytest.raises(TransferError) as err:
        api.copy(f"file://{src}", f"file://{dst}", src_region=SRC, dst_region=DST, **kwargs)  # type: ignore[arg-type]
    assert named in str(err.value) and "\n" not in str(err.value)
    assert read_tree(dst) == {}


def test_profile_numbers_fail_before_gateways_start(tmp_path: Path) -> None:
    for flag, value in (("--probe-port", "70000"), ("--probe-port", "-1"), ("--budget-usd", "-1")):
        proc = run_cli(
            tmp_path / "home",
            "profile",
            "--regions",
            "aws:us-east-1,aws:us-west-2",
            "--store",
            str(tmp_path / "grid"),
            flag,
            value,
        )
        assert proc.returncode == 2 and flag in one_line_error(proc), proc.stderr
        assert not (tmp_path / "home" / "local").exists()


# ---- the journal lock --------------------------------------------------------------------------


def _start(home: Path, src: Path, dst: Path, *extra: str) -> subprocess.Popen[str]:
    hooks = json.dumps({"gcp:asia-northeast1": {"sink_rate_bps": 2e5}})  # a slow destination
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home), "PYTHONPATH": str(REPO)}
    uris = (f"file://{src}", f"file://{dst}")
    flags = ("--chunk-mib", "1", "--no-progress", "--gateway-test-hooks", hooks)
    return subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.cli", "cp", *uris, *REGIONS, *flags, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _lock_holder(home: Path) -> str | None:
    for lock in (home / "journal").glob("*.lock"):
        text = lock.read_text().strip()
        if text:
            return text
    return None


def test_second_run_on_one_journal_names_the_holder_or_waits(
    dataset: tuple[Path, Path, Path, dict[str, bytes]],
) -> None:
    src, dst, home, data = dataset
    first = _start(home, src, dst)
    waiter: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 120
        while _lock_holder(home) != str(first.pid) and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        assert _lock_holder(home) == str(first.pid)
        waiter = _start(home, src, dst, "--wait-lock")
        second = run_cli(home, "cp", f"file://{src}", f"file://{dst}", *REGIONS, "--chunk-mib", "1")
        assert second.returncode == 2
        line = one_line_error(second)
        assert f"pid {first.pid}" in line and "--wait-lock" in line
        assert first.poll() is None, "the first run ended before the second was refused"
        assert waiter.poll() is None  # blocked on the lock while the first runs
        _out, err = first.communicate(timeout=180)
        assert first.returncode == 0, err
        _out, err = waiter.communicate(timeout=180)
        assert waiter.returncode == 0, err  # waited for the first, then ran (and resumed nothing)
    finally:
        for proc in (first, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert read_tree(dst) == data and read_tree(src) == data
    assert list((home / "journal").glob("*.jsonl")) == []  # both runs ended clean


def test_a_killed_holder_releases_the_journal_lock(tmp_path: Path) -> None:
    """The kernel drops an flock with its holder: SIGKILL of a run never blocks the next."""
    from skyplane_ops.transfer.journal import JournalLockedError

    args = ("file:///data/a", "file:///data/b")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from skyplane_ops.api import transfer_lock; "
            f"lock = transfer_lock(*{args!r}, journal_dir={str(tmp_path)!r}); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(JournalLockedError) as err:
            api.transfer_lock(*args, journal_dir=tmp_path)
        assert f"pid {holder.pid}" in str(err.value)
        holder.kill()
        holder.wait(timeout=30)
        with api.transfer_lock(*args, journal_dir=tmp_path):
            # Re-entrant in one process: the engine takes it again under a face that holds it.
            with api.transfer_lock(*args, journal_dir=tmp_path):
                pass
    finally:
        if holder.poll() is None:
            holder.kill()


# ---- signals wherever the tool is started ------------------------------------------------------


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background shell job gets


@pytest.mark.parametrize(("sig", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_cli_started_with_sigint_ignored_still_stops_cleanly(
    dataset: tuple[Path, Path, Path, dict[str, bytes]], sig: str, status: int
) -> None:
    src, dst, home, data = dataset
    hooks = json.dumps({"gcp:asia-northeast1": {"sink_rate_bps": 2e5}})
    flags = ("--chunk-mib", "1", "--no-progress", "--gateway-test-hooks", hooks)
    uris = (f"file://{src}", f"file://{dst}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.cli", "cp", *uris, *REGIONS, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SKYPLANE_OPS_HOME": str(home), "PYTHONPATH": str(REPO)},
        preexec_fn=_ignore_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        # The journal appears once the copy is under way (fleet up, uploads created).
        while not list((home / "journal").glob("*.jsonl")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert agents_of(home), "the fleet never started"
        proc.send_signal(getattr(signal, sig))
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    assert f"interrupted ({sig})" in err and "Traceback" not in err
    assert agents_of(home) == []  # the fleet was torn down
    assert "big.bin" not in read_tree(dst)  # nothing partial is visible
    assert read_tree(src) == data
