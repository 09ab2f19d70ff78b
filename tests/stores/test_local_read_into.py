"""The local store's ``read_into`` (the big-file source path): same bytes as ``read``, short at
the end of the file, and a pinned read of a changed file refused, never torn."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.base import SupportsReadInto
from gateway_agent.stores.errors import ObjectNotFoundError, SourceChangedError


def test_read_into_matches_read(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/")
    assert isinstance(store, SupportsReadInto)
    data = os.urandom(3 * 1024 * 1024 + 5)
    store.write("big", data)
    buf = bytearray(1024 * 1024)
    for start in (0, 1024 * 1024 - 1, 2 * 1024 * 1024):
        n = store.read_into("big", start, buf)
        assert n == len(buf) and bytes(buf) == data[start : start + n]
    n = store.read_into("big", 3 * 1024 * 1024, buf)  # the last 5 bytes only
    assert n == 5 and bytes(buf[:5]) == data[-5:]
    view = memoryview(buf)[:100]
    assert store.read_into("big", 10, view) == 100 and bytes(view) == data[10:110]
    with pytest.raises(ObjectNotFoundError):
        store.read_into("missing", 0, buf)


def test_pinned_read_into_of_a_changed_file_is_refused(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/")
    store.write("k", b"a" * 1000)
    version = store.head("k").version
    buf = bytearray(1000)
    assert store.read_into("k", 0, buf, version) == 1000
    (tmp_path / "k").write_bytes(b"b" * 1000)
    with pytest.raises(SourceChangedError):
        store.read_into("k", 0, buf, version)
    os.remove(tmp_path / "k")
    with pytest.raises(SourceChangedError):
        store.read_into("k", 0, buf, version)
