"""How much could better GP hyperparameters buy? (issue 11, CPU, replay.) BO as
``bo-q8-rel-n2`` of experiments/ablation/exhaustive.yaml (BE-CBO, relative TFLOPS, noise cap
2%, batch 8 after an 8-trial uniform start), once with its hyperparameters fitted each round on
what it has measured (as always) and once with them fixed to those fitted on the WHOLE table
(an oracle no tuner has): the same seeds, hence the same first 8 trials. If the oracle needs
far fewer trials to 95% of the optimum, the model's fit is where BO loses time; if not, the
search itself (acquisition, batch) is.

Expectation, written before the first run (2026-11-24): the oracle needs somewhat fewer trials,
not half: conv2d about 35 (fitted: bo-q8-rel-n2's 45 over 50 seeds), 1024^3 about 28 (32).

    python lab/oracle_hyper.py --seeds 20 --out experiments/results/oracle_hyper
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from unittest import mock

import numpy as np
from scipy.stats import wilcoxon

from bocast.measure.parts import make_measurer, make_runner
from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset, provenance
from bocast.run.tuner import Tuner
from bocast.space.operators.operator import from_workload
from bocast.strategies import make_strategy
from bocast.strategies.bo.strategy import gp_target

TABLES = ["exhaustive/conv2d_16_14_14_256_256_3_3_1_1_1_v2",
          "exhaustive/gemm_1024_1024_1024_v2"]
BO = {"acquisition": "becbo", "y_transform": "relative", "noise_sd_max": 0.02, "n_init": 8}
BUDGET, BATCH = 200, 8


def oracle_hyper(ds: ReplayDataset, points: int) -> dict:
    """The GP's hyperparameters fitted on ``points`` rows of the whole table (relative y)."""
    s = make_strategy("bo", ds.candidates(), seed=0, **BO)
    ok = [c for c in ds.configs if ds.record(c).ok]
    y = np.array([ds.record(c).tflops for c in ok])
    s.surrogate.fit_points = points
    s.surrogate.fit(s._inputs(ok), gp_target(y, BO["y_transform"]))
    return s.surrogate._hyper


def replay(ds: ReplayDataset):
    return make_measurer(ds.op, None, make_runner("replay", dataset=ds))


def run(ds: ReplayDataset, seed: int, hyper: dict | None) -> int:
    """Trials to 95% of the table's optimum (BUDGET + 1 if never)."""
    s = make_strategy("bo", ds.candidates(), seed=seed, **BO)
    if hyper is None:
        res = Tuner(s, replay(ds), trials=BUDGET, batch_size=BATCH).run()
    else:  # every round starts from the oracle's hyperparameters and does not refit them
        s.surrogate._hyper = hyper
        with mock.patch("botorch.fit.fit_gpytorch_mll", lambda mll, **kw: mll):
            res = Tuner(s, replay(ds), trials=BUDGET, batch_size=BATCH).run()
    return res.trials_to(0.95, ds.best_tflops) or BUDGET + 1


def _iqr(v: list[int]) -> str:
    return f"{statistics.median(v)} [{np.percentile(v, 25):.0f}-{np.percentile(v, 75):.0f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", nargs="*", default=TABLES)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--oracle-points", type=int, default=2048,
                    help="table rows the oracle's hyperparameters are fitted on")
    ap.add_argument("--out", required=True, help="prefix of the .json and .md written")
    args = ap.parse_args()
    prov = provenance()
    import torch

    torch.set_num_threads(2)
    out = []
    for prefix in args.tables:
        ds = ReplayDataset(prefix, from_workload(load_dataset(prefix)[1]["workload"]))
        hyper = oracle_hyper(ds, args.oracle_points)
        fitted = [run(ds, seed, None) for seed in range(args.seeds)]
        oracle = [run(ds, seed, hyper) for seed in range(args.seeds)]
        diff = [o - f for o, f in zip(oracle, fitted)]
        p = float(wilcoxon(oracle, fitted).pvalue) if any(diff) else 1.0
        out.append({"table": prefix, "fitted": fitted, "oracle": oracle, "p": p})
        print(f"{os.path.basename(prefix)}: fitted {statistics.median(fitted)}, oracle "
              f"{statistics.median(oracle)}, paired median {statistics.median(diff):+}, "
              f"p {p:.2g}", flush=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"bo": BO, "budget": BUDGET, "batch_size": BATCH, "seeds": args.seeds,
                   "oracle_points": args.oracle_points, "tables": out, "provenance": prov}, f)
    lines = ["# GP hyperparameters: fitted each round vs fitted on the whole table (CPU)", "",
             f"`python lab/oracle_hyper.py --seeds {args.seeds}` at commit "
             f"{prov['git_sha']} ({prov['date']}). BO {BO}, batch {BATCH}, budget {BUDGET}, "
             f"replay; oracle: hyperparameters fitted once on {args.oracle_points} rows of the "
             "whole table and never refitted. Trials to 95% of the optimum, median [IQR] over "
             "seeds (the same seeds, hence the same first 8 trials); p: paired Wilcoxon.", "",
             "| table | fitted | oracle | paired median difference | p |",
             "|---|---|---|---|---|"]
    for r in out:
        d = statistics.median(o - f for o, f in zip(r["oracle"], r["fitted"]))
        lines.append(f"| `{os.path.basename(r['table'])}` | {_iqr(r['fitted'])} | "
                     f"{_iqr(r['oracle'])} | {d:+} | {r['p']:.2g} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
