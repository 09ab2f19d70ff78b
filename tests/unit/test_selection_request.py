"""The selection and overwrite controls of ``TransferRequest`` (issue 39): parsed once, one-line
errors before any work, JSON round trip; the window they leave over modification times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import TransferRequest
from skyplane_ops.transfer.selection import Window, key_list, window


def _req(**fields: object) -> TransferRequest:
    return TransferRequest.build("s3://src-bucket/x", "s3://dst-bucket/y", **fields)


def test_selection_fields_are_normalized_and_round_trip_through_json() -> None:
    request = _req(
        max_age="2h",
        min_age=60,
        changed_since="2026-01-31 10:00:00",
        changed_before=datetime(2026, 2, 1, tzinfo=UTC),
        files_from="a/1\n\n# a comment\nb/2\r\na/1\n",
        update=True,
    )
    assert request.max_age == 7200.0 and request.min_age == 60.0
    assert request.changed_since == "2026-01-31T10:00:00+00:00"
    assert request.changed_before == "2026-02-01T00:00:00+00:00"
    assert request.files_from == ("a/1", "b/2")
    assert TransferRequest.from_json(request.to_json()) == request
    assert request.selects_part and request.lists_destination


@pytest.mark.parametrize(
    ("value", "keys"),
    [
        (["x", "y"], ("x", "y")),
        ('["x", "y"]', ("x", "y")),  # an XCom rendered as JSON
        ("['x', 'y']", ("x", "y")),  # ... or as a Python list
        ("x\ny\n", ("x", "y")),
    ],
)
def test_a_key_list_is_read_from_every_form_an_upstream_task_hands_over(
    value: object, keys: tuple[str, ...]
) -> None:
    assert key_list(value) == keys


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_age": "soon"}, "max_age (--max-age): cannot read duration 'soon'"),
        ({"max_age": -5}, "must not be negative"),
        ({"min_age": "2h", "max_age": "1h"}, "min_age (7200s) must be less than max_age"),
        ({"changed_since": "yesterday"}, "changed_since (--changed-since) must be an ISO 8601"),
        (
            {"changed_since": "2026-02-01", "changed_before": "2026-01-01"},
            "must be before changed_before",
        ),
        ({"files_from": []}, "names no key"),
        ({"files_from": [""]}, "every key must be a non-empty string"),
        ({"ignore_existing": True, "update": True}, "not both"),
        ({"delete": True, "max_age": "1d"}, "it would remove every destination object"),
        ({"delete": True, "files_from": ["k"]}, "cannot be combined"),
    ],
)
def test_bad_controls_fail_in_one_line_when_the_request_is_built(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(TransferError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _req(**fields)


def test_the_window_is_the_narrowest_of_the_controls() -> None:
    now = 1_800_000_000.0
    win = window(3600.0, 60.0, "2020-01-01T00:00:00+00:00", None, now)
    assert win.lo == int((now - 3600) * 1e6) and win.hi == int((now - 60) * 1e6)
    assert win.keeps(int((now - 100) * 1e6)) and not win.keeps(int((now - 30) * 1e6))
    assert not win.keeps(None) and Window().keeps(None)


def test_a_cap_too_low_for_the_part_size_says_which_part_size_would_do() -> None:
    """A capped hop sends a frame whole and then waits: at a low cap that quiet time would
    look like a dead hop, so the request refuses it up front, naming the fix."""
    with pytest.raises(TransferError, match=r"give --chunk-mib 59 or less"):
        _req(bwlimit="50Mbit", part_size=64 << 20)
    assert _req(bwlimit="50Mbit", part_size=8 << 20).bwlimit_bps == 50e6 / 8
    with pytest.raises(TransferError, match=r"the least cap is 0.8 MB/s"):
        _req(bwlimit="2Mbit", part_size=1 << 20)
