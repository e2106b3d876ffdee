"""Two arms of a comparison, read from their record stores, at several trial counts: now
``bocast report`` (:func:`bocast.report`), which this wrapper calls with the script's old
options, so that the commands in ``experiments/results/live_warm_arms.md`` still run:

    python lab/arms_at.py runs/live_v2_conv2d_q8 --a bo-rel-n2-warm-top16 \
        --b cga-warm-gemm --seeds 0 1 2 3 4 --at 1 8 32 64 100 200

is ``bocast report runs/live_v2_conv2d_q8 --arms bo-rel-n2-warm-top16 cga-warm-gemm --seeds 0 1
2 3 4 --at 1 8 32 64 100 200``: the best so far as median [IQR] (each seed's in its --json),
one-sided Mann-Whitney U p-values both ways, and the drift on the configurations both arms
measured. The script printed each seed's best in the table until 2026-11-26; the figures are
the same (bocast.run.tuner.best_so_far, ok rows).
"""

from __future__ import annotations

import argparse

import bocast


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", help="a comparison's output folder (LABEL_seedN.db stores)")
    ap.add_argument("--a", required=True, help="strategy label")
    ap.add_argument("--b", required=True, help="strategy label")
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--at", type=int, nargs="+", default=[8, 32, 64, 100, 200])
    args = ap.parse_args()
    print(bocast.report(args.folder, arms=[args.a, args.b], seeds=args.seeds,
                        at=args.at).markdown())


if __name__ == "__main__":
    main()
