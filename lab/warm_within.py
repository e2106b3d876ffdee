"""Issue 11's warm-start criterion on a live comparison's record stores: per seed, the trials the
warm-started run needs to reach 95% of the cold run's best at ``--budget`` trials on the same
seed, and how many seeds do so within ``--within`` trials (CPU; reads the stores only).

    python lab/warm_within.py runs/live_v2_gemm_2048_8192_1024_warm --cold bo \
        --warm bo-warm-q8 --seeds 0 1 2 3 4

``--pattern`` names the stores otherwise: ``{label}_s{seed}/records.db`` reads the tune runs of
``experiments/device/warm_default.sh`` (one folder per shape).
"""

from __future__ import annotations

import argparse
import os

from bocast.records import Store
from bocast.tuner import best_so_far, first_reaching


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", help="a comparison's output folder (LABEL_seedN.db stores)")
    ap.add_argument("--cold", required=True)
    ap.add_argument("--warm", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--budget", type=int, default=200, help="the cold run's budget")
    ap.add_argument("--within", type=int, default=32)
    ap.add_argument("--pattern", default="{label}_seed{seed}.db",
                    help="a store's path in the folder")
    args = ap.parse_args()
    met = 0
    print(f"| seed | cold best@{args.budget} | warm best@{args.within} | "
          "warm trials to 95% of it |")
    print("|---|---|---|---|")
    for seed in args.seeds:
        curves = []
        for label in (args.cold, args.warm):
            store = Store.open(os.path.join(args.folder,
                                            args.pattern.format(label=label, seed=seed)))
            curves.append(best_so_far(store.records()))  # as the comparison counts: ok rows
        cold, warm = curves
        if len(cold) < args.budget:
            raise SystemExit(f"seed {seed}: the cold run has {len(cold)} trials, fewer than "
                             f"--budget {args.budget}")
        best = cold[args.budget - 1]
        hit = first_reaching(warm, 0.95 * best)
        met += hit is not None and hit <= args.within
        print(f"| {seed} | {best:.1f} | {warm[min(args.within, len(warm)) - 1]:.1f} | "
              f"{hit if hit is not None else f'not in {len(warm)}'} |")
    print(f"\nwithin {args.within} trials: {met} of {len(args.seeds)} seeds")


if __name__ == "__main__":
    main()
