"""Strategies on replay of every recorded dataset: best found at each budget and trials to reach
95% of the dataset's best, over many seeds. CPU only.

    python experiments/bench_bo_replay.py --seeds 20 --budget 256 --out experiments/results/bo_replay

Writes OUT.csv (one row per run) and OUT.md (median and interquartile range per strategy).
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

STRATEGIES = {
    "random": ("random", {}),
    "bo-logei": ("bo", {"acquisition": "logei"}),
    "bo-becbo": ("bo", {"acquisition": "becbo"}),
    "bo-ts": ("bo", {"acquisition": "ts"}),
}
BUDGETS = (32, 64, 128, 256)


def one_run(job):
    import torch

    from bocast.measure.replay import ReplayDataset, ReplayMeasurer
    from bocast.operator import from_workload
    from bocast.records import load_dataset
    from bocast.strategies import make_strategy
    from bocast.tuner import Tuner

    torch.set_num_threads(1)
    prefix, label, seed, budget = job
    _, meta = load_dataset(prefix)
    op = from_workload(meta["workload"])
    ds = ReplayDataset(prefix, op)
    name, hyper = STRATEGIES[label]
    strategy = make_strategy(name, ds.candidates(), seed=seed, **hyper)
    t0 = time.perf_counter()
    # random search is cheap: run it through the whole table so that its trials-to-95% is
    # never censored by the budget (its best-at-budget figures are read off the same run)
    trials = len(ds.configs) if name == "random" else budget
    res = Tuner(strategy, ReplayMeasurer(ds), trials=trials, batch_size=32,
                optimum=ds.best_tflops).run()
    row = {"dataset": os.path.basename(prefix), "strategy": label, "seed": seed,
           "trials_to_95pct": res.trials_to(0.95) or "", "optimum": ds.best_tflops,
           "seconds": round(time.perf_counter() - t0, 2),
           "max_proposal_s": round(max(res.proposal_seconds), 3)}
    for b in BUDGETS:
        if b <= budget:
            row[f"best_at_{b}"] = res.best_so_far[min(b, len(res.best_so_far)) - 1]
    return row


def iqr(values):
    v = sorted(values)
    if len(v) < 2:
        return (v[0], v[0]) if v else (float("nan"),) * 2
    q = statistics.quantiles(v, n=4)
    return q[0], q[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", nargs="*", default=sorted(
        p[:-len(".csv.gz")] for p in glob.glob("experiments/data/*.csv.gz")))
    ap.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    jobs = [(d, s, seed, args.budget) for d in args.datasets for s in args.strategies
            for seed in range(args.seeds)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(one_run, jobs))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = [f"# Strategies on replay ({args.seeds} seeds, budget {args.budget}, batch 32)", "",
             "Median [IQR] over seeds. trials-to-95%: first trial whose best-so-far reaches 95% "
             "of the dataset's best (BO runs that never reach it within the budget count as "
             "budget + 1; random search runs through the whole table, so its figure is never "
             "censored; `reached` counts runs that reached it within the budget).", ""]
    for d in args.datasets:
        name = os.path.basename(d)
        lines += [f"## {name}", "",
                  "| strategy | trials to 95% | reached | " +
                  " | ".join(f"best@{b}" for b in BUDGETS if b <= args.budget) + " |",
                  "|---" * (3 + sum(b <= args.budget for b in BUDGETS)) + "|"]
        for s in args.strategies:
            rs = [r for r in rows if r["dataset"] == name and r["strategy"] == s]
            t95 = [r["trials_to_95pct"] or args.budget + 1 for r in rs]
            within = sum(bool(r["trials_to_95pct"]) and r["trials_to_95pct"] <= args.budget
                         for r in rs)
            lo, hi = iqr(t95)
            cells = [f"{statistics.median(t95):.0f} [{lo:.0f}-{hi:.0f}]",
                     f"{within}/{len(rs)}"]
            for b in BUDGETS:
                if b <= args.budget:
                    v = [r[f"best_at_{b}"] for r in rs]
                    lo, hi = iqr(v)
                    cells.append(f"{statistics.median(v):.1f} [{lo:.1f}-{hi:.1f}]")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"Total {len(rows)} runs in {time.perf_counter() - t0:.0f} s with "
                 f"{args.workers} processes.")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
