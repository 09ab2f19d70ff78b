"""Metadata travels with the object through real gateway processes on loopback (file://
stores): mtime, ``user.*`` extended attributes and tags, whole objects in batches and a
multipart object, ``metadata_set`` over them and ``metadata=False`` (bytes only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway_agent.stores import open_store
from skyplane_ops.testing.transfer import DST, RELAY, SRC, local_fleet, make_plan, write_dataset
from skyplane_ops.transfer import run_transfer

MiB = 1024 * 1024
OLD = 1_600_000_000.123456  # a source time a fresh write could never have


def _xattrs(path: Path) -> dict[str, str]:
    return {n: os.getxattr(path, n).decode() for n in os.listxattr(path) if n.startswith("user.")}


@pytest.fixture
def tree(dirs: tuple[Path, Path, Path]) -> tuple[Path, Path, Path, dict[str, int]]:
    src, dst, journal = dirs
    files = {"big.json": 5 * MiB + 7, "a/report.csv": 1000, "plain": 10}
    files.update({f"small/{i:03d}.txt": 100 for i in range(40)})
    write_dataset(src, files)
    try:
        os.setxattr(src / "a/report.csv", "user.owner", "ètl 🚀".encode())
    except OSError as exc:  # pragma: no cover - the file system of the test machine
        pytest.skip(f"no user extended attributes here: {exc}")
    os.setxattr(src / "a/report.csv", "user.skyplane.tag.team", b"data")
    os.setxattr(src / "big.json", "user.run-id", b"42")
    os.setxattr(src / "big.json", "user.skyplane.cache_control", b"max-age=60")
    for name in files:
        os.utime(src / name, (OLD, OLD))
    return src, dst, journal, files


def test_metadata_travels_through_a_relay(
    tree: tuple[Path, Path, Path, dict[str, int]],
) -> None:
    src, dst, journal, files = tree
    plan = make_plan([SRC, RELAY, DST])
    with local_fleet(plan) as (_, fleet):
        run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=journal,
            part_size=2 * MiB,
            metadata_set=["reviewed=yes"],
        )
    for name in files:  # every file keeps its time, whole, batched or multipart
        assert (dst / name).stat().st_mtime_ns == (src / name).stat().st_mtime_ns, name
        assert (dst / name).read_bytes() == (src / name).read_bytes()
    assert _xattrs(dst / "a/report.csv") == {
        "user.owner": "ètl 🚀",
        "user.skyplane.tag.team": "data",
        "user.reviewed": "yes",
    }
    # The multipart object got its metadata when its upload was created.
    assert _xattrs(dst / "big.json") == {
        "user.run-id": "42",
        "user.skyplane.cache_control": "max-age=60",
        "user.reviewed": "yes",
    }
    assert _xattrs(dst / "plain") == {"user.reviewed": "yes"}


def test_no_metadata_copies_bytes_only(tree: tuple[Path, Path, Path, dict[str, int]]) -> None:
    src, dst, journal, files = tree
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, fleet):
        run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=journal,
            part_size=2 * MiB,
            metadata=False,
        )
    for name in files:
        assert (dst / name).read_bytes() == (src / name).read_bytes()
        assert (dst / name).stat().st_mtime > OLD + 1000  # written now, not the source's time
        assert _xattrs(dst / name) == {}


def test_killed_sink_leaves_no_file_without_its_metadata(
    tree: tuple[Path, Path, Path, dict[str, int]],
) -> None:
    """SIGKILL the destination gateway mid-copy: every file already under its name has its
    source time and attributes (they are set on the unnamed file before it is linked), the
    re-run completes the rest with theirs."""
    import signal

    from skyplane_ops.errors import TransferError
    from skyplane_ops.transfer import DispatchOptions
    from skyplane_ops.transfer.progress import Progress

    src, dst, journal, files = tree
    plan = make_plan([SRC, DST])
    slow = DispatchOptions(connections=1, test_hooks={DST: {"sink_rate_bps": 2 * MiB}})
    with local_fleet(plan) as (_, fleet):
        sink_pid = int(fleet.in_region(DST)[0].resources["pid"])
        killed: list[int] = []

        def kill_sink(p: Progress) -> None:
            # Once some small files are under their names (a batch landed), before the rest.
            if not killed and any((dst / "small").glob("*.txt")):
                os.kill(sink_pid, signal.SIGKILL)
                killed.append(p.chunks_done)

        with pytest.raises(TransferError):
            run_transfer(
                plan,
                fleet,
                f"file://{src}",
                f"file://{dst}",
                journal_dir=journal,
                part_size=MiB,
                progress=kill_sink,
                dispatch=slow,
                metadata_set={"reviewed": "yes"},
            )
    assert killed
    # What is under its name (the store's listing: not the staged parts of big.json).
    landed = [dst / info.key for info in open_store(f"file://{dst}").list()]
    assert 0 < len(landed) < len(files), len(landed)
    for path in landed:
        name = str(path.relative_to(dst))
        assert path.stat().st_mtime_ns == (src / name).stat().st_mtime_ns, name
        assert _xattrs(path).get("user.reviewed") == "yes", name
    with local_fleet(plan) as (_, fleet):
        run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=journal,
            part_size=MiB,
            metadata_set={"reviewed": "yes"},
        )
    for name in files:
        assert (dst / name).read_bytes() == (src / name).read_bytes()
        assert (dst / name).stat().st_mtime_ns == (src / name).stat().st_mtime_ns, name
        assert _xattrs(dst / name).get("user.reviewed") == "yes", name
    assert _xattrs(dst / "big.json")["user.run-id"] == "42"
