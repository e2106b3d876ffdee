"""Fault injection on the GPU: every failure kind is recorded with its status and the run goes on.

Between good GEMM kernels, the runner is given: a build that fails (static shared memory over
48 KB, forced past the known constraint), a launch over the limits (2048 threads per block), a
kernel that reads and writes out of bounds (illegal address: a sticky error that kills the CUDA
context), a kernel that never ends, and one that writes a wrong result. Run on the H100 machine:

    python3 -m tests.gpu.faults --out $OUT/faults.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bocast.measure.builder import Builder, BuildResult
from bocast.measure.runner import GpuRunner
from bocast.records.status import Status
from bocast.space.operators.operator import get_operator

BROKEN = r"""
#include <cuda_fp16.h>
extern "C" __global__ void out_of_bounds(half* A, half* B, float* C) {
  // reads and writes far past the buffers: CUDA_ERROR_ILLEGAL_ADDRESS
  size_t far = (size_t)1 << 40;
  C[far + threadIdx.x] = __half2float(A[far + threadIdx.x]);
}
extern "C" __global__ void never_ends(half* A, half* B, float* C) {
  volatile float* c = C;
  while (c[0] == c[0] || true) { __nanosleep(1000); }
}
extern "C" __global__ void wrong_result(half* A, half* B, float* C) {
  // writes every element (no NaN left) but the values are not A @ B^T
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1024 * 1024) C[i] = 1.0f;
}
"""


def compile_broken() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "broken.cu"), os.path.join(tmp, "broken.cubin")
        Path(src).write_text(BROKEN)
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", src, "-o", out], check=True)
        return Path(out).read_bytes()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    op = get_operator("gemm").from_args((1024, 1024, 1024), space="v1")  # over_smem: v1 knobs
    good = op.space.sample(4, rng=11)
    over_smem = {"wmma": "16x16x16", "tile_i": (8, 2, 4), "tile_j": (8, 2, 4), "tile_k": (8, 8, 1),
                 "smem_at": 0, "frag_at": 2, "a_pad": 8, "b_pad": 8, "vec": 8, "pipeline": 1,
                 "unroll": 0, "writeback": "direct", "c_at": None, "c_pad": None, "out_vec": None}
    rows = []
    with Builder(timeout_s=120) as builder:
        built = builder.build(op, good + [over_smem])
    rows.append({"case": "build fails (static smem > 48 KB, constraint bypassed)",
                 "status": str(built[-1].status), "error": built[-1].error[-200:]})
    cubin = compile_broken()

    def broken(name: str, grid, block) -> BuildResult:
        return BuildResult(key=name, status=Status.OK, kernel=name, grid=grid, block=block,
                           args=("A", "B", "C"), cubin=cubin)

    over_limit = BuildResult(**{**built[0].__dict__, "key": "over_launch_limit",
                                "block": (32, 64, 1)})  # 2048 threads per block
    sequence = [
        ("good 1", built[0]),
        ("launch over limits (2048 threads/block)", over_limit),
        ("good 2", built[1]),
        ("out-of-bounds access", broken("out_of_bounds", (64, 1, 1), (256, 1, 1))),
        ("good 3", built[2]),
        ("never ends", broken("never_ends", (1, 1, 1), (32, 1, 1))),
        ("good 4", built[3]),
        ("wrong result", broken("wrong_result", (4096, 1, 1), (256, 1, 1))),
        ("good 1 again", built[0]),
    ]
    t0 = time.perf_counter()
    with GpuRunner(timeout_s=15) as runner:
        for name, b in sequence:
            (r,) = runner.run(op, [b])
            rows.append({"case": name, "status": str(r.status), "tflops": r.tflops,
                         "rel_error": r.rel_error, "error": r.error[-200:]})
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "seconds": time.perf_counter() - t0}, f, separators=(",", ":"))
    print(f"{'case':<48} {'status':<14} detail")
    for row in rows:
        detail = f"{row['tflops']:.1f} TFLOPS" if row.get("tflops") else row["error"][:70]
        print(f"{row['case']:<48} {row['status']:<14} {detail}")


if __name__ == "__main__":
    main()
