"""``skyplane-ops`` driven as a user drives it: subprocesses, real local gateways, real moto S3.

Help for every command, version, shell completion, the shared vocabulary (with the old
spellings still working), one duration parser, plain paths, per-store options, and the progress
display both on a pseudo-terminal (rich) and through a pipe (plain lines).
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from skyplane_ops.testing.transfer import read_tree, write_dataset

MiB = 1024 * 1024
REGIONS = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "SKYPLANE_OPS_HOME": str(home), "COLUMNS": "120", **extra}


def _run(
    home: Path, *args: str, cwd: Path | None = None, timeout: float = 180, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skyplane_ops.cli", *args],
        capture_output=True,
        text=True,
        env=_env(home, **env),
        cwd=cwd,
        timeout=timeout,
    )


def _commands(help_text: str) -> list[str]:
    """The command names of a click group's ``--help``."""
    section = help_text.split("Commands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", section, re.M)]


def test_every_command_has_help_with_examples_and_no_rst(tmp_path: Path) -> None:
    top = _run(tmp_path, "--help")
    assert top.returncode == 0, top.stderr
    names = _commands(top.stdout)
    assert {"plan", "cp", "sync", "profile", "grid", "provision", "deprovision"} <= set(names)
    helps = {"": top.stdout}
    for name in names:
        out = _run(tmp_path, name, "--help")
        assert out.returncode == 0, out.stderr
        helps[name] = out.stdout
    for sub in _commands(helps["grid"]):
        out = _run(tmp_path, "grid", sub, "--help")
        assert out.returncode == 0, out.stderr
        helps[f"grid {sub}"] = out.stdout
    assert len(helps) >= 13
    for name, text in helps.items():
        assert "``" not in text, f"RST double backticks in {name!r} help"
        if name != "completion":
            assert "Examples:" in text, f"no examples in {name!r} help"
    # The vocabulary: one name per concept, per hop vs per VM said plainly.
    cp_help = helps["cp"]
    for option in (
        "--src-options",
        "--dst-options",
        "--backend-options",
        "--grid-store",
        "--max-vms-per-region",
        "--max-connections-per-vm",
        "--connections-per-hop",
    ):
        assert option in cp_help, option
    assert "per hop" in cp_help and "per VM" in cp_help
    for old in ("--max-conns ", "--max-vms ", "--connections ", "--store "):
        assert old not in cp_help  # hidden deprecated aliases
    assert "--backend-options" in helps["deprovision"] and "--options" not in helps["deprovision"]
    assert "--grid-store" in helps["profile"] and "--grid-store" in helps["grid show"]


def test_every_option_has_help() -> None:
    """In-process: every visible option of every command carries a help text."""
    import click

    from skyplane_ops.cli import cli

    def walk(cmd: click.Command, path: str) -> list[str]:
        missing = [
            f"{path} {p.opts[0]}"
            for p in cmd.params
            if isinstance(p, click.Option) and not p.hidden and not p.help
        ]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                missing += walk(sub, f"{path} {name}")
        return missing

    assert walk(cli, "skyplane-ops") == []


def test_version_and_completion(tmp_path: Path) -> None:
    out = _run(tmp_path, "--version")
    assert out.returncode == 0 and re.fullmatch(r"skyplane-ops \S+\n", out.stdout)
    script = _run(tmp_path, "completion", "bash")
    assert script.returncode == 0 and "_SKYPLANE_OPS_COMPLETE" in script.stdout
    # What the installed script asks the CLI for when the user types "skyplane-ops de<TAB>".
    words = _run(
        tmp_path,
        _SKYPLANE_OPS_COMPLETE="bash_complete",
        COMP_WORDS="skyplane-ops de",
        COMP_CWORD="1",
    )
    assert "deprovision" in words.stdout
    options = _run(
        tmp_path,
        _SKYPLANE_OPS_COMPLETE="bash_complete",
        COMP_WORDS="skyplane-ops cp --max-v",
        COMP_CWORD="2",
    )
    assert "--max-vms-per-region" in options.stdout


def test_old_spellings_still_work_and_say_so(tmp_path: Path) -> None:
    base = ["plan", "--src", "azure:canadacentral", "--dst", "gcp:asia-northeast1"]
    base += ["--volume-gb", "100", "--min-throughput-gbps", "5", "--json"]
    new = _run(tmp_path, *base, "--max-vms-per-region", "1", "--max-connections-per-vm", "48")
    old = _run(tmp_path, *base, "--max-vms", "1", "--max-conns", "48")
    assert new.returncode == 0 and old.returncode == 0, old.stderr
    assert json.loads(new.stdout)["paths"] == json.loads(old.stdout)["paths"]
    assert "--max-vms is deprecated" in old.stderr and "use --max-vms-per-region" in old.stderr
    assert "deprecated" not in new.stderr
    # Durations: --deadline takes units; the old --deadline-seconds a bare number.
    a = _run(tmp_path, *base[:-3], "--json", "--deadline", "15m", "--max-vms-per-region", "2")
    b = _run(tmp_path, *base[:-3], "--json", "--deadline-seconds", "900", "--max-vms", "2")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert json.loads(a.stdout)["details"]["deadline_seconds"] == 900
    assert json.loads(a.stdout)["paths"] == json.loads(b.stdout)["paths"]
    two = _run(tmp_path, *base, "--max-cost-usd", "5")
    assert two.returncode == 2 and "at most one bound" in two.stderr


