"""The transfer report (issue 41): every object's outcome, written to a real S3 server (moto)
by real gateway processes' runs, read back with pyarrow and by ``skyplane-ops report``."""

from __future__ import annotations

import io
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import google_crc32c
import pyarrow.parquet as pq
import pytest

from gateway_agent.stores import open_store
from skyplane_ops import api
from skyplane_ops.cli import main
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import DST, RELAY, SRC, local_fleet, make_plan, write_dataset
from skyplane_ops.transfer import run_transfer
from skyplane_ops.transfer.result import PartialTransferError

MiB = 1024 * 1024
pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def _report(uri: str, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(summary, {key: row}) read straight from the store, as a user's pyarrow would."""
    summary = api.load_summary(uri, options)
    folder, _, name = summary["objects_uri"].rpartition("/")
    data = open_store(folder, options).read(name)
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    return summary, {r["key"]: r for r in rows}


def _crc(blob: bytes) -> str:
    return f"{google_crc32c.value(blob):08x}"


def test_report_records_every_object(tmp_path: Path, moto_s3: Any, capsys: Any) -> None:
    reports = moto_s3.make_bucket(f"r{uuid.uuid4().hex[:10]}") + "/reports"
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(
        src, {"big.bin": 11 * MiB + 5, "d/1": 10, **{f"s/{i}": 900 for i in range(20)}}
    )
    dst.mkdir()
    (dst / "d").write_bytes(b"in the way")  # a file where the key d/1 needs a folder
    plan = make_plan([SRC, DST], [SRC, RELAY, DST], shares=[0.5, 0.5])
    request = api.TransferRequest.build(
        str(src),
        str(dst),
        journal_dir=str(tmp_path / "journal"),
        part_size=5 * MiB,
        report_uri=reports,
        report_options=moto_s3.options,
        transfer_id="report-1",
    )
    routes = {f"{SRC} -> {DST}", f"{SRC} -> {RELAY} -> {DST}"}
    with local_fleet(plan, hooks=False) as (_, fleet):
        with pytest.raises(PartialTransferError) as err:
            run_transfer(plan, fleet, request)
        result = err.value.result
        run_folder = f"{reports}/{fleet.transfer_id}/{result.job_id}"
        assert result.uris["report"] == f"{run_folder}/summary.json"
        summary, rows = _report(result.uris["report"], moto_s3.options)
        assert summary["status"] == "partial" and summary["transfer_id"] == fleet.transfer_id
        assert summary["outcomes"]["copied"] == {"objects": 21, "bytes": 11 * MiB + 5 + 18000}
        assert summary["outcomes"]["failed"]["objects"] == 1
        assert set(rows) == set(data)
        assert rows["d/1"]["outcome"] == "failed" and "is a file" in rows["d/1"]["error"]
        for key, blob in data.items():
            row = rows[key]
            if key == "d/1":
                continue
            assert row["outcome"] == "copied" and row["error"] is None
            assert (row["size"], row["checksum"], row["checksum_kind"]) == (
                len(blob),
                _crc(blob),
                "crc32c",
            )
            assert row["src_version"] and row["dst_etag"]
            assert set(row["paths"].split("; ")) <= routes
            assert row["finished"] >= row["src_modified"]
        assert {p for r in rows.values() if r["paths"] for p in r["paths"].split("; ")} == routes

        # The blocker goes, a stray appears: the re-run copies d/1, skips the rest as up to
        # date and mirror-deletes the stray; the report says so object by object.
        (dst / "d").unlink()
        (dst / "stray").write_bytes(b"x")
        again = request.replace(sync=True, delete=True)
        result = run_transfer(plan, fleet, again)
    summary, rows = _report(result.uris["report"], moto_s3.options)
    assert summary["status"] == "ok"
    assert rows["d/1"]["outcome"] == "copied" and rows["d/1"]["checksum"] == _crc(data["d/1"])
    assert rows["stray"]["outcome"] == "deleted" and not (dst / "stray").exists()
    skipped = {k for k, r in rows.items() if r["outcome"] == "skipped_up_to_date"}
    assert skipped == set(data) - {"d/1"}
    assert summary["outcomes"]["skipped_up_to_date"]["objects"] == len(data) - 1

    status = main(
        ["report", fleet.transfer_id, "--reports-uri", reports,
         "--options", json.dumps(moto_s3.options)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert "skipped_up_to_date" in out and "deleted" in out and "objects.parquet" in out
    # both runs of the transfer, the partial one first, with its failed object named
    assert out.index(": partial,") < out.index(": ok,") and "failed: d/1: " in out


def test_report_uri_is_checked_before_any_work(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_dataset(src, {"a": 10})
    with pytest.raises(TransferError, match="inside the destination"):
        api.TransferRequest.build(str(src), str(dst), report_uri=str(dst / "reports"))
    with pytest.raises(TransferError, match="bad report"):
        api.TransferRequest.build(str(src), str(dst), report_uri="s3://")
    assert not dst.exists()
    request = api.TransferRequest.build(str(src), str(dst), report_uri="s3://ops-reports/r/")
    assert api.TransferRequest.from_json(request.to_json()) == request


def test_a_report_that_cannot_be_written_does_not_fail_the_copy(
    tmp_path: Path, moto_s3: Any, caplog: Any
) -> None:
    """The objects landed and verified: a missing report bucket is a warning, not a failure
    (a retry would copy nothing and fail again)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"a": 100, "b": 200})
    plan = make_plan([SRC, DST])
    request = api.TransferRequest.build(
        str(src),
        str(dst),
        journal_dir=str(tmp_path / "journal"),
        report_uri=f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/reports",
        report_options=moto_s3.options,
    )
    with caplog.at_level(logging.WARNING), local_fleet(plan, hooks=False) as (_, fleet):
        result = run_transfer(plan, fleet, request)
    assert result.verified and result.objects == len(data)
    assert "report" not in result.uris
    assert "transfer report could not be written" in caplog.text
