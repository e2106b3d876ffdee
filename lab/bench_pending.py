"""BO's ask with pending points (the pipelined loop's, ``Strategy.ask(n, pending)``) against the
same ask without them, on the live space of a recorded dataset's workload (default GEMM 4096^3,
space v3) after a few hundred told trials, and where a round's time goes.

    python lab/bench_pending.py --out experiments/results/bench_pending_cpu2/after_1.json
    python lab/bench_pending.py --torch-first --out .../before_1.json

For each number of told trials ``n``, batch ``q`` and repeat: a strategy is told the first
``n - q`` rows of the dataset (a seeded random order), asks ``q`` (its hyperparameters are then
warm, as in a run), is told the next ``q`` rows and copied: one copy asks ``q`` without pending
points (the plain loop's ask), and its picks are the *pending* batch (what BO itself has in
flight); another asks ``q`` with that batch pending (the pipelined loop's ask); a third asks it
again (a resumed run's replayed ask must pick the same). The phases of each timed ask are timed
by wrapping the strategy's methods (wall seconds): the GP fit (hyperparameters and the
factor), the believer's conditioning on the pending points, the feasibility classifier, the
pool, the model inputs, the pool's posterior, the batch selection; and the process's CPU
seconds beside the wall seconds (threads that spin for work burn CPU).

``--torch-first`` imports torch before bocast, so that bocast's default for OpenMP's wait
policy (``bocast/__init__.py``: passive, set only where the environment does not say) does not
reach torch's OpenMP runtime, which reads it when torch loads: the asks as they were before it.
The two arms must be separate processes; run them in turn (the machine's load changes).
"""

from __future__ import annotations

import argparse
import collections
import copy
import importlib
import json
import os
import statistics
import time

#: (label, object, method): the phases of a BO round
PHASES = (("fit", "surrogate", "fit"), ("believe", "surrogate", "believe"),
          ("pool", None, "_pool"), ("inputs", None, "_inputs"),
          ("predict", "surrogate", "predict"), ("select", "acquisition", "select"))


def timed_ask(s, q: int, pending) -> tuple[list, dict[str, float]]:
    """``s.ask(q, pending)``, and its wall seconds by phase (``total``, ``cpu``: the
    process's CPU seconds)."""
    spent: dict[str, float] = collections.defaultdict(float)
    for label, owner, name in PHASES:
        obj = s if owner is None else getattr(s, owner)
        f = getattr(obj, name)

        def wrapped(*a, _f=f, _label=label, **k):
            t = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                spent[_label] += time.perf_counter() - t

        setattr(obj, name, wrapped)
    t, c = time.perf_counter(), time.process_time()
    got = s.ask(q, pending)
    spent["total"] = time.perf_counter() - t
    spent["cpu"] = time.process_time() - c
    return got, dict(spent)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="gemm_4096_4096_4096_v3")
    ap.add_argument("--sizes", type=int, nargs="*", default=[160, 288])
    ap.add_argument("--batch", type=int, nargs="*", default=[16, 32])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None,
                    help="the BO strategy's threads option (default: the strategy's)")
    ap.add_argument("--torch-first", action="store_true",
                    help="import torch before bocast (see the docstring)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    given = os.environ.get("OMP_WAIT_POLICY")  # what torch's OpenMP reads when torch loads
    if args.torch_first:
        importlib.import_module("torch")
    else:
        importlib.import_module("bocast")  # its default for the policy, before torch loads
        given = os.environ.get("OMP_WAIT_POLICY")
    import torch

    from bocast.measure.replay import ReplayDataset
    from bocast.records.public import load_dataset, provenance
    from bocast.space.candidates import SpaceCandidates
    from bocast.space.operators.operator import from_workload
    from bocast.space.space import Space
    from bocast.strategies import make_strategy

    threads = {} if args.threads is None else {"threads": args.threads}
    op = from_workload(load_dataset(args.dataset)[1]["workload"])
    ds = ReplayDataset(args.dataset, op)
    records = [ds.record(c) for c in ds.configs]
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(0)).tolist()
    records = [records[i] for i in order]
    rows = []
    for n in args.sizes:
        for q in args.batch:
            row: dict = {"told": n, "q": q, "plain": [], "pending": [], "picks": [],
                         "replayed_same": True}
            for rep in range(args.repeats):
                s = make_strategy("bo", SpaceCandidates(op.space), seed=rep, **threads)
                s.tell(records[:n - q])
                s.ask(q)  # the hyperparameters of the round before: a warm fit, as in a run
                s.tell(records[n - q:n])
                a, b, c = copy.deepcopy(s), copy.deepcopy(s), copy.deepcopy(s)
                in_flight, phases = timed_ask(a, q, ())
                row["plain"].append(phases)
                for x in (b, c):  # what a run's strategy knows of the batch it asked
                    x.proposed |= {Space.key(cfg) for cfg in in_flight}
                got, phases = timed_ask(b, q, in_flight)
                row["pending"].append(phases)
                again = c.ask(q, in_flight)
                keys = [Space.key(x) for x in got]
                row["picks"].append([[Space.key(x) for x in in_flight], keys])
                row["replayed_same"] &= keys == [Space.key(x) for x in again]
                assert len(got) == q and not set(keys) & set(row["picks"][-1][0])
            rows.append(row)
            med = {arm: {k: statistics.median(p.get(k, 0.0) for p in row[arm])
                         for k in row[arm][0]} for arm in ("plain", "pending")}
            row["median"] = med
            parts = " ".join(f"{k} {med['pending'].get(k, 0.0):.3f}" for k, _, _ in PHASES)
            print(f"told {n:4d} q {q:3d}: ask {med['plain']['total']:.3f} s (cpu "
                  f"{med['plain']['cpu']:.3f}), with {q} pending {med['pending']['total']:.3f} s "
                  f"(cpu {med['pending']['cpu']:.3f}; {parts}); replayed ask the same: "
                  f"{row['replayed_same']}", flush=True)
    result = {"cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
              "omp_wait_policy": given,
              "torch_first": args.torch_first, "load_average": os.getloadavg(),
              "dataset": args.dataset, "provenance": provenance(), "rows": rows}
    print(f"OMP_WAIT_POLICY {result['omp_wait_policy']} (torch first: {args.torch_first}); "
          f"load average {result['load_average'][0]:.2f} on {result['cores']} cores")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
