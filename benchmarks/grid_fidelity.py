"""How well the default throughput model predicts measured pairs it has never seen.

k-fold cross-validation by REGION on the published Skyplane grid (63 regions, 3906 pairs,
``received`` rates): shuffle the regions, split them into k folds; per fold, fit the model
(model.fit_model) on the pairs whose both ends are outside the fold, and predict every pair
with at least one end inside it (capped by the VM caps, exactly as the shipped grid is). A
pair whose ends lie in two folds is predicted twice, once per fold; both count. Repeated for
``--repeats`` shuffles. Targets: Spearman >= 0.8 and median |ln(predicted / measured)| <= 0.2.

For comparison: the previous model (RTT + Mathis, fitted on four paper figures; never saw
the grid, so no folds) and the shipped model in-sample.

    .venv/bin/python benchmarks/grid_fidelity.py [--folds 5] [--repeats 3] [--column received]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from skyplane_ops.profiles import load_default_profile
from skyplane_ops.profiles.catalog import Region
from skyplane_ops.profiles.model import ModelParams, fit_model, great_circle_km, modelled_gbps
from skyplane_ops.profiles.published import published_rates

RESULTS = Path(__file__).parent / "results" / "grid_fidelity.json"
TARGET_SPEARMAN = 0.8
TARGET_MEDIAN_LN = 0.2

# The model shipped before the published grid (schema 1 of throughput_model.json), kept here
# only as the baseline: RTT from distance, per-flow min(window/RTT, Mathis), x 64, caps.
OLD_PARAMS = {
    "fibre_km_per_ms": 200.0,
    "detour_factor": 1.5,
    "base_rtt_ms": 5.0,
    "window_bytes": 4194304,
    "mss_bytes": 1460,
    "mathis_c": 1.2247,
    "loss_intra_cloud": 1e-7,
    "loss_inter_cloud_by_dst_provider": {"gcp": 8.5e-7, "aws": 1.0e-5, "azure": 2.9e-6},
}


def old_model_gbps(
    src: Region, dst: Region, egress: dict[str, float], ingress: dict[str, float]
) -> float:
    p: Any = OLD_PARAMS
    rtt_s = (
        p["base_rtt_ms"] + 2 * great_circle_km(src, dst) * p["detour_factor"] / p["fibre_km_per_ms"]
    ) / 1000.0
    loss = (
        p["loss_intra_cloud"]
        if src.provider == dst.provider
        else p["loss_inter_cloud_by_dst_provider"][dst.provider]
    )
    window = p["window_bytes"] * 8 / rtt_s
    mathis = p["mss_bytes"] * 8 * p["mathis_c"] / (rtt_s * math.sqrt(loss))
    return min(64 * min(window, mathis) / 1e9, egress[src.provider], ingress[dst.provider])


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties get their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Rank correlation; NaN when one side is constant (e.g. every pair at the VM cap)."""
    try:
        return statistics.correlation(ranks(a), ranks(b))
    except statistics.StatisticsError:
        return math.nan


def scores(pred: Sequence[float], meas: Sequence[float]) -> dict[str, float]:
    ln = sorted(abs(math.log(p / m)) for p, m in zip(pred, meas, strict=True))
    return {
        "n": len(ln),
        "spearman": spearman(pred, meas),
        "median_abs_ln": statistics.median(ln),
        "p90_abs_ln": ln[int(0.9 * (len(ln) - 1))],
        "median_ratio": statistics.median(p / m for p, m in zip(pred, meas, strict=True)),
    }


def cross_validate(
    data: dict[tuple[str, str], float],
    region: Callable[[str], Region],
    caps: tuple[dict[str, float], dict[str, float]],
    folds: int,
    seed: int,
) -> tuple[list[float], list[float], list[tuple[str, str]]]:
    names = sorted({r for pair in data for r in pair})
    random.Random(seed).shuffle(names)
    pred: list[float] = []
    meas: list[float] = []
    which: list[tuple[str, str]] = []
    for k in range(folds):
        held = set(names[k::folds])
        train = [
            (region(s), region(d), g)
            for (s, d), g in data.items()
            if s not in held and d not in held
        ]
        params: ModelParams = fit_model(train)
        for (s, d), g in data.items():
            if s in held or d in held:
                pred.append(modelled_gbps(params, region(s), region(d), *caps))
                meas.append(g)
                which.append((s.split(":")[0], d.split(":")[0]))
    return pred, meas, which


