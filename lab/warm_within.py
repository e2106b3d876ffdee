"""Issue 11's warm-start criterion on a live comparison's record stores: per seed, the trials the
warm-started run needs to reach 95% of the cold run's best at ``--budget`` trials on the same
seed, and how many seeds do so within ``--within`` trials. Now ``bocast report``
(:func:`bocast.report`), which this wrapper calls with the script's old options, so that the
command RESULTS.md names still runs:

    python lab/warm_within.py runs/live_v2_gemm_2048_8192_1024_warm --cold bo \
        --warm bo-warm-q8 --seeds 0 1 2 3 4

is ``bocast report runs/live_v2_gemm_2048_8192_1024_warm --arms bo bo-warm-q8 --seeds 0 1 2 3
4 --baseline bo --budget 200 --within 32 --at 32 200`` (its "within 32" row: the seeds that
meet the criterion). ``--pattern`` names the stores otherwise: ``{label}_s{seed}/records.db``
reads the tune runs of ``experiments/device/warm_default.sh`` (one folder per shape). A cold run
shorter than ``--budget`` is reported as such for its seed (the script stopped there until
2026-11-26).
"""

from __future__ import annotations

import argparse

import bocast


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", help="a comparison's output folder (LABEL_seedN.db stores)")
    ap.add_argument("--cold", required=True)
    ap.add_argument("--warm", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--budget", type=int, default=200, help="the cold run's budget")
    ap.add_argument("--within", type=int, default=32)
    ap.add_argument("--pattern", help="a store's path in the folder, e.g. "
                                      "'{label}_s{seed}/records.db' (default: LABEL_seedN.db)")
    args = ap.parse_args()
    print(bocast.report(args.folder, pattern=args.pattern, arms=[args.cold, args.warm],
                        seeds=args.seeds, baseline=args.cold, budget=args.budget,
                        within=args.within, at=[args.within, args.budget]).markdown())


if __name__ == "__main__":
    main()
