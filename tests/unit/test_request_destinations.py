"""``TransferRequest`` with several destinations: checked once when built, JSON round trip,
one single-destination request per destination; one destination stays exactly as before."""

from __future__ import annotations

import dataclasses

import pytest

from skyplane_ops.errors import TransferError
from skyplane_ops.sequence.fanout import destination_plan
from skyplane_ops.testing.transfer import SRC, make_plan
from skyplane_ops.transfer.request import TransferRequest


def _three(**kw: object) -> TransferRequest:
    return TransferRequest.build(
        "file:///data/src",
        ["file:///r/a", "file:///r/b", "file:///r/c"],
        src_region="aws:us-east-1",
        dst_region=["aws:eu-west-1", "aws:eu-central-1", "gcp:europe-west4"],
        **kw,  # type: ignore[arg-type]
    )


def test_several_destinations_round_trip_and_split() -> None:
    req = _three(include=["*.csv"])
    assert req.multi and req.dst.uri == "file:///r/a" and req.dst_region == "aws:eu-west-1"
    assert TransferRequest.from_json(req.to_json()) == req
    parts = req.per_destination()
    assert [p.dst_uri for p in parts] == ["file:///r/a", "file:///r/b", "file:///r/c"]
    assert [p.dst_region for p in parts] == list(req.dst_regions)
    assert all(not p.multi and p.include == ("*.csv",) for p in parts)
    assert len({p.key for p in parts}) == 3  # a journal and a lock per destination


def test_one_destination_is_unchanged() -> None:
    one = TransferRequest.build("file:///data/src", "file:///r/a", dst_region="aws:eu-west-1")
    listed = TransferRequest.build(
        "file:///data/src", ["file:///r/a"], dst_region=["aws:eu-west-1"]
    )
    assert one == listed and not one.multi and one.per_destination() == [one]
    assert one.to_dict()["destinations"] == [] and TransferRequest.from_json(one.to_json()) == one


@pytest.mark.parametrize(
    ("dsts", "regions", "message"),
    [
        (["file:///r/a", "file:///r/a"], None, "overlap"),
        (["file:///r/a", "file:///r/a/inner"], None, "overlap"),
        (["file:///r/a", "file:///data/src/x"], None, "inside the source"),
        (["file:///r/a", "file:///r/b"], ["aws:eu-west-1"], "one per destination"),
        (["file:///r/a", "file:///r/b"], ["aws:eu-west-1", "aws:eu-west-1"], "its own region"),
    ],
)
def test_bad_destinations_are_one_line_errors(
    dsts: list[str], regions: list[str] | None, message: str
) -> None:
    with pytest.raises(TransferError, match=message) as err:
        TransferRequest.build("file:///data/src", dsts, dst_region=regions)
    assert "\n" not in str(err.value)


def test_a_destinations_plan_is_its_routes_of_the_multicast_plan() -> None:
    tree = make_plan([SRC, "t:x"], [SRC, "t:x", "t:y"], shares=[1.0, 1.0])
    plan = dataclasses.replace(tree, dsts=("t:x", "t:y"))
    y = destination_plan(plan, "t:y")
    assert y.dsts == ("t:y",) and [p.regions for p in y.paths] == [(SRC, "t:x", "t:y")]
    assert y.paths[0].share == 1.0 and {(h.src, h.dst) for h in y.hops} == {
        (SRC, "t:x"),
        ("t:x", "t:y"),
    }
    with pytest.raises(TransferError, match="no destination"):
        destination_plan(plan, "t:z")


def test_one_destination_runs_refuse_a_request_with_several() -> None:
    from skyplane_ops.sequence.copy_run import CopyRun

    with pytest.raises(TransferError, match="FanoutRun"):
        CopyRun(_three())


def test_a_given_plan_must_name_every_destination() -> None:
    from skyplane_ops.sequence.copy_run import Gateways
    from skyplane_ops.sequence.fanout import FanoutRun

    one = make_plan(["aws:us-east-1", "aws:eu-west-1"])
    with pytest.raises(TransferError, match="not to every destination"):
        FanoutRun(_three(), Gateways(plan=one)).run()  # refused before listing or provisioning


def test_a_move_takes_one_destination() -> None:
    with pytest.raises(TransferError, match="one destination"):
        _three(move=True)  # deleting the source after the first replica would starve the others


def test_a_report_inside_any_destination_is_refused() -> None:
    with pytest.raises(TransferError, match="inside the destination file:///r/c"):
        _three(report_uri="file:///r/c/reports")
