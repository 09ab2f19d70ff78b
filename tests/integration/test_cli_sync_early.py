"""When ``sync`` starts its gateways: not before the listing (an unchanged tree needs none),
and, once the listing found work, before planning, so they boot while the plan is made.

The CLI runs in this process (``cli.main``) with real local gateway processes; the run
sequence's steps are wrapped only to record which gateways were started early and whether
provision adopted them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skyplane_ops import cli
from skyplane_ops.sequence import copy_run
from skyplane_ops.testing.transfer import read_tree, write_dataset

REGIONS = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]


def test_sync_starts_gateways_early_only_when_there_is_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    dst.mkdir()
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(home))
    data = write_dataset(src, {"a.bin": 3000, "b/c.bin": 200})
    started: list[Any] = []
    early_pids: list[set[int]] = []
    adopted: list[bool] = []
    real_start, real_provision = copy_run.start_early, copy_run.provision

    def start_early(*args: Any, **kwargs: Any) -> Any:
        started.append(real_start(*args, **kwargs))
        early_pids.append({p.pid for p in started[-1].procs.values()})
        return started[-1]

    def provision(*args: Any, **kwargs: Any) -> Any:
        early = kwargs.get("early")
        fleet = real_provision(*args, **kwargs)
        adopted.append(early is not None and early.adopted)
        pids = {int(g.resources["pid"]) for g in fleet.gateways}
        if early is not None:  # the early agents serve the run, none was started anew
            assert pids == early_pids[-1]
        return fleet

    # Wrapped where the run sequence calls them.
    monkeypatch.setattr(copy_run, "start_early", start_early)
    monkeypatch.setattr(copy_run, "provision", provision)
    argv = ["sync", f"file://{src}", f"file://{dst}", *REGIONS, "--no-progress", "--json"]
    assert cli.main(argv) == 0  # work to do: gateways started early and adopted
    assert len(started) == 1 and adopted == [True]
    assert read_tree(dst) == data
    assert cli.main(argv) == 0  # up to date: no gateway at all
    assert len(started) == 1 and adopted == [True]
