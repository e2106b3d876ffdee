"""The ratio a tune run printed, checked from torch: its best kernel exported and called through
``bocast.load_kernel``, timed in turn with the reference (``op.reference_fast``: cuBLAS/cuDNN
through torch) in one process as the run's re-timing times them (``timing.time_pair``: their
CUDA-graph replays alternating), ``--rounds`` rounds. The kernel's ratio (the median over rounds
of each round's median pair ratio) is set beside the run's ``best_vs_reference`` (its summary.json):
issue 40 asks them to agree within 3%. Prints one line per run, writes JSON with provenance.

    python -m tests.gpu.export_ratio RUN_FOLDER[:EXPORT_FOLDER] ... --out $OUT/export_ratio.json

RUN_FOLDER holds the run's summary.json; EXPORT_FOLDER (default RUN_FOLDER/kernel) the
``bocast export --best`` of its store.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

TARGET = 0.03  # |exported ratio / printed ratio - 1|


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="RUN_FOLDER[:EXPORT_FOLDER]")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--l2", choices=("warm", "flushed"), default="warm")
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args(argv)

    import torch

    import bocast
    from bocast.measure.gpu_worker import device_info, make_inputs, output_error
    from bocast.measure.timing import time_pair
    from bocast.records.public import provenance
    from bocast.space.operators.operator import from_workload

    if not torch.cuda.is_available():
        raise SystemExit("export_ratio needs a CUDA GPU")
    rows = []
    for spec in args.runs:
        run, _, folder = spec.partition(":")
        folder = folder or os.path.join(run, "kernel")
        with open(os.path.join(run, "summary.json")) as f:
            summary = json.load(f)
        k = bocast.load_kernel(folder)
        op = from_workload(k.workload)
        inputs = make_inputs(op, 0)
        tensors = [inputs[t.name] for t in op.tensors()]
        ins = [inputs[t.name] for t in op.tensors() if t.role == "input"]
        k(*tensors)
        torch.cuda.synchronize()
        err = output_error(op, inputs)
        mine: list[float] = []
        ref: list[float] = []
        ratios: list[float] = []
        for _ in range(args.rounds):  # as the run's re-timing: replays alternating, per round
            t = time_pair(lambda k=k, t=tensors: k(*t),
                          lambda op=op, ins=ins: op.reference_fast(*ins),
                          warmup_ms=20, repeats=max(20, args.repeats), l2=args.l2)
            mine.append(t["latency_ms"])
            ref.append(t["reference"]["latency_ms"])
            ratios.append(t["ratio"])
        ratio = statistics.median(ratios)
        printed = summary.get("best_vs_reference")
        rows.append({"run": run, "export": folder, "workload": k.workload,
                     "config": k.config, "rel_error": err, "correct": err <= op.tolerance,
                     "kernel_ms": mine, "reference_ms": ref, "round_ratios": ratios,
                     "exported_ratio": ratio,
                     "printed_ratio": printed, "figure": summary.get("figure"),
                     "best_config_matches": summary.get("best_config") == k.config,
                     "agrees": printed is not None and abs(ratio / printed - 1) <= TARGET})
    prov = provenance({"command": " ".join(sys.argv)})
    prov["device"] = device_info()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rounds": args.rounds, "repeats": args.repeats, "l2": args.l2,
                       "target": TARGET, "runs": rows, "provenance": prov}, f, default=str)
    print(f"device {prov['device'].get('gpu')}; {args.rounds} rounds x {args.repeats} replays, "
          f"l2 {args.l2}")
    print("| run | printed ratio (figure) | exported from torch, interleaved | exported / "
          "printed | rel. error | same config |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        p, x = r["printed_ratio"], r["exported_ratio"]
        print(f"| {r['run']} | " + ("-" if p is None else f"{p:.3f}") + f" ({r['figure']}) | "
              f"{x:.3f} | " + ("-" if p is None else f"{x / p:.3f}")
              + f" | {r['rel_error']:.1e} | {r['best_config_matches']} |")
    return 0 if all(r["agrees"] and r["correct"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
