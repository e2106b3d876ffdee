"""The Tensor Core ceiling of the WMMA path on this GPU, next to cuBLAS.

A kernel that does nothing but back-to-back WMMA mma_sync on register fragments (the same
16x16x16 fp16 -> fp32 instruction our GEMM space emits; on sm_90 it compiles to HMMA.16816), with
several independent accumulators per warp to cover the instruction latency and enough warps to
fill every SM. Timed with the runner's method (CUDA events around graph replays). cuBLAS fp16 GEMM
at 8192^3 is timed the same way. Run on the H100 machine:

    python3 lab/ceiling.py --out $OUT/ceiling.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

KERNEL = r"""
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void __launch_bounds__(WARPS * 32)
wmma_peak(const half* A, const half* B, float* C) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NACC];
  wmma::load_matrix_sync(a, A, 16);
  wmma::load_matrix_sync(b, B, 16);
  #pragma unroll
  for (int j = 0; j < NACC; ++j) wmma::fill_fragment(acc[j], 0.0f);
  for (int i = 0; i < ITERS; ++i) {
    #pragma unroll
    for (int j = 0; j < NACC; ++j) wmma::mma_sync(acc[j], a, b, acc[j]);
  }
  int warp = (blockIdx.x * WARPS + threadIdx.x / 32);
  #pragma unroll
  for (int j = 0; j < NACC; ++j)
    wmma::store_matrix_sync(C + ((size_t)warp * NACC + j) * 256, acc[j], 16, wmma::mem_row_major);
}
"""


def main() -> None:
    import torch

    from bocast.measure.gpu_worker import Kernel, device_info, time_callable

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for warps, nacc, blocks_per_sm in ((4, 4, 4), (8, 4, 2), (8, 8, 2), (4, 8, 4)):
        iters = 4096
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "peak.cu"), os.path.join(tmp, "peak.cubin")
            Path(src).write_text(KERNEL)
            subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", f"-DWARPS={warps}",
                            f"-DNACC={nacc}", f"-DITERS={iters}", src, "-o", out], check=True)
            cubin = Path(out).read_bytes()
        blocks = sms * blocks_per_sm
        kernel = Kernel(cubin, "wmma_peak", (blocks, 1, 1), (warps * 32, 1, 1), 0)
        a = torch.rand(256, device="cuda").half()
        b = torch.rand(256, device="cuda").half()
        c = torch.empty(blocks * warps * nacc * 256, device="cuda")
        ptrs = [a.data_ptr(), b.data_ptr(), c.data_ptr()]
        # both lambdas below are timed within their iteration, so late binding is harmless
        t = time_callable(lambda: kernel.launch(ptrs, torch.cuda.current_stream().cuda_stream),  # noqa: B023
                          warmup_ms=50, repeats=20)
        flops = blocks * warps * iters * nacc * 2 * 16 * 16 * 16
        rows.append({"kernel": f"wmma_peak warps={warps} acc={nacc} blocks/SM={blocks_per_sm}",
                     "tflops": flops / (t["latency_ms"] * 1e-3) / 1e12, **t})
    for n in (4096, 8192):
        x = torch.rand(n, n, device="cuda").half()
        y = torch.rand(n, n, device="cuda").half()
        t = time_callable(lambda: torch.matmul(x, y.t()), warmup_ms=100, repeats=20)  # noqa: B023
        rows.append({"kernel": f"cuBLAS torch.matmul fp16 {n}^3 (fp16 out)",
                     "tflops": 2 * n ** 3 / (t["latency_ms"] * 1e-3) / 1e12, **t})
    with open(args.out, "w") as f:
        json.dump({"device": device_info(), "rows": rows}, f, separators=(",", ":"))
    for r in rows:
        print(f"{r['kernel']:<48} {r['tflops']:7.1f} TFLOPS  ({r['latency_ms']:.4f} ms, "
              f"IQR {r['latency_q25_ms']:.4f}-{r['latency_q75_ms']:.4f})")


if __name__ == "__main__":
    main()
