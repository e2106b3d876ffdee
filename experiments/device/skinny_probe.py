"""Issue 38's skinny GEMMs (M 16-128 at three LLM projections): what cuBLAS runs and what a
split-K kernel's launch-time zeroing costs in the timing bocast uses (a CUDA graph of calls,
L2 warm). Per shape, one process, fp16 in, fp32 out as the tuner's reference
(``torch.mm(out_dtype=float32)``):

- the kernels cuBLAS launches (names from torch.profiler: tile, cluster, split K or stream-K);
- mm alone, ``C.zero_()`` alone, and zero_ followed by mm (what `TirxKernel.zeroed` adds to a
  split-K kernel's time: the memset and the gap between two graph nodes);
- mm with the L2 flushed before each call (the weights do not stay in the 50 MB L2 at N = 6144
  from call to call in a model; at warm L2 they may, in part).

Prints one JSON object (run by parallel_tunes.sh's ``py:`` lines: stdout is the result)."""

from __future__ import annotations

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from bocast.measure.timing import time_callable

PROJECTIONS = ((6144, 4096), (4096, 14336), (28672, 4096))
TIMING = {"warmup_ms": 30, "repeats": 10}


def kernels(fn) -> list[str]:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def main() -> None:
    rows = []
    for n, k in PROJECTIONS:
        for m in (16, 32, 64, 128):
            g = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
            b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g)
            c = torch.empty(m, n, device="cuda", dtype=torch.float32)

            def mm(a=a, b=b):
                return torch.mm(a, b.t(), out_dtype=torch.float32)

            def zero_mm(c=c, mm=mm):
                c.zero_()
                return mm()

            t = {name: time_callable(fn, **TIMING, l2=l2)
                 for name, fn, l2 in (("mm", mm, "warm"), ("zero", c.zero_, "warm"),
                                      ("zero_mm", zero_mm, "warm"), ("mm_flushed", mm, "flushed"))}
            us = {name: round(v["latency_ms"] * 1e3, 2) for name, v in t.items()}
            rows.append({"shape": [m, n, k], "us": us,
                         "mm_tflops": round(2 * m * n * k / (us["mm"] * 1e-6) / 1e12, 1),
                         "zeroing_costs": round(us["zero_mm"] / us["mm"] - 1, 3),
                         "sm_clock_mhz": t["mm"].get("sm_clock_mhz"),
                         "kernels": kernels(mm)})
            print(f"{m}x{n}x{k}: {us} {rows[-1]['kernels']}", file=sys.stderr)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
