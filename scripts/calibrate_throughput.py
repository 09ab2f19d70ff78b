"""Ship the published Skyplane grid and fit the default throughput model on it.

    .venv/bin/python scripts/calibrate_throughput.py \
        [--source ../shared/data/skyplane-grid-2022-01-29/throughput.csv] [--check]

Writes ``profiles/published_grid.json`` (the PREMIUM-tier rates per region pair, aggregated
by skyplane_csv.read_skyplane_csv, as two 63x63 matrices in Gbit/s rounded to 1 Mbit/s) and
the fitted ``parameters`` of ``profiles/throughput_model.json`` (model.fit_model on the
``received`` rates of every published pair between distinct regions). ``--check`` writes
nothing and exits 1 if the committed files differ from what the script would write.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from skyplane_ops.profiles.loader import default_catalog
from skyplane_ops.profiles.model import fit_model
from skyplane_ops.profiles.skyplane_csv import read_skyplane_csv

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
_DATA = Path("shared") / "data" / "skyplane-grid-2022-01-29" / "throughput.csv"
# The shared data folder sits next to the checkout (or next to its worktree folder).
DEFAULT_SOURCE = next(
    (p / _DATA for p in (ROOT.parent, ROOT.parent.parent) if (p / _DATA).exists()),
    ROOT.parent / _DATA,
)
MEASURED_AT = "2022-01-29T00:00:00+00:00"
PROVENANCE = {
    "what": "per-VM-pair throughput between 63 AWS, Azure and GCP regions, 64 TCP connections",
    "measured_by": "the Skyplane project (skyplane-project/skyplane), iperf3, 64 flows, 5 s",
    "source_file": "skyplane/data/throughput.csv at commit fe0670a0 (Apache-2.0)",
    "vm_class": {"aws": "m5.8xlarge", "azure": "Standard_D32_v5", "gcp": "n2-standard-32"},
    "tier": "PREMIUM (GCP STANDARD-tier rows are left out)",
    "aggregation": "sample-weighted mean per region pair over zones and repeats; bit/s / 1e9",
    "column_used": "received (what arrived; sent is kept for reference, median ratio ~0.79)",
    "caveats": "a snapshot of January 2022; a later run of the same method ranks pairs with "
    "Spearman ~0.7 against it, so refresh with `skyplane-ops profile`",
}


def published_document(source: Path) -> dict[str, Any]:
    catalog = default_catalog()
    rates = [r for r in read_skyplane_csv(source) if r.src != r.dst]
    regions = sorted({r.src for r in rates} | {r.dst for r in rates})
    unknown = [r for r in regions if r not in catalog]
    if unknown:
        raise SystemExit(f"regions missing from the catalog: {', '.join(unknown)}")
    index = {r: i for i, r in enumerate(regions)}
    received: list[list[float | None]] = [[None] * len(regions) for _ in regions]
    sent: list[list[float | None]] = [[None] * len(regions) for _ in regions]
    for r in rates:
        received[index[r.src]][index[r.dst]] = round(r.gbps_received, 3)
        sent[index[r.src]][index[r.dst]] = round(r.gbps_sent, 3)
    return {
        "schema_version": 1,
        "measured_at": MEASURED_AT,
        "connections": 64,
        "units": "Gbit/s (1e9 bit/s), one VM at each end",
        "provenance": PROVENANCE,
        "pairs": len(rates),
        "regions": regions,
        "gbps_received": received,
        "gbps_sent": sent,
    }


def model_parameters(doc: dict[str, Any]) -> dict[str, Any]:
    from skyplane_ops.profiles.published import published_rates

    catalog = default_catalog()
    samples = [(catalog.get(s), catalog.get(d), g) for (s, d), g in published_rates(doc).items()]
    params = fit_model(samples, connections=doc["connections"])
    return {
        "by_provider_pair": {
            key: {
                "intercept": round(fit.intercept, 5),
                "slope_per_1000km": round(fit.slope_per_1000km, 5),
                "pairs": fit.pairs,
                "rmse_ln": round(fit.rmse_ln, 4),
            }
            for key, fit in sorted(params.by_pair.items())
        }
    }


def compact_json(doc: dict[str, Any]) -> str:
    """One matrix row per line: small, diffable and still plain JSON."""
    head = {k: v for k, v in doc.items() if not k.startswith("gbps_")}
    text = json.dumps(head, indent=2)[:-2]
    for key in ("gbps_received", "gbps_sent"):
        rows = ",\n    ".join(json.dumps(row, separators=(",", ":")) for row in doc[key])
        text += f',\n  "{key}": [\n    {rows}\n  ]'
    return text + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--check", action="store_true", help="only compare with the committed")
    args = parser.parse_args(argv)
    published = published_document(args.source)
    published_text = compact_json(published)
    model_path = PROFILES / "throughput_model.json"
    model = json.loads(model_path.read_text())
    model["parameters"] = model_parameters(published)
    model_text = json.dumps(model, indent=2) + "\n"
    outputs = {PROFILES / "published_grid.json": published_text, model_path: model_text}
    if args.check:
        stale = [str(p) for p, text in outputs.items() if p.read_text() != text]
        print("up to date" if not stale else "stale: " + ", ".join(stale))
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path} ({len(text)} bytes)")
    for key, fit in model["parameters"]["by_provider_pair"].items():
        print(
            f"  {key:13} ln gbps = {fit['intercept']:+.3f} {fit['slope_per_1000km']:+.4f}"
            f" * km/1000   (n={fit['pairs']}, rmse ln {fit['rmse_ln']:.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
