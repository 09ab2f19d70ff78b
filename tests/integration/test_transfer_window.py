"""The control plane hands gateways bounded batches of work, whatever the object count.

Real gateway processes on loopback; the source reads slowly (test hook) so that without the
window every chunk would pile up in the source gateway's queue.
"""

from __future__ import annotations

from pathlib import Path

from gateway_agent.auth import load_secret
from gateway_agent.client import GatewayClient
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import DispatchOptions, run_transfer
from skyplane_ops.transfer.progress import Progress

KiB = 1024


def test_source_gateway_holds_at_most_the_window(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    # 24 objects of 256 KiB in parts of 64 KiB: 96 one-part chunks.
    data = write_dataset(src, {f"o{i:02d}": 256 * KiB for i in range(24)})
    plan = make_plan([SRC, DST])
    backlog: list[int] = []
    with local_fleet(plan) as (_, fleet):
        source = fleet.in_region(SRC)[0]
        client = GatewayClient(source.host, source.control_port, load_secret(fleet.secret_ref))
        job: dict[str, str] = {}

        def watch(_: Progress) -> None:
            if not job:
                job.update(id=next(iter(client.health()["jobs"]), ""))
            if job["id"]:
                backlog.append(int(client.status(job["id"])["backlog"]))

        options = DispatchOptions(
            window_chunks=3,
            reader_threads=1,
            test_hooks={SRC: {"source_rate_bps": 4 * 1024 * 1024}},
        )
        result = run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=tmp_path / "journal",
            part_size=64 * KiB,
            dispatch=options,
            progress=watch,
        )
    assert read_tree(dst) == data
    assert result.chunks == 96
    assert backlog, "the source gateway was never polled"
    # A window of 3 chunks: at most 3 descriptors wait at the source (never the other 93).
    assert max(backlog) <= 3
