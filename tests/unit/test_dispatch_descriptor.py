"""The segments the control plane hands a source gateway carry only fields that say something
(every gateway on the path encodes and decodes them, per object), and a gateway reads what they
leave out as its default: offset 0, no part, no upload, no pinned version."""

from __future__ import annotations

from pathlib import Path

from gateway_agent.job import Job
from gateway_agent.stores import open_store
from skyplane_ops.transfer.dispatch.submit import _segment
from skyplane_ops.transfer.manifest import Segment


def test_a_whole_object_is_its_key_and_length() -> None:
    assert _segment(Segment("a/b", 0, 10, 0), {}) == {"key": "a/b", "length": 10}
    pinned = _segment(Segment("a/b", 0, 10, 0, "v1"), {})
    assert pinned == {"key": "a/b", "length": 10, "version": "v1"}


def test_a_part_carries_its_offset_number_and_upload() -> None:
    part = _segment(Segment("big", 8, 4, 3, None, False), {"big": "up-1"})
    assert part == {"key": "big", "length": 4, "offset": 8, "part": 3, "upload_id": "up-1"}


def test_a_gateway_reads_the_short_form(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    store = open_store(f"file://{tmp_path}")
    assert Job._read_segment(store, _segment(Segment("f", 0, 10, 0), {})) == b"0123456789"
    ranged = _segment(Segment("f", 4, 3, 2, None, False), {"f": "u"})
    assert Job._read_segment(store, ranged) == b"456"
    view = memoryview(bytearray(3))
    assert bytes(Job._read_segment_into(store, ranged, view)) == b"456"  # type: ignore[arg-type]
