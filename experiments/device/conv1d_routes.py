"""The vendor routes to a 1-D convolution, timed as the runner times references (CUDA graph,
warm L2, the same channels-last fp16 tensors bocast's conv1d measures): which one is the
fastest, so that conv1d's reference is not a slow path (issue 38). Routes:
  conv1d   torch.nn.functional.conv1d on the [N,C,L] view (bocast's reference today)
  conv2d   torch.nn.functional.conv2d with H = 1 on the [N,C,1,L] view (cuDNN's 2-D kernels)
  unfold   cuBLAS on the implicit GEMM: the [N*OL, R*C] patch matrix built by strided views
           and one copy, then torch.mm with W[K, R*C]^T (the copy counted; ``mm_only`` beside it)
Usage: python3 conv1d_routes.py N,L,C,K,R,stride,pad,dilation ...  (prints one JSON list)."""

import json
import sys

import torch

from bocast.measure.gpu_worker import make_inputs, rel_error
from bocast.measure.timing import time_callable
from bocast.space.operators.operator import make_named


def measure(shape: str) -> list[dict]:
    rows = []
    op = make_named("conv1d", tuple(int(v) for v in shape.split(",")))
    t = make_inputs(op, 0)
    x, w = t["X"], t["W"]  # X[N, L, C], W[K, R, C], fp16
    ref = op.reference(x, w)
    xc, wc, kw = op._torch_args(x, w)  # [N, C, L] view, [K, C, R]
    N, C, K, R = op.N, op.C, op.K, op.ksize[0]
    s, p, d = op.stride, op.pad, op.dilation
    OL = op.out[0]
    xpad = torch.nn.functional.pad(x, (0, 0, p, p))  # [N, L + 2p, C]
    w2 = w.reshape(K, R * C)

    def unfold():
        cols = xpad.as_strided((N, OL, R, C), (xpad.stride(0), s * C, d * C, 1))
        return (cols.reshape(N * OL, R * C) @ w2.t()).view(N, OL, K)

    cols = xpad.as_strided((N, OL, R, C), (xpad.stride(0), s * C, d * C, 1)).reshape(
        N * OL, R * C).contiguous()
    routes = {
        "conv1d": lambda: torch.nn.functional.conv1d(xc, wc, **kw),
        "conv2d": lambda: torch.nn.functional.conv2d(
            xc.unsqueeze(2), wc.unsqueeze(2), stride=(1, s), padding=(0, p), dilation=(1, d)),
        "unfold": unfold,
        "mm_only": lambda: cols @ w2.t(),
    }
    for name, fn in routes.items():
        out = fn()
        if name == "conv1d":
            out = op._channels_last(out)
        elif name == "conv2d":
            out = op._channels_last(out.squeeze(2))
        elif name == "mm_only":
            out = out.view(N, OL, K)
        timing = time_callable(fn, warmup_ms=50, repeats=20, l2="warm")
        rows.append({"shape": shape, "route": name, "rel_error": rel_error(out, ref),
                     "latency_ms": timing["latency_ms"],
                     "tflops": op.flops / (timing["latency_ms"] * 1e-3) / 1e12})
    return rows


print(json.dumps([row for shape in sys.argv[1:] for row in measure(shape)], indent=0))
