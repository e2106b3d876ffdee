"""Measures, on the local GPU, the space v3 configurations whose scalar epilogue ptxas once read
above the final wgmma wait (bf16:bf16 wrong_result) and a random sample of their kind, each
built, run and checked against the float64 reference; one store a group under OUT, then a table
of status counts. Run by wgmma_race_check.sh (from the repository's root).
    python3 experiments/device/wgmma_race_check.py OUT [SAMPLE]"""

from __future__ import annotations

import collections
import json
import os
import sys
import time

import numpy as np

from bocast.measure.parts import make_builder, make_measurer, make_runner
from bocast.records.store import Store
from bocast.run.warm_sources import run_architecture
from bocast.schema import BUILD_TIMEOUT, REPEATS, RUN_TIMEOUT
from bocast.space.operators.operator import make, on_gpu

_COMMON = {"cluster": "1x1", "persistent": "off", "raster": 1, "raster_major": "n",
           "regs": "off", "split_k": 1, "swap_ab": "off", "epilogue": "scalar", "inflight": 1,
           "arrangement": "cooperative", "consumers": 1, "bk": 64, "bm": 64, "bn": 128,
           "stages": 4}
#: the wrong_result rows of the H200 datasets gemm_2048_8192_2048_bf16_bf16_v3 (ids 84, 219,
#: 257, 281, 296) and gemm_4096_11008_4096_bf16_bf16_v3 (96, 290): their configuration keys
FAILED = {
    (2048, 8192, 2048): [
        {"bk": 32, "bm": 128, "consumers": 2, "persistent": "on", "regs": "40/232"},
        {"stages": 6},
        {"bk": 32, "persistent": "on", "raster": 2, "regs": "24/240"},
        {"arrangement": "pingpong", "bk": 32, "bm": 256, "bn": 64, "cluster": "2x1",
         "consumers": 2, "persistent": "on", "raster_major": "m", "regs": "24/240"},
        {"raster": 8, "raster_major": "m", "regs": "56/224", "stages": 3}],
    (4096, 11008, 4096): [
        {"bm": 128, "cluster": "2x1", "consumers": 2, "raster": 2, "stages": 3},
        {"arrangement": "pingpong", "bk": 32, "bm": 256, "bn": 64, "cluster": "1x2",
         "consumers": 2, "raster": 8, "raster_major": "m", "regs": "24/240", "stages": 2}],
}


def groups(sample: int, sms: int | None):
    """(name, operator on this GPU, configurations) of each store."""
    out = []
    for shape, changes in FAILED.items():
        op = on_gpu(make("gemm", shape, dtype="bf16:bf16", space="v3"), sms)
        out.append((f"failed_{'x'.join(map(str, shape))}", op,
                    [op.space.from_json(_COMMON | c) for c in changes]))
    rng = np.random.default_rng(0)
    for dtype in ("bf16:bf16", "fp16:fp16"):
        op = on_gpu(make("gemm", (2048, 8192, 2048), dtype=dtype, space="v3"), sms)
        out.append((f"sample_{dtype.replace(':', '_')}", op, op.space.sample_restricted(
            sample, rng, {"epilogue": ["scalar"], "inflight": [1]})))
    return out


def main(out: str, sample: int) -> None:
    os.makedirs(out, exist_ok=True)
    arch = run_architecture("local")
    todo = groups(sample, arch[1] if arch else None)
    table = []
    # bocast measure's defaults: timed repeats, seconds per run and per build
    with make_runner("local", timeout_s=RUN_TIMEOUT.default, repeats=REPEATS.default) as runner, \
            make_builder(workers=None, timeout_s=BUILD_TIMEOUT.default) as builder:
        device = runner.device()
        print(f"device: {device.get('gpu')} driver {device.get('driver')}", flush=True)
        for name, op, configs in todo:
            t0 = time.perf_counter()
            with Store(os.path.join(out, f"{name}.db"), op.workload) as store:
                if store.get_meta("reference") is None:
                    store.set_meta("reference", runner.reference(op))
                measurer = make_measurer(op, store, runner, builder, session_info={
                    "device": device, "runner": runner.name,
                    "command": "experiments/device/wgmma_race_check.py"})
                measurer.measure(configs, source="wgmma_race_check")
                records = store.records()
            counts = collections.Counter(str(r.status) for r in records)
            errors = [r.rel_error for r in records if r.rel_error is not None]
            bad = [(r.config, str(r.status), r.rel_error) for r in records if not r.ok]
            table.append((name, op.workload["dtype"], len(records), dict(counts),
                          max(errors, default=None)))
            print(f"{name}: {len(records)} rows in {time.perf_counter() - t0:.0f} s: "
                  f"{dict(counts)}", flush=True)
            for config, status, err in bad:
                print(f"  {status} rel_error {err}: {json.dumps(config)}")
    print()
    print("| group | dtype | rows | status counts | largest rel_error |")
    print("| --- | --- | --- | --- | --- |")
    for name, dtype, n, counts, worst in table:
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        print(f"| {name} | {dtype} | {n} | {shown} | {worst} |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
