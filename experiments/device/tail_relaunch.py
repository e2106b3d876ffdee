"""tail_split across launches (run by tail_check.sh). The runner checks a kernel's output after
its first launch only, when the module's flags (``bocast_tail_flags``, ``_hopper_tail``) are
fresh from the load; every later launch, the timed ones, relies on the last arrival at each
last-round tile of the launch before having set its flag back to 0. Per kernel (tail_split
configurations sampled at each shape, every other knob free): one module load, then ROUNDS
single launches, each into a C poisoned with NaN, checked against the reference, the flags
read back (cuModuleGetGlobal: all 0); then BURST launches back to back (as a timing runs them)
and one more poisoned, checked launch. (zero_first_relaunch.py's check, branch zero-first.)

  python3 experiments/device/tail_relaunch.py OUT.json "2048,28672,8192 1000,3000,2048"
  (SAMPLE_RELAUNCH per shape: env, 3)

Prints a table; OUT.json holds a row per kernel."""

from __future__ import annotations

import ctypes
import json
import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

ROUNDS, BURST = int(os.environ.get("ROUNDS_RELAUNCH", 10)), int(os.environ.get("BURST", 100))
KNOBS = ("tail_split", "bm", "bn", "epilogue", "arrangement", "consumers", "stages")


def kernels(shapes, sample: int):
    """(label, workload, config) of each kernel to check."""
    from bocast.space.operators.operator import from_workload

    out = []
    for shape in shapes:
        w = {"op": "gemm", "shape": list(shape), "dtype": "fp16:fp32", "layout": "NT",
             "space": "v3"}
        op = from_workload(w)
        for i, c in enumerate(op.space.sample_restricted(
                sample, np.random.default_rng(0), {"tail_split": [2, 4, 8]})):
            out.append((f"sample {i}", w, dict(c)))
    return out


def build(item):
    import sys as _sys

    _sys.modules.setdefault("torch", None)  # type: ignore[arg-type] # as bocast's builder pool
    from bocast.measure.builder import build_task

    _, w, c = item
    return build_task({"workload": w, "config": c})


def flags_max(cu, module) -> int:
    """The largest of the module's tile flags (0 when every launch left them 0)."""
    ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
    get = getattr(cu, "cuModuleGetGlobal_v2", None) or cu.cuModuleGetGlobal
    code = get(ctypes.byref(ptr), ctypes.byref(size), module, b"bocast_tail_flags")
    if code != 0:
        raise RuntimeError(f"cuModuleGetGlobal(bocast_tail_flags): error {code}")
    host = (ctypes.c_uint32 * (size.value // 4))()
    copy = getattr(cu, "cuMemcpyDtoH_v2", None) or cu.cuMemcpyDtoH
    code = copy(host, ptr, size)
    if code != 0:
        raise RuntimeError(f"cuMemcpyDtoH: error {code}")
    return max(host)


def check(label, w, c, b) -> dict:
    import torch

    from bocast.measure import gpu_worker as g
    from bocast.space.operators.operator import from_workload

    row = {"kernel": label, "shape": w["shape"], **{k: c.get(k) for k in KNOBS},
           "build": b["status"]}
    if b["status"] != "ok":
        return {**row, "error": b.get("error", "")[-300:]}
    op = from_workload(w)
    inputs = g.make_inputs(op, 0)
    out_name = next(t.name for t in op.tensors() if t.role == "output")
    ref = op.reference(*[inputs[t.name] for t in op.tensors() if t.role == "input"])
    args = g.kernel_args(op, b, inputs)
    k = g.Kernel(b["cubin"], b["kernel"], b["grid"], b["block"],
                 int(b["features"].get("dynamic_smem_bytes", 0)), b.get("cluster") or (1, 1, 1))
    cu, stream = g._driver(), torch.cuda.current_stream().cuda_stream
    errors, flags = [], []

    def poisoned_launch():
        inputs[out_name].fill_(float("nan"))
        k.launch(args, stream)
        torch.cuda.synchronize()
        errors.append(g.rel_error(inputs[out_name], ref))
        flags.append(flags_max(cu, k.module))

    try:
        assert tuple(b.get("zeroed") or ()) == (), b.get("zeroed")  # nothing zeroed for it
        for _ in range(ROUNDS):
            poisoned_launch()
        for _ in range(BURST):
            k.launch(args, stream)
        torch.cuda.synchronize()
        poisoned_launch()
    except Exception as e:  # noqa: BLE001 - a fault is this kernel's result
        return {**row, "error": f"{type(e).__name__}: {e}"[-300:], "errors": errors}
    finally:
        k.unload()
    tol = op.tolerance
    return {**row, "launches_ok": sum(e <= tol for e in errors), "checked": len(errors),
            "worst_rel_error": max(errors), "flags_max": max(flags), "tolerance": tol}


def table(rows) -> None:
    print(f"| kernel | shape | {' | '.join(KNOBS)} | poisoned launches ok | worst rel error "
          "| flags after (max) |")
    print("|" + " --- |" * (len(KNOBS) + 5))
    for r in rows:
        res = (f"{r['launches_ok']}/{r['checked']} | {r['worst_rel_error']:.2e} | "
               f"{r['flags_max']}" if "checked" in r else f"- | {r.get('error')} | -")
        print(f"| {r['kernel']} | {','.join(map(str, r['shape']))} | "
              f"{' | '.join(str(r[k]) for k in KNOBS)} | {res} |")


def main() -> None:
    out_path = sys.argv[1]
    shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[2].split()]
    items = kernels(shapes, int(os.environ.get("SAMPLE_RELAUNCH", 3)))
    with ProcessPoolExecutor(min(8, len(items)), mp_context=mp.get_context("spawn")) as pool:
        built = list(pool.map(build, items))
    rows = []
    for item, b in zip(items, built):  # a hang names its kernel in the log (stderr)
        print(f"checking {item[0]} {item[1]['shape']} {item[2]}", file=sys.stderr, flush=True)
        rows.append(check(*item, b))
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)
    table(rows)


if __name__ == "__main__":
    main()
