"""``CapFollower``: a cap asked for through the state store lands in the run's live file once;
a value that does not parse or a store that fails never stops the run (issue 39)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.bwlimit import read_live
from skyplane_ops.transfer.bwlimit_remote import CapFollower


def test_a_cap_in_the_store_is_copied_to_the_live_file_once(tmp_path: Path) -> None:
    uri = (tmp_path / "state").as_uri()
    live = tmp_path / "home" / "bwlimit" / "t-1"
    follower = CapFollower(api.TransferState(uri, "t-1"), live)
    assert not follower.poll() and not live.exists()  # nothing asked for yet
    assert api.set_bwlimit("t-1", " 50MiB ", state_uri=uri) == 50 * 2**20
    assert follower.poll() and read_live(live) == 50 * 2**20
    assert not follower.poll()  # the same request is not written again
    live.write_text("10MiB")  # a local change (skyplane-ops bwlimit on the run's host) stays
    assert not follower.poll() and read_live(live) == 10 * 2**20
    api.TransferState(uri, "t-1").set_bwlimit("fast")  # not through set_bwlimit: unchecked
    assert not follower.poll() and read_live(live) == 10 * 2**20


def test_the_store_gets_only_a_valid_rate(tmp_path: Path) -> None:
    uri = (tmp_path / "state").as_uri()
    with pytest.raises(TransferError, match="rate"):
        api.set_bwlimit("t-1", "200", state_uri=uri)
    assert api.TransferState(uri, "t-1").read_bwlimit() is None


def test_a_failing_store_is_logged_not_raised(tmp_path: Path) -> None:
    class Broken(api.TransferState):
        def read_bwlimit(self) -> str | None:
            raise TransferError("the store is down")

    live = tmp_path / "bwlimit" / "t-1"
    with CapFollower(Broken((tmp_path / "s").as_uri(), "t-1"), live, every=0.01) as follower:
        assert not follower.poll()
    assert not live.exists()


def test_the_airflow_hook_and_the_dagster_resource_write_to_their_state_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same names in both faces: each writes where its runs look (``state_store``)."""
    import json

    from skyplane_ops.airflow.hooks import SkyplaneHook
    from skyplane_ops.dagster.resource import SkyplaneResource

    airflow_store, dagster_store = (tmp_path / "a").as_uri(), (tmp_path / "d").as_uri()
    extra = {"backend": "local", "state_store": airflow_store}
    monkeypatch.setenv("AIRFLOW_CONN_SKY_BW", json.dumps({"conn_type": "skyplane", "extra": extra}))
    assert SkyplaneHook("sky_bw").set_bwlimit("t-a", "200Mbit") == 25e6
    assert api.TransferState(airflow_store, "t-a").read_bwlimit() == "200Mbit"
    assert SkyplaneResource(state_store=dagster_store).set_bwlimit("t-d", "25MiB") == 25 * 2**20
    assert api.TransferState(dagster_store, "t-d").read_bwlimit() == "25MiB"
    with pytest.raises(TransferError, match="rate"):
        SkyplaneHook("sky_bw").set_bwlimit("t-a", "200")
    # Without a state store, the resource writes this host's live file.
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    SkyplaneResource().set_bwlimit("t-l", "10MiB")
    assert read_live(api.live_path("t-l")) == 10 * 2**20