def test_one_duration_parser(tmp_path: Path) -> None:
    """``deprovision --older-than 1w`` reads durations as ``profile --freshness 1w`` does."""
    out = _run(tmp_path, "deprovision", "--older-than", "1w", "--backend", "local")
    assert out.returncode == 0, out.stderr
    assert "resource(s) deleted from local" in out.stdout
    bad = _run(tmp_path, "deprovision", "--older-than", "1 fortnight", "--backend", "local")
    assert bad.returncode == 2 and "use e.g. 90s, 30m, 12h, 3d or 1w" in bad.stderr
    regions = "aws:us-east-1,aws:us-west-2"
    dry = _run(tmp_path, "profile", "--regions", regions, "--freshness", "1w", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    neither = _run(tmp_path, "deprovision", "--backend", "local")
    assert neither.returncode == 2 and "exactly one of" in neither.stderr


def test_plain_paths_and_per_store_options_with_s3(tmp_path: Path, moto_s3: object) -> None:
    """A path without a scheme is local; --dst-options/--src-options reach S3 (moto)."""
    emu: object = moto_s3
    bucket = emu.make_bucket("cli-plain")  # type: ignore[attr-defined]
    options = json.dumps(emu.options)  # type: ignore[attr-defined]
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    data = write_dataset(work / "data", {"a.bin": 2 * MiB, "b/c.txt": 1000})
    home = tmp_path / "home"
    # Every SDK call without an explicit endpoint goes to a dead port: success below shows the
    # per-store options (not the environment) carried the endpoint, to the gateways as well.
    dead = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    up = _run(
        home, "cp", "data", bucket, *REGIONS, "--dst-options", options, "--json", cwd=work, **dead
    )
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["objects"] == 2
    down = _run(
        home,
        "cp",
        bucket,
        "back",
        *REGIONS,
        "--src-options",
        options,
        "--no-progress",
        cwd=work,
        **dead,
    )
    assert down.returncode == 0, down.stderr
    assert read_tree(work / "back") == data
    blind = _run(
        home,
        "cp",
        bucket,
        "again",
        *REGIONS,
        "--no-progress",
        "--src-options",
        '{"max_attempts": 1, "max_retry_seconds": 1}',
        cwd=work,
        **dead,
    )
    assert blind.returncode == 2 and "Traceback" not in blind.stderr, blind.stderr
    assert "cannot list source" in blind.stderr and "connection failed" in blind.stderr
    assert not (work / "again").exists() or read_tree(work / "again") == {}


def _dataset(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    write_dataset(src, {"big.bin": 4 * MiB, **{f"s/{i}": 3000 for i in range(20)}})
    return src, dst, home


def test_progress_piped_is_plain_lines(tmp_path: Path) -> None:
    src, dst, home = _dataset(tmp_path)
    out = _run(home, "cp", str(src), str(dst), *REGIONS, "--chunk-mib", "1")
    assert out.returncode == 0, out.stderr
    err = out.stderr
    assert "\x1b" not in err and "\r" not in err  # no terminal control in logs
    for phase in ("list", "plan", "provision", "transfer", "verify", "teardown"):
        assert re.search(rf"^\[\s*[\d.]+s\] {phase}: done in [\d.]+s", err, re.M), (phase, err)
    assert re.search(r"transfer: 100\.0% .* objects 21/21 .* Gbit/s\s+ETA 0s", err), err
    assert re.search(r"^\s+path azure:canadacentral -> .* [\d.]+ Gbit/s$", err, re.M), err
    summary = out.stdout
    assert "measured:" in summary and "measured phases: list" in summary
    assert "modelled cost:" in summary and "not a bill" in summary
    assert re.search(r"path azure:canadacentral -> .*: measured [\d.]+ of", summary)


def test_progress_json_stream(tmp_path: Path) -> None:
    src, dst, home = _dataset(tmp_path)
    out = _run(home, "cp", str(src), str(dst), *REGIONS, "--chunk-mib", "1", "--json")
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert any(e.get("path_gbps") for e in events if e["event"] == "progress")
    kinds = {e["event"] for e in events}
    assert kinds == {"phase", "progress"}, kinds
    done = [e["phase"] for e in events if e["event"] == "phase" and e["state"] == "done"]
    assert done == ["list", "plan", "provision", "transfer", "verify", "teardown"]
    result = json.loads(out.stdout)
    assert set(result["phases"]) == set(done)


def test_progress_on_a_terminal_is_live(tmp_path: Path) -> None:
    """On a pseudo-terminal: the rich display (cursor control), every phase with its time."""
    src, dst, home = _dataset(tmp_path)
    parent, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.cli", "cp", str(src), str(dst), *REGIONS],
        stdin=child,
        stdout=child,
        stderr=child,
        env=_env(home, TERM="xterm-256color"),
        close_fds=True,
    )
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            data = os.read(parent, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(parent)
    assert proc.wait(timeout=60) == 0
    raw = b"".join(chunks).decode(errors="replace")
    assert "\x1b[" in raw  # live redraws, not plain lines
    text = ANSI.sub("", raw)
    for phase in ("list", "plan", "provision", "transfer", "verify", "teardown"):
        assert re.search(rf"{phase}\s.*done in [\d.]+s", text), (phase, text[-2000:])
    assert "Gbit/s" in text and "ETA" in text and "chunks" in text
    assert re.search(r"path\s.*azure:canadacentral -> \S+: [\d.]+ Gbit/s", text), text[-2000:]
    assert "modelled cost:" in text
