"""Check exported kernels on the GPU: correct, and as fast as their store says.

Each folder (``bocast export``, run on a CPU and carried here) is loaded in this fresh process
with ``bocast.load_kernel``, run on the runner's inputs (``gpu_worker.make_inputs``), checked
against torch with the runner's check and tolerance (``gpu_worker.output_error``,
``op.tolerance``), and timed with the runner's own timing function (``gpu_worker.time_callable``:
CUDA events around CUDA-graph replays, median of ``--repeats``). The same configuration is also
rebuilt and timed through the normal runner path (``Builder`` + ``GpuRunner``, as ``bocast
measure`` does) in the same session, the two alternating for ``--rounds`` rounds, so that
runner-now / stored is the drift between sessions and exported / runner-now the export's own
cost. Target: exported within 3% of the stored time. Prints a table, writes JSON with provenance.

    python -m tests.gpu.export_check .devcarry/exports/* --rounds 5 --out $OUT/export_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from bocast.measure.retime import spread  # the same summary of timings

TARGET = 0.03  # |exported / stored - 1|


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", help="exported kernels (bocast export --out)")
    ap.add_argument("--rounds", type=int, default=5, help="runner + exported, this many times")
    ap.add_argument("--repeats", type=int, default=10, help="timed replays per timing (the "
                    "runner's default)")
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        ap.error("--rounds and --repeats must be >= 1")

    import torch

    import bocast
    from bocast.measure.builder import Builder
    from bocast.measure.gpu_worker import make_inputs, output_error, time_callable
    from bocast.measure.runner import GpuRunner
    from bocast.records.public import provenance
    from bocast.records.status import Status
    from bocast.space.operators.operator import from_workload

    if not torch.cuda.is_available():
        raise SystemExit("export_check needs a CUDA GPU")
    items = []
    for folder in args.folders:
        k = bocast.load_kernel(folder)  # first: nothing else has touched TVM's CUDA module yet
        op = from_workload(k.workload)
        inputs = make_inputs(op, 0)
        tensors = [inputs[t.name] for t in op.tensors()]
        k(*tensors)
        torch.cuda.synchronize()
        err = output_error(op, inputs)
        items.append({"folder": folder, "kernel": k, "op": op, "tensors": tensors,
                      "rel_error": err, "correct": err <= op.tolerance, "binary": k.binary,
                      "stored_ms": k.measured["latency_ms"], "exported_ms": [],
                      "runner_ms": [], "runner_errors": [], "method": None})
    prov = provenance({"command": " ".join(sys.argv)})
    with GpuRunner(repeats=args.repeats, seed=0) as runner, Builder(workers=1) as builder:
        prov["device"] = runner.device()
        for it in items:
            (b,) = builder.build(it["op"], [it["op"].space.from_json(it["kernel"].config)])
            it["build"] = b
            with open(os.path.join(it["folder"], "kernel.cubin"), "rb") as f:
                it["same_cubin_as_runner_build"] = b.cubin == f.read()
        for r in range(args.rounds):
            for step in ("runner", "exported") if r % 2 == 0 else ("exported", "runner"):
                for it in items:
                    if step == "exported" and it["correct"]:
                        t = time_callable(lambda it=it: it["kernel"](*it["tensors"]),
                                          warmup_ms=runner.warmup_ms, repeats=runner.repeats)
                        it["exported_ms"].append(t["latency_ms"])
                        it["method"] = t["method"]
                    elif step == "runner" and it["build"].status is Status.OK:
                        (res,) = runner.run(it["op"], [it["build"]])
                        if res.status is Status.OK:
                            it["runner_ms"].append(res.latency_ms)
                        else:
                            it["runner_errors"].append(f"{res.status}: {res.error[:200]}")
    rows = []
    for it in items:
        k, st = it.pop("kernel"), it["stored_ms"]
        ex, rn = (spread(it[f"{w}_ms"]) if it[f"{w}_ms"] else None for w in ("exported", "runner"))
        row = {**{n: it[n] for n in it if n not in ("op", "tensors", "build")},
               "workload": k.workload, "key": k.meta["key"], "record": k.meta["record"]["id"],
               "stored_timing": k.measured["timing"], "build_status": str(it["build"].status),
               "exported": ex, "runner": rn,
               "exported_vs_stored": ex["median"] / st if ex and st else None,
               "exported_vs_runner": ex["median"] / rn["median"] if ex and rn else None,
               "runner_vs_stored": rn["median"] / st if rn and st else None}
        row["met"] = row["correct"] and row["exported_vs_stored"] is not None and \
            abs(row["exported_vs_stored"] - 1) <= TARGET
        rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rounds": args.rounds, "repeats": args.repeats, "target": TARGET,
                       "kernels": rows, "provenance": prov}, f, separators=(",", ":"), default=str)

    def ms(s):
        return f"{s['median']:.4f} [{s['min']:.4f}-{s['max']:.4f}]" if s else "-"

    print(f"device {prov['device'].get('gpu')}, driver {prov['device'].get('driver')}; "
          f"{args.rounds} rounds x {args.repeats} replays; ms: median [min-max] over rounds")
    print("| kernel | rel. error | binary | stored ms | exported ms | runner-now ms | exported / "
          "stored | exported / runner-now | runner-now / stored | same cubin |")
    print("|---" * 10 + "|")
    for r in rows:
        ratios = [f"{x:.3f}" if x is not None else "-" for x in (
            r["exported_vs_stored"], r["exported_vs_runner"], r["runner_vs_stored"])]
        print(f"| {os.path.basename(r['folder'].rstrip('/'))} (row {r['record']}) | "
              f"{r['rel_error']:.2e}{'' if r['correct'] else ' WRONG'} | {r['binary']} | "
              f"{r['stored_ms'] or float('nan'):.4f} | {ms(r['exported'])} | {ms(r['runner'])} | "
              f"{' | '.join(ratios)} | {r['same_cubin_as_runner_build']} |")
        for e in r["runner_errors"]:
            print(f"  runner: {e}")
    met = sum(r["met"] for r in rows)
    print(f"target (correct, exported within {TARGET:.0%} of stored): met by {met}/{len(rows)}")
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
