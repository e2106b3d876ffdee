"""Proposal cost of BO per round (surrogate fit + classifier + acquisition for q = 32) at
100, 500 and 1000 observations, on this machine's CPU cores: a round warm-started from the
previous round's hyperparameters, as in a run, and the first (cold) round.

    python lab/bench_proposal.py --out experiments/results/proposal_cost_cpu2.json

Observations are rows of a recorded dataset (default: GEMM 4096^3, which has no failures, so
the feasibility classifier is never fitted; the conv3d dataset has 13% launch failures and
exercises it); the candidate pool is the live space (4096 fresh samples plus neighbours of the
16 best), as in a live run.

    python lab/bench_proposal.py \
        --dataset conv3d_4_16_28_28_64_64_3_3_3_1_1_1 \
        --out experiments/results/proposal_cost_conv3d_cpu2.json

``--variant LABEL=JSON`` (repeatable) times BO with those options (e.g. ``derived={"features":
"derived"}``, ``q8={"q": 8}``: ``q`` is the batch of the round, the rest strategy options); the
variants take turns within each repeat, so that on a shared machine they see the same load.
``--acquisitions`` says which acquisitions are timed.

``--threads N`` sets the strategy's ``threads`` option (torch threads during a round, at most;
default 4), to see whether the many threads of a large host help or cost on matrices of this
size: ``--threads 16`` on a 16-core host is what torch would use uncapped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset, provenance
from bocast.space.candidates import SpaceCandidates
from bocast.space.operators.operator import from_workload
from bocast.strategies import make_strategy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="gemm_4096_4096_4096")
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 500, 1000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="the BO strategy's threads option (default: the strategy's)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON",
                    help="BO options to time (q: the batch); default: one variant, {}")
    ap.add_argument("--acquisitions", nargs="*", default=["logei", "becbo", "ts"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    variants = {}
    for item in args.variant or ["default={}"]:
        label, _, text = item.partition("=")
        variants[label] = json.loads(text)
    threads = {} if args.threads is None else {"threads": args.threads}
    op = from_workload(load_dataset(args.dataset)[1]["workload"])
    ds = ReplayDataset(args.dataset, op)
    records = [ds.record(c) for c in ds.configs]
    # the first n rows in a seeded random order, so that failures are spread as in a run
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(0)).tolist()
    records = [records[i] for i in order]
    rows = []
    for n in args.sizes:
        for acq in args.acquisitions:
            cold = {v: [] for v in variants}
            warm = {v: [] for v in variants}
            for rep in range(args.repeats):
                for label, opts in variants.items():
                    opts = dict(opts)
                    q = opts.pop("q", 32)
                    # a round as in a run: the previous round's hyperparameters are the warm start
                    s = make_strategy("bo", SpaceCandidates(op.space), seed=rep, acquisition=acq,
                                      **opts, **threads)
                    s.tell(records[:n - q])
                    t0 = time.perf_counter()
                    s.ask(q)
                    cold[label].append(time.perf_counter() - t0)
                    s.tell(records[n - q:n])
                    t0 = time.perf_counter()
                    got = s.ask(q)
                    warm[label].append(time.perf_counter() - t0)
                    assert len(got) == q
            for label in variants:
                w = warm[label]
                rows.append({"variant": label, "options": variants[label], "observations": n,
                             "acquisition": acq, "median_s": statistics.median(w),
                             "min_s": min(w), "max_s": max(w),
                             "cold_median_s": statistics.median(cold[label]),
                             "pool": s.last_round.get("pool"),
                             "failures_seen": s.last_round.get("failures_seen")})
                print(f"{n:5d} obs  {acq:6s} {label:>10s}  per round {rows[-1]['median_s']:.2f} s "
                      f"(min {rows[-1]['min_s']:.2f}, max {rows[-1]['max_s']:.2f}); first round "
                      f"(cold fit) {rows[-1]['cold_median_s']:.2f} s", flush=True)
    # provenance first: opening the output (a tracked file) would mark the tree dirty
    result = {"cores": os.cpu_count(), "torch_threads": min(s.hyper["threads"],
                                                            torch.get_num_threads()),
              "load_average": os.getloadavg(), "dataset": args.dataset,
              "provenance": provenance(), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
