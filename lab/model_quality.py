"""Model quality on the uniform tables (issue 11: "keep the uniform tables as a model-quality
test"): train BO's GP and the CGA's tree model on n random rows of a recorded table, predict the
other rows, and score the ranking: Spearman's rho against the measured TFLOPS, top-k recall
(the share of the k best held-out rows that the model's k best predictions hold), and the best
measured TFLOPS among the model's k best predictions over the table's best (what a greedy batch
of k picks would find). Each model with the knob encoding and with the derived features of
bocast/space/features.py.

    python lab/model_quality.py --out experiments/results/model_quality_replay

The GP is bocast's Surrogate, fitted on log TFLOPS (``gp``, BO's default) or on TFLOPS over the
best of the training rows (``gp-rel``, BO's ``y_transform: relative``); the tree model is the CGA's
TreeCostModel (its default, xgboost; fitted on TFLOPS over the best seen,
as the CGA does). Splits: ``--splits`` random training sets per n (seeded), the same for every
model. CPU only; no GPU is involved.
"""

from __future__ import annotations

import argparse
import json
import os
from functools import partial

import numpy as np
from scipy.stats import spearmanr

from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset, provenance
from bocast.space.features import Features
from bocast.space.operators.operator import from_workload

TABLES = ["gemm_4096_4096_4096_v2", "gemm_1024_1024_1024_v2",
          "gemm_4096_4096_4096",
          "conv2d_16_14_14_256_256_3_3_1_1_1"]


def _gp(bounds, x_tr, y_tr, x_te, seed, *, transform):
    from bocast.strategies.bo.strategy import gp_target
    from bocast.strategies.bo.surrogate import Surrogate

    s = Surrogate(bounds, seed=seed)
    s.fit(x_tr, gp_target(y_tr, transform))
    return s.predict(x_te).mean.numpy()


def _tree(bounds, x_tr, y_tr, x_te, seed):
    from bocast.strategies.ga import TreeCostModel

    m = TreeCostModel(seed)
    m.fit(x_tr, y_tr / y_tr.max())
    return m.predict(x_te)


MODELS = {"gp": partial(_gp, transform="log"), "gp-rel": partial(_gp, transform="relative"),
          "tree": _tree}
METRICS = ("spearman", "topk_recall", "topk_best")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", nargs="*", default=TABLES)
    ap.add_argument("--sizes", type=int, nargs="*", default=[32, 64, 128, 256])
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--out", required=True, help="prefix of the .json and .md written")
    args = ap.parse_args()
    prov = provenance()  # before anything is written: the outputs are tracked files
    import torch

    torch.set_num_threads(1)
    rows = []
    backend = None
    for prefix in args.tables:
        op = from_workload(load_dataset(prefix)[1]["workload"])
        ds = ReplayDataset(prefix, op)
        keep = [i for i, r in enumerate(ds.rows) if r["status"] == "ok"]
        configs = [ds.configs[i] for i in keep]
        y = np.array([ds.rows[i]["tflops"] for i in keep], float)
        cands = ds.candidates()
        feats = {kind: Features(cands, kind) for kind in ("knobs", "derived")}
        xs = {kind: f(configs) for kind, f in feats.items()}
        for n in args.sizes:
            for split in range(args.splits):
                perm = np.random.default_rng([n, split]).permutation(len(y))
                tr, te = perm[:n], perm[n:]
                top_true = set(te[np.argsort(-y[te])[: args.k]].tolist())
                for model, fit in MODELS.items():
                    for kind, f in feats.items():
                        pred = fit(f.bounds(), xs[kind][tr], y[tr], xs[kind][te], split)
                        picks = te[np.argsort(-pred)[: args.k]]
                        top_pred = set(picks.tolist())
                        rows.append({"table": prefix, "n": n, "split": split, "model": model,
                                     "features": kind,
                                     "spearman": float(spearmanr(pred, y[te]).statistic),
                                     "topk_recall": len(top_pred & top_true) / args.k,
                                     "topk_best": float(y[picks].max() / y.max())})
            print(f"{os.path.basename(prefix)} n={n} done", flush=True)
    from bocast.strategies.ga import TreeCostModel

    backend = TreeCostModel(0).backend
    summary = _summary(rows)
    result = {"tables": args.tables, "sizes": args.sizes, "splits": args.splits, "k": args.k,
              "tree_backend": backend, "summary": summary, "rows": _columns(rows, args.tables),
              "provenance": prov}
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, separators=(",", ":"))
    md = _markdown(result)
    with open(args.out + ".md", "w") as f:
        f.write(md)
    print(md)


def _columns(rows, tables):
    """The rows as one list per field, a row's table as its index in ``tables``: the same
    values in a third of the bytes of a list of objects (the file is tracked)."""
    cols = {k: [r[k] for r in rows] for k in rows[0]} if rows else {}
    if cols:
        cols["table"] = [tables.index(t) for t in cols["table"]]
    return cols


def _summary(rows):
    out = {}
    for r in rows:
        key = f"{r['table']}|{r['n']}|{r['model']}|{r['features']}"
        out.setdefault(key, {m: [] for m in METRICS})
        for m in METRICS:
            out[key][m].append(r[m])
    return {k: {m: [float(np.mean(v)), float(np.std(v))] for m, v in d.items()}
            for k, d in out.items()}


def _markdown(res) -> str:
    prov = res["provenance"]
    k = res["k"]
    lines = ["# Model quality on recorded tables (CPU)", "",
             f"`python lab/model_quality.py --out ...` at commit {prov['git_sha']} "
             f"({prov['date']}). Train on n random ok rows, predict the rest; mean (sd) over "
             f"{res['splits']} seeded splits, the same for every model. rho: Spearman against the "
             f"measured TFLOPS; recall: share of the {k} best held-out rows among the model's "
             f"{k} best predictions; best of {k}: the best measured TFLOPS among the model's {k} "
             "best predictions over the table's best. gp: BO's surrogate on log TFLOPS; gp-rel: "
             "the same on TFLOPS over the best training row (BO's y_transform: relative); tree: "
             f"the CGA's cost model ({res['tree_backend']}; TFLOPS over the best seen). knobs: "
             "the space's encoding; derived: plus bocast/space/features.py's columns.", ""]
    models = [m for m in MODELS if any(key.split("|")[2] == m for key in res["summary"])]
    for table in res["tables"]:
        lines += [f"## `{table}`", "", f"| n | model | features | rho | recall | best of {k} |",
                  "|---|---|---|---|---|---|"]
        for n in res["sizes"]:
            for m in models:
                for f in ("knobs", "derived"):
                    cell = res["summary"][f"{table}|{n}|{m}|{f}"]
                    values = [f"{cell[x][0]:.2f} ({cell[x][1]:.2f})" if x in cell else ""
                              for x in METRICS]
                    lines.append(f"| {n} | {m} | {f} | " + " | ".join(values) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
