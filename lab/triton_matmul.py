"""Triton's autotuned matmul beside cuBLAS, timed the way bocast times its kernels (GPU only).

What a user would reach for instead of a schedule tuner: a Triton matmul in the style of Triton's
tutorial (block tiles, GROUP_M rasterisation, ``tl.dot``, which lowers to Hopper's wgmma) with a
10-configuration autotune, fp16 in, fp32 out, C = A B^T. Each kernel is timed by bocast's runner
method (``bocast.measure.gpu_worker.time_callable``: CUDA events around replays of a CUDA graph of
back-to-back launches, median of 20 replays) and, for reference, by ``triton.testing.do_bench``;
cuBLAS is the GEMM operator's ``reference_fast`` (``torch.mm(..., out_dtype=float32)``), timed
both ways. Every result is checked against the fp32 reference.

    python lab/triton_matmul.py --shapes 4096,4096,4096 1024,1024,1024 --out triton.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps): the tutorial's kind of search list
CONFIGS = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
           (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 256, 64, 4, 8), (256, 128, 64, 4, 8),
           (128, 128, 64, 3, 8), (64, 64, 64, 4, 4)]


def make_kernel():
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BM": m, "BN": n, "BK": k, "GROUP": 8},
                                            num_stages=s, num_warps=w)
                              for m, n, k, s, w in CONFIGS], key=["M", "N", "K"])
    @triton.jit
    def matmul_nt(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bn, s_bk, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        rows, cols = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (GROUP * cols)
        first = group * GROUP
        size = min(rows - first, GROUP)
        pm = first + (pid % (GROUP * cols)) % size
        pn = (pid % (GROUP * cols)) // size
        om = (pm * BM + tl.arange(0, BM)) % M
        on = (pn * BN + tl.arange(0, BN)) % N
        ok = tl.arange(0, BK)
        a = a_ptr + om[:, None] * s_am + ok[None, :] * s_ak
        b = b_ptr + ok[:, None] * s_bk + on[None, :] * s_bn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(0, tl.cdiv(K, BK)):
            left = K - kt * BK
            acc = tl.dot(tl.load(a, mask=ok[None, :] < left, other=0.0),
                         tl.load(b, mask=ok[:, None] < left, other=0.0), acc)
            a += BK * s_ak
            b += BK * s_bk
        cm = pm * BM + tl.arange(0, BM)
        cn = pn * BN + tl.arange(0, BN)
        tl.store(c_ptr + cm[:, None] * s_cm + cn[None, :] * s_cn, acc,
                 mask=(cm[:, None] < M) & (cn[None, :] < N))

    return matmul_nt


def measure(kernel, M: int, N: int, K: int, repeats: int) -> dict:
    import torch
    import triton
    from triton.testing import do_bench

    from bocast.measure.gpu_worker import make_inputs, rel_error, time_callable
    from bocast.space.operators.operator import get_operator

    op = get_operator("gemm").from_args((M, N, K))
    t = make_inputs(op, 0)
    a, b, c = t["A"], t["B"], t["C"]

    def triton_mm():
        kernel[lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)](
            a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))

    cublas = lambda: op.reference_fast(a, b)  # noqa: E731
    triton_mm()  # autotunes (outside any graph capture)
    ref = op.reference(a, b)
    out = {"shape": [M, N, K], "triton_config": str(kernel.best_config),
           "triton_rel_error": rel_error(c, ref), "cublas_rel_error": rel_error(cublas(), ref),
           "cublas_what": op.reference_name}
    flops = op.flops
    for name, fn in (("triton", triton_mm), ("cublas", cublas)):
        timing = time_callable(fn, warmup_ms=50, repeats=repeats)
        out[f"{name}_graph"] = {**timing, "tflops": flops / (timing["latency_ms"] * 1e-3) / 1e12}
        ms = do_bench(fn, warmup=50, rep=300)
        out[f"{name}_do_bench"] = {"latency_ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}
    torch.cuda.synchronize()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["4096,4096,4096", "1024,1024,1024",
                                                     "32,4096,4096"])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import triton

    from bocast.measure.gpu_worker import device_info
    from bocast.records.public import provenance

    kernel = make_kernel()
    rows = []
    for s in args.shapes:
        M, N, K = (int(x) for x in s.split(","))
        rows.append(measure(kernel, M, N, K, args.repeats))
    prov = provenance({"device": device_info(), "triton": triton.__version__,
                       "torch": torch.__version__})
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "provenance": prov,
                   "timing": "graph: bocast's runner method (CUDA events around CUDA-graph "
                             "replays, median); do_bench: triton.testing.do_bench (median)"},
                  f, separators=(",", ":"))
    print(f"{'shape':<18} {'triton':>8} {'cuBLAS':>8} {'ratio':>6}   (TFLOPS, CUDA-graph timing;"
          " do_bench in brackets)")
    for r in rows:
        tg, cg = r["triton_graph"]["tflops"], r["cublas_graph"]["tflops"]
        print(f"{'x'.join(map(str, r['shape'])):<18} {tg:8.1f} {cg:8.1f} {tg / cg:6.2f}   "
              f"[{r['triton_do_bench']['tflops']:.1f} / {r['cublas_do_bench']['tflops']:.1f}]  "
              f"{r['triton_config']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
