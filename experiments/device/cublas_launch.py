"""What cuBLAS launches for a GEMM: kernel name, grid, block, cluster, registers, shared memory
and duration, read from PyTorch's profiler trace (no hardware counters: works where ncu cannot).
Issue 38's skinny cells ask what cuBLAS's ``nvjet_..._96x64_64x10_1x2`` means in its own layout:
its grid says how many CTAs it runs and along which dimension the 96 lies.
The call is bocast's reference (``torch.mm(a, b.t(), out_dtype=float32)``, fp16 NT), warmed up
and launched 20 times; the trace's last launch of each kernel is reported.
Usage: python3 cublas_launch.py M,N,K ...  (prints one JSON list)."""

import json
import os
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

#: the trace's per-kernel fields worth reporting (Kineto's names)
FIELDS = ("grid", "block", "cluster", "registers per thread", "shared memory",
          "est. achieved occupancy %", "blocks per SM", "warps per SM")


def launches(shape: str) -> list[dict]:
    m, n, k = (int(v) for v in shape.split(","))
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)

    def call():
        return torch.mm(a, b.t(), out_dtype=torch.float32)

    for _ in range(10):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            call()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    last: dict[str, dict] = {}
    durations: dict[str, list[float]] = {}
    for e in events:
        last[e["name"]] = e
        durations.setdefault(e["name"], []).append(float(e.get("dur", 0.0)))
    rows = []
    for name, e in last.items():
        d = sorted(durations[name])
        args = e.get("args", {})
        rows.append({"shape": [m, n, k], "kernel": name, "launches": len(d),
                     "median_us": d[len(d) // 2],
                     "tflops_at_median": 2.0 * m * n * k / (d[len(d) // 2] * 1e-6) / 1e12,
                     **{f: args.get(f) for f in FIELDS if f in args}})
    return rows


if __name__ == "__main__":
    out = []
    for s in sys.argv[1:]:
        out.extend(launches(s))
    print(json.dumps(out, indent=1))