def run(folds: int, repeats: int, column: str) -> dict[str, Any]:
    profile = load_default_profile()
    catalog = profile.catalog
    egress = {p: profile.prices.vm(p).egress_cap_gbps for p in ("aws", "azure", "gcp")}
    ingress = {p: profile.prices.vm(p).ingress_cap_gbps for p in ("aws", "azure", "gcp")}
    data = {pair: g for pair, g in published_rates(column=column).items() if g > 0}
    cv_runs = []
    by_pair: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for seed in range(repeats):
        pred, meas, which = cross_validate(data, catalog.get, (egress, ingress), folds, seed)
        cv_runs.append({"seed": seed, **scores(pred, meas)})
        for p, m, w in zip(pred, meas, which, strict=True):
            slot = by_pair.setdefault(w, ([], []))
            slot[0].append(p)
            slot[1].append(m)
    pairs = list(data)
    meas_all = [data[p] for p in pairs]
    old = [old_model_gbps(catalog.get(s), catalog.get(d), egress, ingress) for s, d in pairs]
    fitted = fit_model([(catalog.get(s), catalog.get(d), g) for (s, d), g in data.items()])
    insample = [
        modelled_gbps(fitted, catalog.get(s), catalog.get(d), egress, ingress) for s, d in pairs
    ]
    cv = {
        "spearman": statistics.mean(r["spearman"] for r in cv_runs),
        "median_abs_ln": statistics.mean(r["median_abs_ln"] for r in cv_runs),
        "p90_abs_ln": statistics.mean(r["p90_abs_ln"] for r in cv_runs),
        "worst_spearman": min(r["spearman"] for r in cv_runs),
        "worst_median_abs_ln": max(r["median_abs_ln"] for r in cv_runs),
    }
    return {
        "benchmark": "grid_fidelity",
        "column": column,
        "folds": folds,
        "repeats": repeats,
        "published_pairs": len(data),
        "cross_validated": cv,
        "cross_validated_runs": cv_runs,
        "cross_validated_by_provider_pair": {
            f"{s}->{d}": scores(*by_pair[(s, d)]) for s, d in sorted(by_pair)
        },
        "old_model": scores(old, meas_all),
        "new_model_in_sample": scores(insample, meas_all),
        "targets": {"spearman": TARGET_SPEARMAN, "median_abs_ln": TARGET_MEDIAN_LN},
        "meets_targets": cv["worst_spearman"] >= TARGET_SPEARMAN
        and cv["worst_median_abs_ln"] <= TARGET_MEDIAN_LN,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="shuffles of the regions")
    parser.add_argument("--column", default="received", choices=("received", "sent"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.folds < 2 or args.repeats < 1:
        parser.error("--folds must be >= 2 and --repeats >= 1")
    result = run(args.folds, args.repeats, args.column)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(
        f"grid fidelity on {result['published_pairs']} published pairs ({args.column}), "
        f"{args.folds}-fold by region x {args.repeats}"
    )
    print(f"{'model':<42}{'Spearman':>9}{'med |ln|':>10}{'p90 |ln|':>10}{'med ratio':>10}")
    cv = result["cross_validated"]
    rows = [
        (
            "calibrated, held-out regions (mean)",
            cv["spearman"],
            cv["median_abs_ln"],
            cv["p90_abs_ln"],
            None,
        ),
        *[
            (
                f"  shuffle {r['seed']}",
                r["spearman"],
                r["median_abs_ln"],
                r["p90_abs_ln"],
                r["median_ratio"],
            )
            for r in result["cross_validated_runs"]
        ],
        *[
            (f"  {k}", v["spearman"], v["median_abs_ln"], v["p90_abs_ln"], v["median_ratio"])
            for k, v in result["cross_validated_by_provider_pair"].items()
        ],
        (
            "calibrated, in-sample",
            *[
                result["new_model_in_sample"][k]
                for k in ("spearman", "median_abs_ln", "p90_abs_ln", "median_ratio")
            ],
        ),
        (
            "old model (RTT + Mathis, paper-fitted)",
            *[
                result["old_model"][k]
                for k in ("spearman", "median_abs_ln", "p90_abs_ln", "median_ratio")
            ],
        ),
    ]
    for name, sp, med, p90, ratio in rows:
        tail = "" if ratio is None else f"{ratio:>10.2f}"
        print(f"{name:<42}{sp:>9.3f}{med:>10.3f}{p90:>10.3f}{tail}")
    print(
        f"targets: Spearman >= {TARGET_SPEARMAN}, median |ln| <= {TARGET_MEDIAN_LN} "
        f"(worst shuffle: {cv['worst_spearman']:.3f}, {cv['worst_median_abs_ln']:.3f}) -> "
        f"{'met' if result['meets_targets'] else 'NOT met'}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
