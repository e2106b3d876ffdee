"""The SASS of a fixed sample of space v3 kernels, built as a tuning run builds them (CPU, nvcc
and cuobjdump: bocast.measure.sass): per kernel, the instructions that read a wgmma accumulator
before its wait (``early``), the counts of ``WARPGROUP.DEPBAR.LE gsb0`` 0 and 1, registers and
ptxas's wgmma serialization (``ser``); each kernel.cu, SASS and configuration saved under OUT
(compare two generators' OUT folders with diff). The sample: records of the two bf16 v3 stores
(the 7 wrong_result ones and 3 ok scalar/inflight-1 ones), then seeded draws per dtype,
epilogue and inflight (GEMM, fused GEMM, conv2d, conv2d_transpose, bmm, block-scaled fp8,
swap_ab, split K).

    python lab/wgmma_race_sass.py OUT BF16_2048_STORE BF16_4096_STORE [LABEL_REGEX]

(the stores: gemm_2048_8192_2048_bf16_bf16_v3.db and gemm_4096_11008_4096_bf16_bf16_v3.db of
the H200 datasets run; experiments/results/wgmma_race_sass.md has the tables before and after
the scalar epilogue's fix)."""

from __future__ import annotations

import json
import os
import re
import sys
import time

sys.modules.setdefault("torch", None)  # type: ignore[arg-type] # as the builder's workers

import numpy as np  # noqa: E402

from bocast.measure.builder import build_one  # noqa: E402
from bocast.measure.sass import early_accumulator_reads, sass  # noqa: E402
from bocast.records.store import Store  # noqa: E402
from bocast.space.operators.operator import make  # noqa: E402
from bocast.space.space import Space  # noqa: E402
from bocast.space.tensorcore import source_only  # noqa: E402


def items(stores):
    """(label, workload, configuration) of the sample, in a fixed order."""
    out = []
    for path, ids in ((stores[0], (84, 219, 257, 281, 296, 3, 23, 27)), (stores[1], (96, 290))):
        with Store.open(path) as db:
            for rid, _, rec in db.rows():
                if rid in ids:
                    cfg = rec.config if isinstance(rec.config, dict) else json.loads(rec.config)
                    out.append((f"{os.path.basename(path)[:9]}#{rid}", db.workload, cfg))
    v3 = {"space": "v3"}
    specs = [
        ("bf16 2048", make("gemm", (2048, 8192, 2048), dtype="bf16:bf16", **v3),
         [("scalar", 1)] * 4 + [("v2", 1), ("tma", 1), ("scalar", 0), ("v2", 0)]),
        ("fp16 ragged", make("gemm", (1000, 1024, 1000), dtype="fp16:fp16", **v3),
         [("scalar", 1)] * 3 + [("v2", 1), ("tma", 1), ("scalar", 0)]),
        ("fp16:fp32", make("gemm", (2048, 2048, 2048), dtype="fp16:fp32", **v3),
         [("scalar", 1), ("v2", 1), ("tma", 1), ("scalar", 0)]),
        ("e4m3:bf16", make("gemm", (2048, 2048, 2048), dtype="e4m3:bf16", **v3),
         [("scalar", 1), ("scalar", 1), ("v2", 1), ("tma", 1), ("scalar", 0)]),
        ("fuse gelu", make("gemm", (512, 4096, 4096), dtype="bf16:bf16", fuse="gelu", **v3),
         [("scalar", 1), ("v2", 1), ("tma", 1)]),
        ("conv2d", make("conv2d", (16, 28, 28, 128, 128, 3, 3, 1, 1, 1), dtype="fp16:fp16",
                        **v3), [("scalar", 1), ("v2", 1), ("tma", 1), ("scalar", 0)]),
        ("tconv", make("conv2d_transpose", (4, 12, 10, 64, 96, 4, 4, 2, 1, 1, 0), **v3),
         [("scalar", 1), ("v2", 1), ("tma", 1)]),
        ("bmm", make("bmm", (8, 512, 512, 256), dtype="bf16:bf16", **v3),
         [("scalar", 1), ("v2", 1)]),
        ("blockfp8", make("gemm", (1024, 1024, 1024), dtype="e4m3b128:bf16", **v3),
         [("scalar", 0), ("v2", 0), ("tma", 0)]),
    ]
    rng = np.random.default_rng(7)
    for name, op, combos in specs:
        for epi, infl in combos:
            cfgs = op.space.sample_restricted(1, rng, {"epilogue": [epi], "inflight": [infl]})
            if cfgs:  # none where the space has no such configuration (tconv's tma)
                out.append((f"{name} {epi}/{infl}", op.workload, json.loads(Space.key(cfgs[0]))))
    sw = make("gemm", (64, 4096, 4096), dtype="bf16:bf16", **v3)
    for infl in (1, 1, 0):
        c = sw.space.sample_restricted(1, rng, {"swap_ab": ["on"], "inflight": [infl]})
        out.append((f"swap bf16 scalar/{infl}", sw.workload, json.loads(Space.key(c[0]))))
    c = sw.space.sample_restricted(1, rng, {"swap_ab": ["off"], "inflight": [1],
                                            "epilogue": ["scalar"], "split_k": [2, 4]})
    if c:
        out.append(("splitk bf16 scalar/1", sw.workload, json.loads(Space.key(c[0]))))
    return out


def main(out: str, stores: list[str], only: str | None) -> None:
    source_only()
    os.makedirs(out, exist_ok=True)
    for i, (label, w, cfg) in enumerate(items(stores)):
        if only and not re.search(only, label):
            continue
        t0 = time.time()
        built = build_one({"workload": w, "config": cfg})
        r = built.result
        if r.cubin is None:
            print(f"{i:02d} {label:28s} BUILD {r.status} {r.error[-200:]}", flush=True)
            continue
        text = sass(r.cubin)
        for ext, content in (("cu", built.lowered.source), ("sass", text),
                             ("json", json.dumps({"label": label, "workload": w, "config": cfg}))):
            with open(f"{out}/{i:02d}.{ext}", "w") as f:
                f.write(content)
        bad = early_accumulator_reads(text)
        dep = " ".join(f"{m}:{len(re.findall(rf'DEPBAR.LE gsb0, {m}', text))}"
                       for m in ("0x0", "0x1"))
        f = r.features
        shape = "/".join(str(cfg.get(k)) for k in ("epilogue", "inflight", "arrangement",
                                                     "cluster"))
        print(f"{i:02d} {label:28s} early {len(bad):3d}  {dep}  regs {f.get('registers'):.0f} "
              f"ser {int(f.get('wgmma_serialized', 0))}  {time.time() - t0:.1f}s {shape}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:4], sys.argv[4] if len(sys.argv) > 4 else None)
