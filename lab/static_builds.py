"""Static builds on the CPU: sample every operator's default shape, apply, lower and compile each
sample with nvcc for sm_90, and tabulate what built, what failed (by failure class), registers,
spills and stack frames. No GPU.

    python lab/static_builds.py --sample 50 --space v2 \
        --out experiments/results/static_builds_v2.json

Stack frames are what made space v1's conv3d kernels fail to launch on the H100 (63 of 500
rows: frames of 301 KB or more); the table counts frames over 1 KB and over 256 KB.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--space", default="v2")
    ap.add_argument("--ops", nargs="*", help="operators (default: all)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from bocast.measure.builder import Builder
    from bocast.records.public import provenance
    from bocast.space.operators.operator import operators

    rows = []
    with Builder(workers=args.workers) as builder:
        for name in args.ops or list(operators()):
            op = operators()[name].from_args(None, space=args.space)
            configs = op.space.sample(args.sample, args.seed)
            t = time.perf_counter()
            res = builder.build(op, configs)
            ok = [r for r in res if r.failure_class is None]
            stack = [r.features.get("stack_bytes", 0) for r in ok]
            rows.append({
                "op": name, "workload": op.workload, "sampled": len(configs),
                "invalid": sum(bool(v) for v in op.space.validate_many(configs)),
                "built": len(ok),
                "failures": dict(collections.Counter(r.failure_class for r in res
                                                     if r.failure_class)),
                "examples": {r.failure_class: r.error[-300:] for r in res if r.failure_class},
                "registers_median": statistics.median(r.features.get("registers", 0) for r in ok)
                if ok else None,
                "with_spills": sum(r.features.get("spill_stores", 0) > 0 for r in ok),
                "stack_over_1KB": sum(s > 1024 for s in stack),
                "stack_over_256KB": sum(s > 256 * 1024 for s in stack),
                "stack_max_bytes": max(stack, default=0),
                "seconds": round(time.perf_counter() - t, 1)})
            r = rows[-1]
            print(f"{name:<18} built {r['built']}/{r['sampled']} failures {r['failures']} "
                  f"spills {r['with_spills']} stack>1KB {r['stack_over_1KB']} "
                  f">256KB {r['stack_over_256KB']} ({r['seconds']} s)", flush=True)
    with open(args.out, "w") as f:
        json.dump({"space": args.space, "sample": args.sample, "seed": args.seed, "rows": rows,
                   "provenance": provenance({"machine": "CPU (no GPU): static builds only"})},
                  f, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
