"""How good ``bocast suggest`` is (issue 26 item 5): on each exhaustive table, held out of the
library (its own dataset and every record of its workload left out, only shipped datasets used,
as a replay run's warm start), the true TFLOPS and rank of the suggested top-1 and the best of the
top-8, against two zero-measurement baselines: the 8 best source rows as the target's table holds
them (model-free, the CGA's and ``warm_start_top``'s first rows) and 8 rows drawn at random (the
expectation, exact). Also the predicted TFLOPS of the top-1 over its true TFLOPS.

    python lab/suggest_quality.py experiments/results/suggest_quality

CPU only (about 30 s per table on a 2-core CPU). Writes PREFIX.md and PREFIX.json.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

from bocast.measure.replay import ReplayDataset
from bocast.records.datasets import shipped_datasets
from bocast.records.public import provenance
from bocast.space.operators.operator import from_workload
from bocast.space.space import Space
from bocast.strategies.bo.transfer import best_rows, ranked_configs
from bocast.tools.suggestions import suggest

K = 8


def _expected_best_of_random(values: np.ndarray, k: int) -> float:
    """E[max of k rows drawn without replacement] over the table's ok values (exact)."""
    v = np.sort(values)
    n = len(v)
    # P(max = v[i]) = C(i, k-1) / C(n, k) for the i-th smallest (0-based)
    logc = [math.lgamma(i + 1) - math.lgamma(k) - math.lgamma(i - k + 2) if i >= k - 1 else None
            for i in range(n)]
    total = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return float(sum(v[i] * math.exp(c - total) for i, c in enumerate(logc) if c is not None))


def table(prefix: str) -> dict:
    with open(prefix + ".json") as f:
        workload = json.load(f)["workload"]
    op = from_workload(workload)
    ds = ReplayDataset(prefix, op)
    t0 = time.perf_counter()
    got = suggest(op, k=K, candidates=ds.candidates(), exclude=[prefix], other_workloads=True,
                  shipped_only=True)
    seconds = time.perf_counter() - t0
    ok = np.array([r["tflops"] for r in ds.rows if r["status"] == "ok"], dtype=float)
    best = float(ok.max())

    def truth(config) -> float:
        r = ds.rows[ds.index[Space.key(config)]]
        return float(r["tflops"]) if r["status"] == "ok" else 0.0

    def rank(t: float) -> int:  # 1 = the table's best
        return int((ok > t).sum()) + 1

    sugg = [truth(s.config) for s in got.items]
    rows = best_rows(ranked_configs(_local(got.sources), op), ds.candidates(), set(), K)
    model_free = [truth(c) for c in rows]
    model_only = [truth(c) for c in _model_only(op, ds, got.sources)]
    top1 = got.items[0]
    return {
        "table": prefix, "workload": workload, "rows": len(ds.rows), "ok": int(len(ok)),
        "best": best, "sources": got.sources, "seconds": round(seconds, 1),
        "top1_ratio": sugg[0] / best, "top1_rank": rank(sugg[0]),
        "top8_ratio": max(sugg) / best, "top8_rank": rank(max(sugg)),
        "top1_pred_over_true": top1.tflops / sugg[0] if sugg[0] > 0 else None,
        "top1_band": [top1.low, top1.high], "top1_true": sugg[0],
        "failures_in_top8": sum(t == 0.0 for t in sugg),
        "rows_top1_ratio": model_free[0] / best if model_free else None,
        "rows_top8_ratio": max(model_free) / best if model_free else None,
        "random8_ratio": _expected_best_of_random(ok, K) / best,
        "random1_ratio": float(ok.mean()) / best,
        "model_top1_ratio": model_only[0] / best, "model_top8_ratio": max(model_only) / best,
        "top8_true": sugg, "rows_true": model_free, "model_true": model_only,
    }


def _model_only(op, ds, sources):
    """The source model's K highest means over suggest's pool, no source row put first (the
    ranking suggest used before it alternated source rows and model picks)."""
    from bocast.space.features import Features
    from bocast.strategies.bo.transfer import source_model
    from bocast.tools.suggestions import _pool

    cands = ds.candidates()
    features = Features(cands, "knobs")
    model = source_model(_local(sources), op, features, points=1024, maxiter=75)
    pool, _ = _pool(cands, model, 0)
    mean = model.surrogate.predict(features(pool)[:, model.columns]).mean.numpy()
    return [pool[i] for i in np.argsort(-mean, kind="stable")[:K]]


def _local(names):
    from bocast.records import library

    return [library.local(n) for n in names]


def main(out: str) -> None:
    prov = provenance()
    tables = [p for p in shipped_datasets() if os.path.basename(os.path.dirname(p)) == "exhaustive"]
    res = []
    for p in tables:
        r = table(p)
        res.append(r)
        print(f"{os.path.basename(p)}: top-1 {r['top1_ratio']:.3f} (rank {r['top1_rank']}), "
              f"top-8 {r['top8_ratio']:.3f} (rank {r['top8_rank']}); source rows "
              f"{r['rows_top1_ratio']:.3f}/{r['rows_top8_ratio']:.3f}; random "
              f"{r['random1_ratio']:.3f}/{r['random8_ratio']:.3f}", flush=True)
    lines = [
        "# bocast suggest on held-out tables", "",
        f"`python lab/suggest_quality.py {out}` at commit {prov.get('git_sha')} "
        f"({prov.get('date')}), CPU. Each exhaustive table held out of the library: its "
        "own dataset and every record of its workload left out, only shipped datasets used "
        "(the sources `warm_start: auto` picks on replay). Ratios are true TFLOPS (the "
        "table's measurement) over the table's best; rank 1 is the table's best row. "
        "`suggest`: what the command returns (best source rows and the source model's picks "
        "in turn, a row first); `model only`: the model's 8 highest means; "
        "`source rows`: the 8 best source rows as the table holds them, no model; `random`: "
        "the expectation for rows drawn at random (top-1: the mean row). `pred/true`: the "
        "top-1's predicted TFLOPS (read on the nearest source) over its true TFLOPS.", "",
        "| table | ok rows | sources | suggest top-1 | rank | suggest best of 8 | rank | "
        "model only top-1 / best of 8 | source rows top-1 / best of 8 | random 1 / best of 8 | "
        "top-1 pred/true | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res:
        srcs = ", ".join(os.path.basename(s) for s in r["sources"])
        pot = f"{r['top1_pred_over_true']:.2f}" if r["top1_pred_over_true"] else "-"
        lines.append(
            f"| {os.path.basename(r['table'])} | {r['ok']} | {srcs} | {r['top1_ratio']:.3f} | "
            f"{r['top1_rank']} | {r['top8_ratio']:.3f} | {r['top8_rank']} | "
            f"{r['model_top1_ratio']:.3f} / {r['model_top8_ratio']:.3f} | "
            f"{r['rows_top1_ratio']:.3f} / {r['rows_top8_ratio']:.3f} | "
            f"{r['random1_ratio']:.3f} / {r['random8_ratio']:.3f} | {pot} | {r['seconds']} |")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(out + ".json", "w") as f:
        json.dump({"provenance": prov, "k": K, "tables": res}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "experiments/results/suggest_quality")
