"""Does ``runner: rpc`` measure what the local runner measures, and how fast?

Against servers already registered under ``--key`` at ``--tracker`` (experiments/device/
rpc_check.sh starts them):

1. optionally, a tuning run through the RPC runner: ``--tune-trials`` trials of
   ``--strategy`` with one seed: wall time, kernels per second of the runner, best kernel;
2. re-measurement of ``--top`` configurations (the best of that run, else of ``--dataset``),
   built once, timed ``--rounds`` times by each runner in alternation (local first in even
   rounds, RPC first in odd ones, so drift of the clocks hits both): the median latency per
   configuration and runner, their ratio, and each runner's kernels per second;
3. with ``--tune-local``, the same tuning run through the local :class:`GpuRunner` (a seeded
   random search proposes the same configurations): its throughput, and the ratio of the two
   runs' latencies kernel by kernel. It runs last, as the claim needs it least.

The JSON (``--out``) is rewritten after every phase, so a call stopped by its time limit keeps
the phases it finished.

``--standin`` runs the same code on a CPU: stand-in runner, stand-in servers, no compilation
(configurations are "built" without TVM). Its timings are synthetic: it tests the plumbing,
never the claim.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, cast

from bocast.measure.builder import Builder, BuildResult
from bocast.measure.replay import ReplayDataset
from bocast.measure.rpc.runner import RpcRunner
from bocast.measure.runner import GpuRunner, Runner
from bocast.measure.standin import StandinRunner
from bocast.records.datasets import locate
from bocast.records.public import Store, provenance
from bocast.records.status import Status
from bocast.run.assembly import assemble
from bocast.space.candidates import SpaceCandidates
from bocast.space.operators.operator import from_workload
from bocast.space.space import Space


class StandinBuilder:
    """Builds nothing: every configuration is an OK kernel for the stand-in worker."""

    workers = 0

    def build(self, op, configs, on_result=None):
        names = tuple(t.name for t in op.tensors())
        return [BuildResult(key=Space.key(c), status=Status.OK, kernel="ok", args=names)
                for c in configs]

    def close(self):
        pass


class Timed:
    """A runner that adds up the seconds and kernels of its ``run`` calls."""

    def __init__(self, runner):
        self.runner, self.seconds, self.kernels = runner, 0.0, 0
        self.name = runner.name

    def run(self, op, builds, on_result=None):
        t0 = time.perf_counter()
        out = self.runner.run(op, builds, on_result=on_result)
        self.seconds += time.perf_counter() - t0
        self.kernels += len(builds)
        return out

    def __getattr__(self, name):
        return getattr(self.runner, name)


def local_runner(args):
    kw = dict(timeout_s=args.run_timeout, repeats=args.repeats, seed=args.seed)
    return StandinRunner(**kw) if args.standin else GpuRunner(**kw)


def tune(label: str, op, runner, builder, args) -> dict[str, Any]:
    store = Store(f"{args.store_prefix}_{label}.db", op.workload)
    if len(store):
        store.close()
        raise SystemExit(f"{args.store_prefix}_{label}.db is not empty: give a new "
                         "--store-prefix (this check compares two fresh runs)")
    timed = Timed(runner)
    tuner = assemble(args.strategy, candidates=SpaceCandidates(op.space), seed=args.seed,
                     op=op, store=store, runner=cast(Runner, timed), builder=builder,
                     session_info={"runner": runner.name, "device": runner.device(),
                                   "check": "rpc_check"},
                     trials=args.tune_trials, batch_size=args.batch)
    t0 = time.perf_counter()
    result = tuner.run()
    wall = time.perf_counter() - t0
    records = store.records()
    store.close()
    best = result.best
    print(f"tune via {label}: {result.trials} trials in {wall:.1f} s "
          f"({result.trials / wall:.2f} trials/s); runner {timed.kernels} kernels in "
          f"{timed.seconds:.1f} s ({timed.kernels / max(timed.seconds, 1e-9):.2f} kernels/s); "
          f"best {best.tflops if best else 0:.1f} TFLOPS", flush=True)
    return {"trials": result.trials, "seconds": round(wall, 2),
            "trials_per_s": result.trials / wall, "runner_kernels": timed.kernels,
            "runner_seconds": round(timed.seconds, 2),
            "runner_kernels_per_s": timed.kernels / max(timed.seconds, 1e-9),
            "best_tflops": best.tflops if best else None,
            "best_key": best.key if best else None,
            "status": dict(result.summary()["status"]),
            "latency": {r.key: r.latency_ms for r in records if r.ok},
            "configs": {r.key: r.config for r in records if r.ok},
            "measured_on": sorted({json.dumps(r.measured_on, sort_keys=True)
                                   for r in records if r.measured_on})}


def top_of_dataset(prefix: str, op, k: int) -> list[dict]:
    ds = ReplayDataset(prefix, op)
    ranked = sorted((i for i, r in enumerate(ds.rows) if r["status"] == "ok"),
                    key=lambda i: -ds.rows[i]["tflops"])
    return [ds.configs[i] for i in ranked[:k]]


def remeasure(op, configs, runners: dict, builder, args) -> dict[str, Any]:
    builds = builder.build(op, configs)
    ok = [(c, b) for c, b in zip(configs, builds) if b.status is Status.OK]
    for b in builds:
        if b.status is not Status.OK:
            print(f"  not built ({b.status}): {b.error.splitlines()[-1] if b.error else ''}")
    names = list(runners)
    lat: dict[str, dict[str, list[float]]] = {n: {b.key: [] for _, b in ok} for n in names}
    rate: dict[str, list[float]] = {n: [] for n in names}
    bad: list[str] = []
    for rnd in range(args.rounds):
        for n in (names if rnd % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            res = runners[n].run(op, [b for _, b in ok])
            rate[n].append(len(ok) / (time.perf_counter() - t0))
            for (_, b), r in zip(ok, res):
                if r.status is Status.OK:
                    lat[n][b.key].append(r.latency_ms)
                else:
                    bad.append(f"{n} round {rnd}: {r.status} {b.key}")
    rows = []
    for i, (c, b) in enumerate(ok):
        med = {n: statistics.median(lat[n][b.key]) if lat[n][b.key] else None for n in names}
        ratio = med["rpc"] / med["local"] if med["rpc"] and med["local"] else None
        rows.append({"i": i, "key": b.key, "config": c, "median_ms": med, "ratio": ratio,
                     "spread_ms": {n: [min(v), max(v)] if v else None
                                   for n, v in ((n, lat[n][b.key]) for n in names)}})
    return {"rows": rows, "kernels_per_s": {n: statistics.median(v) for n, v in rate.items()},
            "kernels_per_s_rounds": rate, "failures": bad}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tracker", required=True, help="HOST:PORT")
    p.add_argument("--key", required=True)
    p.add_argument("--dataset", required=True,
                   help="dataset prefix: its workload, and the configurations to re-measure "
                        "when no tuning run gives them")
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tune-trials", type=int, default=0)
    p.add_argument("--tune-local", action="store_true",
                   help="repeat the tuning run on the local runner (same strategy and seed)")
    p.add_argument("--strategy", default="random")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--store-prefix", default="runs/rpc_check/tune")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--run-timeout", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=None, help="build processes")
    p.add_argument("--standin", action="store_true", help="CPU plumbing test (synthetic)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)

    args.dataset = locate(args.dataset)  # a path, or a shipped dataset's name
    with open(args.dataset + ".json") as f:
        op = from_workload(json.load(f)["workload"])
    # the same kernels, built here, timed through either runner: the servers only time them
    rpc = RpcRunner(args.tracker, args.key, timeout_s=args.run_timeout, repeats=args.repeats,
                    seed=args.seed, builds="local")
    device = rpc.device()
    print(f"{op.name} {op.workload}; RPC servers under {args.key!r}: "
          + ", ".join(f"{s['host']}:{s['port']} gpu {s['gpu_index']} ({s['gpu']})"
                      for s in device["servers"]), flush=True)
    builder = StandinBuilder() if args.standin else Builder(workers=args.workers)
    local = local_runner(args)
    out: dict[str, Any] = {"workload": op.workload, "standin": args.standin,
                           "rpc_device": device, "local_device": local.device(),
                           "args": vars(args), "provenance": provenance()}
    def save():  # after every phase: a call stopped by its time limit keeps what it did
        out["rpc_lost"] = list(rpc.lost)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, separators=(",", ":"), sort_keys=True, default=str)

    try:
        if args.tune_trials:
            out["tune"] = {"rpc": tune("rpc", op, rpc, builder, args)}
            save()
            lat = out["tune"]["rpc"]["latency"]
            configs = [out["tune"]["rpc"]["configs"][k] for k in sorted(lat, key=lat.get)]
            configs = configs[:args.top]
            what = f"the {len(configs)} best of the RPC tuning run"
        else:
            configs = top_of_dataset(args.dataset, op, args.top)
            what = f"the {len(configs)} best of {args.dataset}"
        print(f"re-measuring {what}, {args.rounds} rounds, alternating", flush=True)
        configs = [op.space.from_json(c) for c in configs]
        out["remeasure"] = remeasure(op, configs, {"local": local, "rpc": rpc}, builder, args)
        report(out["remeasure"])
        save()
        if args.tune_trials and args.tune_local:  # last: the claim above needs it least
            out["tune"]["local"] = tune("local", op, local, builder, args)
            compare_tunes(out["tune"])
            save()
    finally:
        local.close()
        builder.close()
    if rpc.lost:
        print(f"servers lost or hung: {rpc.lost}")
    if args.out:
        print(f"wrote {args.out}")
    if args.standin:
        print("(stand-in: synthetic timings, a plumbing test only)")
    return 0


def report(rm: dict[str, Any]) -> None:
    print(f"{'#':>2} {'local ms':>10} {'rpc ms':>10} {'rpc/local':>9}  config")
    for r in rm["rows"]:
        m = r["median_ms"]
        print(f"{r['i']:>2} {m['local'] or float('nan'):>10.4f} {m['rpc'] or float('nan'):>10.4f} "
              f"{r['ratio'] or float('nan'):>9.4f}  {r['key'][:90]}")
    ratios = [r["ratio"] for r in rm["rows"] if r["ratio"]]
    if ratios:
        worst = max(abs(x - 1) for x in ratios)
        rm["max_abs_deviation"] = worst
        print(f"RPC/local median ratio {statistics.median(ratios):.4f}, worst deviation "
              f"{worst:.2%} ({'within' if worst <= 0.02 else 'OUTSIDE'} 2%)")
    print("kernels/s (median over rounds): " + ", ".join(
        f"{n} {v:.2f}" for n, v in rm["kernels_per_s"].items()), flush=True)
    if rm["failures"]:
        print(f"{len(rm['failures'])} failed re-measurements, e.g. {rm['failures'][0]}")


def compare_tunes(tunes: dict[str, Any]) -> None:
    """The two tuning runs measured the same kernels (seeded random search): their ratio."""
    a, b = tunes["rpc"]["latency"], tunes["local"]["latency"]
    ratios = [a[k] / b[k] for k in sorted(set(a) & set(b))]
    if not ratios:
        return
    tunes["per_kernel_ratio"] = {
        "kernels": len(ratios), "median": statistics.median(ratios),
        "within_2pct": sum(abs(r - 1) <= 0.02 for r in ratios) / len(ratios),
        "min": min(ratios), "max": max(ratios)}
    print(f"same kernels in both tuning runs: {len(ratios)}; RPC/local latency median "
          f"{statistics.median(ratios):.4f}, {tunes['per_kernel_ratio']['within_2pct']:.0%} "
          "within 2%", flush=True)


if __name__ == "__main__":
    sys.exit(main())
