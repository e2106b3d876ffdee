"""The warm-started GP's fit with the source column scaled as before issue 40 and as now.

Before, the source model's mean (the target GP's extra input under a warm start) was scaled with
bounds from a 2048-point sample of the live space alone, so the rows a warm start measures first
(what the source model rates best) lay above 1 (BoTorch's InputDataWarning). Now the bounds also
cover the source rows' means, with a margin (:func:`bocast.strategies.bo.transfer.mean_bounds`).
This script fits the target GP both ways on the same observations of an exhaustive table and scores
each on the table's other rows: Spearman's rho of the predicted mean against the measured log
TFLOPS, and top-k recall (the share of the k best held-out rows among the k best predicted).

Observations per split: the ``--top`` table rows the source model rates best (what a warm start
measures first) plus ``--random`` other ok rows (seeded). The candidates for the old bounds are
the live space's (as in a live run), which is where the inputs left the unit cube.

    python lab/source_column_fit.py --splits 10

CPU only, a few minutes.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from scipy.stats import spearmanr

from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset
from bocast.space.candidates import SpaceCandidates
from bocast.space.features import Features
from bocast.space.operators.operator import from_workload
from bocast.strategies.bo.surrogate import Surrogate
from bocast.strategies.bo.transfer import source_model

TARGET = "exhaustive/gemm_2048_8192_1024_v3"
SOURCES = ["gemm_4096_4096_4096_v3", "gemm_1024_1024_1024_v3"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("--sources", nargs="+", default=SOURCES)
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--random", type=int, default=32)
    ap.add_argument("--k", type=int, default=20)
    args = ap.parse_args()

    op = from_workload(load_dataset(args.target)[1]["workload"])
    ds = ReplayDataset(args.target, op)
    feats = Features(SpaceCandidates(op.space, op.workload), "knobs")  # live-like bounds
    src = source_model(args.sources, op, feats, points=1024, maxiter=75)
    ok = [i for i, r in enumerate(ds.rows) if r["status"] == "ok"]
    configs = [ds.configs[i] for i in ok]
    y = np.log(np.array([ds.rows[i]["tflops"] for i in ok], float))
    x = feats(configs)
    raw = src.mean(x)
    sampled = src.mean(feats(feats.candidates.reference_configs()))
    old = np.array([sampled.min(), sampled.max()])  # the bounds before issue 40
    variants = {"before (sample bounds)": (old, raw),
                "after (mean_bounds + clip)": (src.bounds, src.column(x))}
    order = np.argsort(-raw, kind="stable")
    print(f"target {args.target}: {len(ok)} ok rows; sources {', '.join(args.sources)}")
    for name, (b, col) in variants.items():
        lo, hi = b
        print(f"  {name}: column bounds [{lo:.2f}, {hi:.2f}]; table rows' column "
              f"[{col.min():.2f}, {col.max():.2f}]; scaled max {(col.max() - lo) / (hi - lo):.3f}")
    rows = {n: {"rho": [], "recall": [], "warned": 0} for n in variants}
    for split in range(args.splits):
        rng = np.random.default_rng(split)
        top = list(order[: args.top])
        rest = [i for i in range(len(ok)) if i not in set(top)]
        train = np.array(top + list(rng.choice(rest, args.random, replace=False)))
        test = np.setdiff1d(np.arange(len(ok)), train)
        for name, (b, col) in variants.items():
            xb = np.hstack([x, col[:, None]])
            bounds = np.hstack([feats.bounds(), np.asarray(b)[:, None]])
            gp = Surrogate(bounds, seed=split)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                gp.fit(xb[train], y[train])
            rows[name]["warned"] += any("unit cube" in str(w.message) for w in caught)
            pred = gp.mean(xb[test]).numpy()
            rows[name]["rho"].append(spearmanr(pred, y[test]).statistic)
            best_true = set(test[np.argsort(-y[test])[: args.k]])
            best_pred = set(test[np.argsort(-pred)[: args.k]])
            rows[name]["recall"].append(len(best_true & best_pred) / args.k)
    print(f"\n| bounds | Spearman rho, median [min-max] | top-{args.k} recall | fits that "
          "warned |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        rho, rec = np.array(r["rho"]), np.array(r["recall"])
        print(f"| {name} | {np.median(rho):.3f} [{rho.min():.3f}-{rho.max():.3f}] | "
              f"{np.median(rec):.2f} [{rec.min():.2f}-{rec.max():.2f}] | "
              f"{r['warned']}/{args.splits} |")


if __name__ == "__main__":
    main()
