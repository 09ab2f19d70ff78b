"""Prometheus metrics of a run (issue 4 of issue 41): real local gateway processes, the
exporter's real HTTP server scraped while data moves, and the CLI's textfile at the end."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from skyplane_ops import api
from skyplane_ops.cli import main
from skyplane_ops.testing.transfer import write_dataset

MiB = 1024 * 1024
REGIONS = ("aws:us-east-1", "aws:us-west-2")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_while_the_run_moves_and_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"big.bin": 6 * MiB, **{f"s/{i}": 3000 for i in range(10)}})
    request = api.TransferRequest.build(
        str(src),
        str(dst),
        src_region=REGIONS[0],
        dst_region=REGIONS[1],
        part_size=MiB,
        journal_dir=str(tmp_path / "journal"),
        transfer_id="metrics-1",
    )
    metrics = api.RunMetrics("metrics-1")
    server = metrics.serve(0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    scraped: list[str] = []
    fleets: list[Any] = []
    refused: list[int] = []

    class Scrape(api.RunEvents):
        """Scrapes the exporter once while chunks are moving (the gateways are up)."""

        wants_progress = True

        def provisioned(self, fleet: Any) -> None:
            fleets.append(fleet)

        def progress(self, update: Any) -> None:
            if scraped:
                return
            scraped.append(urllib.request.urlopen(url, timeout=30).read().decode())
            # a gateway's own figures are behind its control API's signatures
            for gw in fleets[0].gateways:
                health = f"http://{gw.host}:{gw.control_port}/v1/health"
                try:
                    urllib.request.urlopen(health, timeout=30)
                except urllib.error.HTTPError as exc:
                    refused.append(exc.code)

    try:
        run = api.CopyRun(
            request, api.Gateways(backend="local"), api.MetricsEvents(metrics, Scrape())
        )
        result = run.run()
        during = _samples(scraped[0])
        (fleet,) = fleets
        for gw in fleet.gateways:
            ids = {"transfer": "metrics-1", "gateway": gw.gateway_id, "region": gw.region}
            assert _value(during, "skyplane_gateway_up", **ids) == 1.0
            assert _value(during, "skyplane_gateway_buffer_bytes", **ids, kind="capacity") > 0
        assert refused == [401] * len(fleet.gateways)
        assert _value(during, "skyplane_bytes_total", transfer="metrics-1") == sum(
            len(b) for b in data.values()
        )
        metrics.observe_result(result)
        after = _samples(urllib.request.urlopen(url, timeout=30).read().decode())
    finally:
        server.shutdown()
    assert _value(after, "skyplane_objects", transfer="metrics-1", outcome="copied") == len(data)
    assert _value(after, "skyplane_bytes_done", transfer="metrics-1") == result.bytes
    route = " -> ".join(REGIONS)
    assert _value(after, "skyplane_path_gbps", transfer="metrics-1", path=route) > 0
    assert not any(name == "skyplane_gateway_up" for name, _ in after)  # the fleet is gone


def test_queue_depths_while_a_capped_run_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bandwidth cap holds chunks in the source gateway's next-hop queue: the scrape taken
    while they wait shows them there (chunks and bytes, within the byte budget in use) and
    in the driver's in-flight queue (within its window). Scraped at each progress sample until
    seen: a wait on the condition, not on time."""
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_dataset(src, {"big.bin": 6 * MiB})
    request = api.TransferRequest.build(
        str(src),
        str(dst),
        src_region=REGIONS[0],
        dst_region=REGIONS[1],
        part_size=MiB,
        bwlimit="16Mbit",
        journal_dir=str(tmp_path / "journal"),
        transfer_id="metrics-q",
    )
    metrics = api.RunMetrics("metrics-q")
    server = metrics.serve(0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    seen: list[dict[Any, float]] = []

    def queued(samples: dict[Any, float], name: str) -> float:
        return sum(
            v
            for (n, labels), v in samples.items()
            if n == name and ("queue", "next_hop") in labels and ("next_hop", REGIONS[1]) in labels
        )

    class Scrape(api.RunEvents):
        wants_progress = True

        def progress(self, update: Any) -> None:
            if not seen:
                got = _samples(urllib.request.urlopen(url, timeout=30).read().decode())
                if queued(got, "skyplane_gateway_queued_chunks") >= 1:
                    seen.append(got)

    try:
        api.CopyRun(
            request, api.Gateways(backend="local"), api.MetricsEvents(metrics, Scrape())
        ).run()
    finally:
        server.shutdown()
    assert seen, "no scrape saw a chunk waiting for the capped hop"
    got = seen[0]
    chunks = queued(got, "skyplane_gateway_queued_chunks")
    held = queued(got, "skyplane_gateway_queued_bytes")
    in_use = sum(
        v
        for (n, labels), v in got.items()
        if n == "skyplane_gateway_buffer_bytes" and ("kind", "in_use") in labels
    )
    assert 0 < held <= chunks * MiB and held <= in_use
    flight = _value(got, "skyplane_in_flight_chunks", transfer="metrics-q")
    assert chunks <= flight <= _value(got, "skyplane_window_chunks", transfer="metrics-q")
    assert held <= _value(got, "skyplane_in_flight_bytes", transfer="metrics-q") <= 6 * MiB
    sinks = [
        v
        for (n, labels), v in got.items()
        if n == "skyplane_gateway_queued_chunks" and ("queue", "sink") in labels
    ]
    assert sinks and all(v >= 0 for v in sinks)


def test_cli_leaves_the_runs_metrics_in_a_textfile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    src = tmp_path / "src"
    data = write_dataset(src, {f"f{i}": 5000 for i in range(7)})
    out = tmp_path / "skyplane.prom"
    args = ["--src-region", REGIONS[0], "--dst-region", REGIONS[1], "--no-progress"]
    assert main(["cp", str(src), str(tmp_path / "dst"), *args, "--metrics-textfile", str(out)]) == 0
    samples = _samples(out.read_text())
    copied = [
        v
        for (n, labels), v in samples.items()
        if n == "skyplane_objects" and ("outcome", "copied") in labels
    ]
    assert copied == [len(data)]
    assert (
        main(["sync", str(src), str(tmp_path / "dst"), *args, "--metrics-textfile", str(out)]) == 0
    )
    samples = _samples(out.read_text())
    skipped = [
        v
        for (n, labels), v in samples.items()
        if n == "skyplane_objects" and ("outcome", "skipped") in labels
    ]
    assert skipped == [len(data)]


def test_the_grafana_dashboard_queries_only_exported_metrics() -> None:
    import json
    import re

    dashboard = json.loads(
        (Path(__file__).parents[2] / "docs/grafana/skyplane-ops.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bskyplane_[a-z_]+", e)}
    metrics = api.RunMetrics("t")
    metrics.retries.labels("t").inc()
    exported = {f.name for f in metrics.registry.collect()}
    exported |= {f"{n}_total" for n in exported}  # a counter's sample name
    assert used and used <= exported, used - exported
