"""End-to-end transfers through real gateway processes on loopback (file:// stores).

Every test provisions its own local fleet (one agent process per region), moves real bytes
over authenticated TCP connections and checks the destination byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from gateway_agent import wire
from gateway_agent.auth import load_secret
from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import (
    DST,
    RELAY,
    SRC,
    copy_dirs,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import DispatchOptions, SourceChangedError, run_transfer
from skyplane_ops.transfer.progress import Progress

MiB = 1024 * 1024


def test_local_to_local_through_relay(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, journal = dirs
    files = {"big.bin": 9 * MiB + 123, "a/b.txt": 1000, "empty": 0}
    files.update({f"small/{i:04d}": 4096 for i in range(500)})
    data = write_dataset(src, files)
    plan = make_plan([SRC, RELAY, DST])
    with local_fleet(plan) as (_, fleet):
        result = run_transfer(
            plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal, part_size=2 * MiB
        )
    assert read_tree(dst) == data
    assert result.objects == len(files) and result.bytes == sum(files.values())
    assert result.verified and result.verification["method"] == "write-checked crc32c"
    # 500 tiny files travel in a few dozen batched chunks (small ones first, so writes start
    # while later objects are read), not 500 round trips; big.bin is 5 parts.
    assert result.chunks < 40
    assert result.route == [f"{SRC} -> {RELAY} -> {DST} (100%)"]
    assert "keys" not in str(result.to_dict())
    assert not list(journal.glob("*.jsonl"))  # removed after a verified success


def test_split_across_two_paths_follows_shares(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, journal = dirs
    data = write_dataset(src, {f"f{i}": MiB for i in range(12)})
    plan = make_plan([SRC, DST], [SRC, RELAY, DST], shares=[0.25, 0.75])
    with local_fleet(plan) as (_, fleet):
        secret = load_secret(fleet.secret_ref)
        relay = fleet.in_region(RELAY)[0]
        result = run_transfer(plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal)
        jobs = GatewayClient(relay.host, relay.control_port, secret).status(result.job_id)
    assert read_tree(dst) == data
    # 12 whole-object chunks of 1 MiB batch 8 per chunk: count bytes through the relay instead.
    relayed = jobs["counters"]["bytes_received"]
    assert 0.5 * 12 * MiB <= relayed <= 12 * MiB


def test_relay_killed_then_resume_sends_only_missing(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, journal = dirs
    data = write_dataset(src, {"big.bin": 16 * MiB})
    plan = make_plan([SRC, RELAY, DST])
    opts = DispatchOptions(connections=1, test_hooks={RELAY: {"relay_delay_s": 0.15}})
    with local_fleet(plan) as (_, fleet):
        relay_pid = int(fleet.in_region(RELAY)[0].resources["pid"])
        killed = []

        def kill_relay(p: Progress) -> None:
            if p.chunks_done >= 4 and not killed:
                os.kill(relay_pid, signal.SIGKILL)
                killed.append(p.chunks_done)

        with pytest.raises(TransferError) as err:
            copy_dirs(
                plan,
                fleet,
                (src, dst, journal),
                part_size=MiB,
                progress=kill_relay,
                dispatch=opts,
            )
    message = str(err.value)
    assert "gw-test-relay-0" in message or RELAY in message
    assert "re-run" in message
    assert read_tree(dst) == {}  # nothing partial is visible
    with local_fleet(plan) as (_, fleet):
        result = run_transfer(
            plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal, part_size=MiB
        )
    assert read_tree(dst) == data
    assert result.chunks_resumed >= 4
    # Parts written by the killed run are not vouched for (the journal records no vouch):
    # the object is read back.
    assert result.verification["method"] == "read-back crc32c", result.verification
    # Only the missing parts travelled the second time.
    assert result.chunks == 16 - result.chunks_resumed


@pytest.mark.parametrize("forget_commits", [False, True], ids=["journaled", "crash-window"])
def test_failed_completion_then_resume_skips_committed_objects(
    dirs: tuple[Path, Path, Path], forget_commits: bool
) -> None:
    """A completion that fails for one object must not make the re-run re-complete the others.

    Regression: the re-run used to call ``complete_multipart`` again with upload ids that the
    first run had already consumed ("no upload ... for key f0.bin"). Each completion is now
    journaled; ``crash-window`` drops those records, as if the first run died between a
    completion and its journal line: the spent upload is then left to the CRC32C verification.
    """
    src, dst, journal = dirs
    files = {f"f{i}.bin": 3 * MiB for i in range(6)}
    data = write_dataset(src, files)
    (dst / "f3.bin" / "x").mkdir(parents=True)  # a directory where f3.bin must go
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, fleet):
        with pytest.raises(TransferError) as err:
            run_transfer(
                plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal, part_size=MiB
            )
        assert "f3.bin" in str(err.value)
        committed = {k for k in read_tree(dst) if k in files}
        assert committed and "f3.bin" not in committed  # the others were completed
        (journal_file,) = journal.glob("*.jsonl")
        lines = journal_file.read_text().splitlines()
        commits = {json.loads(line)["key"] for line in lines if '"t":"commit"' in line}
        assert commits == committed
        if forget_commits:
            journal_file.write_text(
                "".join(line + "\n" for line in lines if '"t":"commit"' not in line)
            )
        (dst / "f3.bin" / "x").rmdir()
        (dst / "f3.bin").rmdir()
        result = run_transfer(
            plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal, part_size=MiB
        )
    assert read_tree(dst) == data
    assert result.verified and result.verification["objects"] == len(files)
    assert result.chunks == 0  # every part had travelled; f3.bin's parts were still staged
    assert result.chunks_resumed == 3 * len(files)
    assert not list(journal.glob("*.jsonl"))


def test_corrupted_chunk_at_relay_is_detected_and_resent(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, journal = dirs
    data = write_dataset(src, {"big.bin": 6 * MiB, "x": 10})
    plan = make_plan([SRC, RELAY, DST])
    opts = DispatchOptions(test_hooks={RELAY: {"corrupt_chunks": 2}})
    with local_fleet(plan) as (_, fleet):
        result = copy_dirs(
            plan,
            fleet,
            (src, dst, journal),
            part_size=MiB,
            dispatch=opts,
        )
    assert result.chunks_resent == 2
    assert read_tree(dst) == data


def test_stranger_is_refused_while_transfer_completes(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, journal = dirs
    data = write_dataset(src, {"big.bin": 8 * MiB})
    plan = make_plan([SRC, RELAY, DST])
    opts = DispatchOptions(connections=2, test_hooks={RELAY: {"relay_delay_s": 0.05}})
    outcomes: list[str] = []
    with local_fleet(plan) as (_, fleet):
        relay = fleet.in_region(RELAY)[0]
        sink = fleet.in_region(DST)[0]

        def intrude(p: Progress) -> None:
            if outcomes:
                return
            for gw in (relay, sink):
                with socket.create_connection((gw.host, gw.data_port), timeout=5) as sock:
                    try:
                        wire.client_handshake(sock, b"wrong secret", encrypt=False)
                        outcomes.append("accepted")
                    except wire.HandshakeError:
                        outcomes.append("refused")
            try:
                GatewayClient(relay.host, relay.control_port, b"wrong secret").health()
                outcomes.append("control accepted")
            except GatewayError as exc:
                outcomes.append(f"control {exc.status}")

        result = copy_dirs(
            plan,
            fleet,
            (src, dst, journal),
            part_size=MiB,
            progress=intrude,
            dispatch=opts,
        )
        secret = load_secret(fleet.secret_ref)
        rejected = GatewayClient(relay.host, relay.control_port, secret).health()
    assert outcomes == ["refused", "refused", "control 401"]
    assert rejected["rejected_connections"] >= 1
    assert result.verified and read_tree(dst) == data


def test_source_changed_during_transfer_is_detected(dirs: tuple[Path, Path, Path]) -> None:
    """big.bin changes after its first part was read, before the others are (the source's
    ``read_gate`` holds them): the pinned reads see it, with no relisting behind them."""
    src, dst, journal = dirs
    write_dataset(src, {"big.bin": 8 * MiB, "stable.txt": 100})
    plan = make_plan([SRC, RELAY, DST])
    gate = journal.parent / "gate"
    opts = DispatchOptions(
        connections=1, test_hooks={SRC: {"read_gate": {"after": 1, "file": str(gate)}}}
    )
    changed: list[bool] = []

    def modify(p: Progress) -> None:
        if Path(f"{gate}.paused").exists() and not changed:
            with open(src / "big.bin", "r+b") as fh:
                fh.seek(100)
                fh.write(b"changed!")
            os.utime(src / "big.bin", (1, 1))
            changed.append(True)
            gate.touch()

    with local_fleet(plan) as (_, fleet), pytest.raises(SourceChangedError) as err:
        copy_dirs(
            plan,
            fleet,
            (src, dst, journal),
            part_size=MiB,
            progress=modify,
            dispatch=opts,
        )
    assert changed and "big.bin" in str(err.value)
    visible = read_tree(dst)
    assert "big.bin" not in visible  # the multipart upload was aborted, never completed
    assert visible == {"stable.txt": (src / "stable.txt").read_bytes()}


# ---- bad input ---------------------------------------------------------------------------------


def test_missing_source_is_a_clear_error(dirs: tuple[Path, Path, Path]) -> None:
    _, dst, _journal = dirs
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, fleet), pytest.raises(TransferError) as err:
        run_transfer(plan, fleet, "file:///nonexistent/skyplane-src", f"file://{dst}")
    assert "file:///nonexistent/skyplane-src does not exist" in str(err.value)


def test_empty_prefix_is_a_clear_error(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, _journal = dirs
    write_dataset(src, {"data/a": 10})
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, fleet), pytest.raises(TransferError) as err:
        run_transfer(plan, fleet, f"file://{src}", f"file://{dst}", include=["nothing/*"])
    assert "no objects" in str(err.value)
    (src / "empty").mkdir()
    with local_fleet(plan, hooks=False) as (_, fleet), pytest.raises(TransferError) as err:
        run_transfer(plan, fleet, f"file://{src}/empty", f"file://{dst}")
    assert "no objects" in str(err.value)


def test_unwritable_destination_is_a_clear_error(
    dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    src, _, journal = dirs
    write_dataset(src, {"a": 1000, "big": 3 * MiB})
    ro = tmp_path / "readonly"
    ro.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        plan = make_plan([SRC, DST])
        with local_fleet(plan, hooks=False) as (_, fleet), pytest.raises(TransferError) as err:
            run_transfer(
                plan, fleet, f"file://{src}", f"file://{ro}", journal_dir=journal, part_size=MiB
            )
        assert f"destination file://{ro} is not writable" in str(err.value)
        # Small objects only: the failure comes from the sink gateway's writes.
        write_dataset(src, {"big": 10})
        with local_fleet(plan, hooks=False) as (_, fleet), pytest.raises(TransferError) as err:
            run_transfer(
                plan, fleet, f"file://{src}", f"file://{ro}", journal_dir=journal, part_size=MiB
            )
        assert f"destination file://{ro} is not writable" in str(err.value)
        assert "gw-test-dst-0" in str(err.value)
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_plan_with_regions_the_fleet_lacks(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, _journal = dirs
    write_dataset(src, {"a": 10})
    with local_fleet(make_plan([SRC, DST]), hooks=False) as (_, fleet):
        other = make_plan([SRC, "test:elsewhere", DST])
        with pytest.raises(TransferError) as err:
            run_transfer(other, fleet, f"file://{src}", f"file://{dst}")
    assert "test:elsewhere" in str(err.value)


def test_encrypted_compressed_hops_and_two_relay_gateways(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, journal = dirs
    files = {f"part{i}": MiB for i in range(6)}
    data = write_dataset(src, files)
    (src / "text.csv").write_bytes(b"a,b,c\n" * 200_000)  # compressible
    data["text.csv"] = (src / "text.csv").read_bytes()
    plan = make_plan([SRC, RELAY, DST])
    plan.vms[RELAY] = 2
    opts = DispatchOptions(encrypt=True, compress_level=3, connections=2)
    with local_fleet(plan) as (_, fleet):
        assert len(fleet.in_region(RELAY)) == 2
        secret = load_secret(fleet.secret_ref)
        result = copy_dirs(
            plan,
            fleet,
            (src, dst, journal),
            part_size=512 * 1024,
            dispatch=opts,
        )
        relayed = [
            GatewayClient(g.host, g.control_port, secret).status(result.job_id)["counters"]
            for g in fleet.in_region(RELAY)
        ]
        source = fleet.in_region(SRC)[0]
        src_counters = GatewayClient(source.host, source.control_port, secret).status(
            result.job_id
        )["counters"]
    assert read_tree(dst) == data
    # Chunks go to whichever connection is free, across both gateways of the relay region.
    assert all(c["chunks_received"] > 0 for c in relayed)
    # zstd on the hop: fewer bytes on the wire than payload bytes.
    assert src_counters["wire_bytes_sent"] < src_counters["bytes_sent"]
