"""Re-measure the best kernels of record stores beside cuBLAS, in one process, several rounds.

A live run ends with this re-timing of its own best kernels (its figure); this command does it
for any stores, later or elsewhere: on the H100 cuBLAS readings of one day differ 10-20%
between processes, so "fraction of cuBLAS" from two runs mixes two readings. It takes the N
best distinct ``ok`` configurations of one or more stores (of one operator and shape; of each
space where they hold several, so v2's and v3's best meet one cuBLAS), builds them again, and
times them with the reference in rounds in one runner process
(:func:`bocast.measure.retime.retime`). It prints a table (median [min-max] over rounds) and
writes JSON with provenance.

    bocast remeasure runs/live_v2_gemm_4096_4096_4096/*.db --top 10 --rounds 5 \
        --out $OUT/remeasure_4096.json

(``python -m bocast.tools.remeasure`` is the same.)

``--runner standin`` exercises the same path on a CPU with SYNTHETIC timings (tests only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from bocast.errors import InputError
from bocast.locations import check_outputs, check_writable
from bocast.measure.builder import Builder
from bocast.measure.parts import runner_class, runner_kind
from bocast.measure.retime import retime
from bocast.measure.runner import why_no_gpu
from bocast.records.public import Store, StoreError, provenance
from bocast.records.status import Status
from bocast.space.operators.operator import canonical_workload, from_workload


def best_configs(stores: list[str], top: int) -> list[tuple[dict, list[dict]]]:
    """The ``top`` best distinct ok rows of ``stores``, best first, per workload: stores of one
    operator and shape may hold several spaces (v2 and v3 of one bmm), each its own group, so
    their best kernels are timed in one process against one cuBLAS. A ``.json`` argument is the
    ``--picks`` output of an earlier call (a few KB to carry to the GPU machine instead of the
    stores)."""
    groups: dict[str, tuple[dict, dict]] = {}  # space -> (workload, configuration key -> row)

    def group(w: dict, path: str) -> dict:
        first = next(iter(groups.values()))[0] if groups else w
        if _problem(w) != _problem(first):
            raise SystemExit(f"{path}: workload {w} differs from the first store's {first} "
                             "(stores may differ in their space only)")
        return groups.setdefault(w.get("space", ""), (w, {}))[1]

    def add(w: dict, path: str, row: dict) -> None:
        rows = group(w, path)
        if row["key"] not in rows or row["recorded_tflops"] > rows[row["key"]]["recorded_tflops"]:
            rows[row["key"]] = row

    for path in stores:
        if path.endswith(".json"):
            for w, r in read_picks(path):
                add(w, path, r)
            continue
        try:
            with Store.open(path) as store:
                w = canonical_workload(store.workload)
                found = [r for r in store.records() if r.ok and r.tflops is not None]
        except StoreError as e:
            raise SystemExit(str(e)) from None
        group(w, path)  # an empty store of another problem is refused too
        for r in found:
            add(w, path, {"key": r.key, "config": r.config, "recorded_tflops": r.tflops,
                          "store": os.path.basename(path)})
    if not groups:
        raise SystemExit("no store given")
    return [(w, sorted(rows.values(), key=lambda r: -r["recorded_tflops"])[:top])
            for w, rows in groups.values()]


def read_picks(path: str) -> list[tuple[dict, dict]]:
    """(workload, row) of each kernel of a ``--picks`` file, every field checked before any
    work (a GPU machine's time is not spent building a file that cannot be read): refused with
    one line (SystemExit) when it is not such a file."""
    def bad(why: str) -> SystemExit:
        return SystemExit(f"{path}: not a --picks file of bocast remeasure ({why})")

    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise bad(f"{type(e).__name__}: {e}") from None
    if not (isinstance(saved, dict) and isinstance(saved.get("kernels"), list)):
        raise bad("expected an object with a list 'kernels'")
    out = []
    for i, r in enumerate(saved["kernels"]):
        if not isinstance(r, dict):
            raise bad(f"kernels[{i}]: expected an object")
        w = r.get("workload", saved.get("workload"))
        tflops = r.get("recorded_tflops")
        if not (isinstance(r.get("key"), str) and isinstance(r.get("config"), dict)
                and isinstance(tflops, (int, float)) and not isinstance(tflops, bool)
                and math.isfinite(tflops) and tflops > 0 and isinstance(w, dict)):
            raise bad(f"kernels[{i}]: expected key (text), config (object), recorded_tflops "
                      "(a number > 0) and a workload")
        try:
            op = from_workload(w)
            problems = op.space.structural_violations(op.space.from_json(r["config"]))
        except (InputError, TypeError, ValueError, KeyError) as e:
            raise bad(f"kernels[{i}]: {e}") from None
        if problems:
            raise bad(f"kernels[{i}]: not a configuration of the space of {w} "
                      f"({', '.join(problems)})")
        out.append((canonical_workload(w), dict(r)))
    return out


def check_arguments(args) -> None:
    """The outputs, refused before any store is read: one that is an input, another output or
    (without --force) an existing file, or that cannot be written."""
    outputs = {flag: path for flag, path in (("--picks", args.picks), ("--out", args.out))
               if path is not None}
    try:
        check_outputs(outputs, {"record store": args.stores},
                      existing=None if args.force else "--force")
        for flag, path in outputs.items():
            check_writable(path, flag)
    except InputError as e:
        raise SystemExit(str(e)) from None


def need_gpu(runner: str) -> None:
    """A runner that times on this machine's GPU (local) on a machine without one, refused
    before its worker starts (which would fail to start CUDA with a traceback)."""
    reason = why_no_gpu() if runner_class(runner).needs_gpu else None
    if reason:
        raise SystemExit(f"--runner local needs a CUDA GPU: {reason}; nothing was written "
                         "(--picks FILE picks the kernels on this machine, for a GPU one)")


def _problem(workload: dict) -> dict:
    """A workload without its space: what the kernels of every group compute."""
    return {k: v for k, v in workload.items() if k != "space"}


def main(argv=None, prog: str | None = None) -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", help="record stores (SQLite) of one operator and shape "
                    "(of one space or several: each space's best are timed together)")
    ap.add_argument("--top", type=int, default=10, help="distinct best configurations of each "
                    "space")
    ap.add_argument("--rounds", type=int, default=5, help="cuBLAS + every kernel, this many times")
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats per kernel per round")
    ap.add_argument("--runner", choices=("local", "standin"), default="local", type=runner_kind)
    ap.add_argument("--workers", type=int, default=None, help="build processes")
    ap.add_argument("--seed", type=int, default=0, help="order of kernels within rounds")
    ap.add_argument("--out", help="JSON results")
    ap.add_argument("--picks", help="only write the picked configurations to this JSON file "
                    "(no GPU needed) and stop")
    ap.add_argument("--force", action="store_true",
                    help="replace --out or --picks if it exists (never an input)")
    args = ap.parse_args(argv)
    if args.top < 1 or args.rounds < 1 or args.repeats < 1:
        ap.error("--top, --rounds and --repeats must be >= 1")
    check_arguments(args)

    RunnerClass: Any = runner_class(args.runner)  # local or standin: the choices above

    groups = best_configs(args.stores, args.top)
    workload = groups[0][0]
    picked = [dict(r, workload=w) for w, rows in groups for r in rows]
    if not picked:
        raise SystemExit(f"no ok measurement in {', '.join(args.stores)}")
    if args.picks:
        with open(args.picks, "w") as f:
            json.dump({"workload": workload, "kernels": picked}, f, indent=0)
        print(f"{len(picked)} configurations of {_problem(workload)} "
              f"({', '.join(w.get('space', '?') for w, _ in groups)}) -> {args.picks}")
        return 0
    need_gpu(args.runner)
    ops = [from_workload(w) for w, _ in groups]
    prov = provenance({"command": " ".join(sys.argv)})
    with RunnerClass(repeats=args.repeats, seed=0) as runner, \
            Builder(workers=args.workers, compile=RunnerClass.compiles) as builder:
        prov["device"] = runner.device()
        timed = retime(runner, builder,
                       [(op, [op.space.from_json(r["config"]) for r in rows])
                        for op, (_, rows) in zip(ops, groups)],
                       rounds=args.rounds, seed=args.seed)
    for r, k in zip(picked, timed["kernels"]):  # picked is in the groups' order, as retime's
        r["build_status"] = k["build_status"]
        if k["build_status"] != str(Status.OK):
            r["build_error"] = k["errors"][0] if k["errors"] else ""
        elif k["errors"]:
            r["errors"] = k["errors"]
        r["tflops"] = [x["tflops"] for x in k["readings"]]
        r["readings"] = k["readings"]
        r["remeasured"] = k["tflops"]
        r["fraction_of_cublas"] = k["vs_reference"]
    references = timed["reference"]["readings"]
    cublas, what = [x["tflops"] for x in references], timed["reference"]["what"]
    ref = timed["reference"]["tflops"]
    result = {"workload": workload, "stores": args.stores, "rounds": args.rounds,
              "repeats": args.repeats, "runner": args.runner, "reference": what,
              # "cublas": the vendor reference of the operator (cuDNN for a convolution)
              "cublas_tflops": ref,
              "cublas_readings": cublas, "reference_readings": references, "kernels": picked,
              "provenance": prov, "method": timed["method"], "timing": timed["timing"]}
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, separators=(",", ":"))
        os.replace(tmp, args.out)
    print(f"{_problem(workload)}  reference {what}: {ref['median']:.1f} [{ref['min']:.1f}-"
          f"{ref['max']:.1f}] TFLOPS ({len(cublas)} readings); device {prov['device'].get('gpu')}")
    print("| # | space | recorded | re-measured median [min-max] | / reference | store |")
    print("|---|---|---|---|---|---|")
    for n, r in enumerate(picked, 1):
        m = r["remeasured"]
        got = (f"{m['median']:.1f} [{m['min']:.1f}-{m['max']:.1f}]" if m else r["build_status"])
        frac = f"{r['fraction_of_cublas']:.3f}" if m else "-"
        print(f"| {n} | {r['workload'].get('space', '')} | {r['recorded_tflops']:.1f} | {got} | "
              f"{frac} | {r.get('store', '')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
