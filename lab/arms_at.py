"""Two arms of a comparison, read from their record stores, at several trial counts: per seed
the best so far (as the comparison counts it: ok rows), the medians, and one-sided Mann-Whitney
U p-values in both directions (CPU; reads the stores only). For arms that ran in different
calls, the rows they share (the same configuration) give the drift between the calls.

    python lab/arms_at.py runs/live_v2_conv2d_q8 --a bo-rel-n2-warm-top16 \
        --b cga-warm-gemm --seeds 0 1 2 3 4 --at 1 8 32 64 100 200
"""

from __future__ import annotations

import argparse
import os
import statistics

from scipy.stats import mannwhitneyu

from bocast.records import Store
from bocast.tuner import best_so_far


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", help="a comparison's output folder (LABEL_seedN.db stores)")
    ap.add_argument("--a", required=True, help="strategy label")
    ap.add_argument("--b", required=True, help="strategy label")
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--at", type=int, nargs="+", default=[8, 32, 64, 100, 200])
    args = ap.parse_args()
    curves: dict[str, list[list[float]]] = {args.a: [], args.b: []}
    tflops: dict[str, dict[str, list[float]]] = {args.a: {}, args.b: {}}
    for label in (args.a, args.b):
        for seed in args.seeds:
            store = Store.open(os.path.join(args.folder, f"{label}_seed{seed}.db"))
            records = store.records()
            curves[label].append(best_so_far(records))
            for r in records:
                if r.succeeded:
                    tflops[label].setdefault(r.key, []).append(r.tflops)
    print(f"| trials | {args.a}: per seed | median | {args.b}: per seed | median | "
          f"p ({args.a} higher) | p ({args.b} higher) |")
    print("|---|---|---|---|---|---|---|")
    for n in args.at:
        if any(len(c) < n for cs in curves.values() for c in cs):
            raise SystemExit(f"--at {n}: a run has fewer trials")
        a = [c[n - 1] for c in curves[args.a]]
        b = [c[n - 1] for c in curves[args.b]]
        print(f"| {n} | {' '.join(f'{x:.1f}' for x in a)} | {statistics.median(a):.1f} | "
              f"{' '.join(f'{x:.1f}' for x in b)} | {statistics.median(b):.1f} | "
              f"{mannwhitneyu(a, b, alternative='greater').pvalue:.3g} | "
              f"{mannwhitneyu(b, a, alternative='greater').pvalue:.3g} |")
    shared = sorted(set(tflops[args.a]) & set(tflops[args.b]))
    if shared:
        ratios = sorted(statistics.median(tflops[args.a][k]) / statistics.median(tflops[args.b][k])
                        for k in shared)
        print(f"\n{len(shared)} configurations measured by both arms: TFLOPS {args.a} / {args.b} "
              f"median {statistics.median(ratios):.4f} [{ratios[len(ratios) // 4]:.4f}-"
              f"{ratios[(3 * len(ratios)) // 4]:.4f}]")


if __name__ == "__main__":
    main()
