"""The surrogate's fast posterior (one Cholesky factor kept from the fit,
bocast/strategies/bo/surrogate.py) against BoTorch's ``model.posterior`` of the same GP: seconds to
score ``m`` candidates (mean and latent variance) given ``n`` observations, median of ``--repeats``
after two warm-up calls (BoTorch's prediction cache is then built, as the fast path's factor is),
and the largest difference between the two (the surrogate made with ``jitter=0``, where they are the
same GP).

    python lab/bench_posterior.py

Observations are the first ``n`` ok rows of a recorded dataset (default GEMM 4096^3, space
v2), candidates ``m`` fresh samples of its live space, in BO's default encoding; torch runs on
``--threads`` threads (BO's default cap is 4).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from bocast.measure.replay import ReplayDataset
from bocast.records.public import load_dataset
from bocast.space.candidates import SpaceCandidates
from bocast.space.features import Features
from bocast.space.operators.operator import from_workload
from bocast.strategies.bo.surrogate import Surrogate


def _median_seconds(fns, repeats: int) -> list[float]:
    """Median seconds of each of ``fns``, taking turns within each repeat (on a shared machine
    they see the same load), after two warm-up calls each (BoTorch builds its prediction cache
    on the first)."""
    for fn in fns:
        fn()
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="gemm_4096_4096_4096_v2")
    ap.add_argument("--m", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--n", type=int, nargs="+", default=[32, 200])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=min(4, torch.get_num_threads()))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    _, meta = load_dataset(args.dataset)
    op = from_workload(meta["workload"])
    ds = ReplayDataset(args.dataset, op)
    features = Features(SpaceCandidates(op.space), "knobs")
    ok = [(c, r["tflops"]) for c, r in zip(ds.configs, ds.rows) if r["status"] == "ok"]
    pool = features.candidates.sample(max(args.m), np.random.default_rng(0), set())
    print(f"{args.dataset}: d = {features.bounds().shape[1]} inputs, torch threads "
          f"{args.threads}, median of {args.repeats}")
    print("| n | m | fast path s | BoTorch posterior s | BoTorch / fast | max abs diff |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        x = features([c for c, _ in ok[:n]])
        y = np.log([t for _, t in ok[:n]])
        s = Surrogate(features.bounds(), maxiter=75, seed=0, jitter=0.0)
        s.fit(x, y)
        model = s.botorch_model()
        for m in args.m:
            xp = features(pool[:m])
            xs = s.scale(xp)

            def botorch(xs=xs, model=model):
                with torch.no_grad():
                    post = model.posterior(xs)
                    return post.mean.squeeze(-1), post.variance.squeeze(-1)

            fast, slow = _median_seconds([lambda xp=xp, s=s: s.predict(xp), botorch],
                                         args.repeats)
            pred, (mean, var) = s.predict(xp), botorch()
            diff = max(float((pred.mean - mean).abs().max()), float((pred.var - var).abs().max()))
            print(f"| {n} | {m} | {fast:.4f} | {slow:.4f} | {slow / fast:.1f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
