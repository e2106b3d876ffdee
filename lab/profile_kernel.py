"""One tuned kernel and cuBLAS under Nsight Compute: where the gap to cuBLAS comes from.

Two steps, so that ncu sees only the launching process (the builder uses a process pool):

    python3 lab/profile_kernel.py build PICKS.json --index 0 --out /tmp/k.pkl
    ncu --section SpeedOfLight ... python3 lab/profile_kernel.py launch /tmp/k.pkl

``build`` builds one configuration of a ``bocast/tools/remeasure.py --picks`` file (or the best of
record stores) with bocast's builder and saves the cubin and launch dimensions; ``launch`` loads
it the way the runner does and launches cuBLAS (the operator's ``reference_fast``) and then the
kernel ``--launches`` times each, with the same inputs. experiments/device/profile.sh runs both
under ncu on the H100.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(args) -> int:
    from bocast.measure.builder import Builder
    from bocast.records.status import Status
    from bocast.space.operators.operator import from_workload
    from bocast.tools.remeasure import best_configs

    workload, picked = best_configs(args.sources, args.index + 1)[0]  # one workload
    op = from_workload(workload)
    pick = picked[args.index]
    with Builder(workers=1) as builder:
        (b,) = builder.build(op, [op.space.from_json(pick["config"])])
    if b.status is not Status.OK:
        raise SystemExit(f"build failed: {b.status}: {b.error[-500:]}")
    with open(args.out, "wb") as f:
        pickle.dump({"workload": workload, "config": pick["config"], "cubin": b.cubin,
                     "kernel": b.kernel, "grid": b.grid, "block": b.block, "args": b.args,
                     "dynamic_smem": int(b.features.get("dynamic_smem_bytes", 0)),
                     # space v3: TMA descriptors to encode at launch, and a cluster launch's dims
                     "tensor_maps": b.tensor_maps, "cluster": b.cluster,
                     "features": b.features, "recorded_tflops": pick["recorded_tflops"]}, f)
    print(f"kernel {b.kernel} grid {b.grid} block {b.block} features {b.features}")
    print(f"config {pick['config']}")
    return 0


def launch(args) -> int:
    import torch

    from bocast.measure.gpu_worker import Kernel, kernel_args, make_inputs, rel_error
    from bocast.space.operators.operator import from_workload

    with open(args.kernel, "rb") as f:
        k = pickle.load(f)
    op = from_workload(k["workload"])
    inputs = make_inputs(op, 0)
    ins = [inputs[t.name] for t in op.tensors() if t.role == "input"]
    # cuBLAS first: the fp32 reference below launches kernels of its own
    for _ in range(args.launches):
        op.reference_fast(*ins)
    torch.cuda.synchronize()
    kernel = Kernel(k["cubin"], k["kernel"], k["grid"], k["block"], k["dynamic_smem"],
                    k.get("cluster", (1, 1, 1)))
    pointers = kernel_args(op, {"args": k["args"], "tensor_maps": k.get("tensor_maps")}, inputs)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(args.launches):
        kernel.launch(pointers, stream)
    torch.cuda.synchronize()
    out = inputs[next(t.name for t in op.tensors() if t.role == "output")]
    print(f"{k['kernel']}: rel. error {rel_error(out, op.reference(*ins)):.2e}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("build")
    p.add_argument("sources", nargs="+", help="picks JSON or record stores of one workload")
    p.add_argument("--index", type=int, default=0, help="0: the best")
    p.add_argument("--out", required=True)
    p = sub.add_parser("launch")
    p.add_argument("kernel")
    p.add_argument("--launches", type=int, default=5)
    args = ap.parse_args(argv)
    return build(args) if args.step == "build" else launch(args)


if __name__ == "__main__":
    sys.exit(main())
