"""Builder and runner throughput (kernels per second) on this machine.

    python3 lab/bench_measure.py --shape 4096,4096,4096 --n 256 --out $OUT/bench.json

The builder is warmed up first (its worker processes import TVM once), so the figure is the
steady-state rate of apply + lower + nvcc over all cores. The runner figure covers, per kernel:
loading the cubin, one checked launch against torch, and the timed repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from bocast.measure.builder import Builder
from bocast.space.operators.operator import get_operator, parse_shape


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096,4096,4096")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--runs", type=int, default=64, help="kernels to run (needs a GPU; 0 skips)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    op = get_operator("gemm").from_args(parse_shape(args.shape))
    configs = op.space.sample(args.n + 16, rng=123, unique=True)
    result = {"shape": args.shape, "cores": os.cpu_count()}
    with Builder(workers=args.workers) as builder:
        builder.build(op, configs[:16])  # start the workers
        t0 = time.perf_counter()
        builds = builder.build(op, configs[16:])
        seconds = time.perf_counter() - t0
    ok = [b for b in builds if b.cubin is not None]
    result["builder"] = {"workers": builder.workers, "kernels": len(builds), "built": len(ok),
                         "seconds": seconds, "kernels_per_s": len(builds) / seconds,
                         "median_build_s": statistics.median(b.times["total_s"] for b in builds)}
    print(f"builder: {len(builds)} kernels in {seconds:.1f} s = {len(builds) / seconds:.1f}/s "
          f"with {builder.workers} workers ({len(ok)} built)")
    if args.runs:
        from bocast.measure.runner import GpuRunner

        with GpuRunner() as runner:
            runner.run(op, ok[:2])  # start the worker
            t0 = time.perf_counter()
            runs = runner.run(op, ok[2:2 + args.runs])
            seconds = time.perf_counter() - t0
        result["runner"] = {"kernels": len(runs), "seconds": seconds,
                            "kernels_per_s": len(runs) / seconds,
                            "status": {s: sum(str(r.status) == s for r in runs)
                                       for s in {str(r.status) for r in runs}}}
        print(f"runner: {len(runs)} kernels in {seconds:.1f} s = {len(runs) / seconds:.1f}/s")
    with open(args.out, "w") as f:
        json.dump(result, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
