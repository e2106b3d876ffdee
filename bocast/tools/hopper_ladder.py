"""Space v3's step ladder: named Hopper GEMM, bmm and conv2d kernels, built here, timed on the GPU
beside the vendor library (cuBLAS; cuDNN for conv2d).

    python3 -m bocast.tools.hopper_ladder build OUT.json   # TVM + nvcc (sm_90a), no GPU needed
    ONLY=bmm python3 -m bocast.tools.hopper_ladder build OUT.json   # one operator's rows
    MATCH='TMA|ragged' python3 -m bocast.tools.hopper_ladder build OUT.json   # rows by name (regex)
    python3 -m bocast.tools.hopper_ladder run OUT.json RESULT.json [--rounds 5]   # GPU, no TVM

``build`` writes each kernel's runner task (cubin, launch, tensor maps, ptxas report); ``run``
times them with the runner's own worker code (CUDA-graph events, correctness against torch, one
worker process with a time limit per kernel, so a hung kernel costs only itself) in ``rounds``
rounds, the vendor reference (the runner's: torch.mm / torch.bmm on cuBLAS, torch conv2d on
cuDNN) timed the same way before every round, and prints median [min-max] TFLOPS and the ratio
to the reference's median of the same run. A kernel whose output is wrong (relative error
over the operator's tolerance, or an element left unwritten: the output starts as NaN) is
reported as ``wrong_result`` and not run again; the ragged-extent rows (M, N or K not a multiple
of the tile, each epilogue) are there for that check first, and so are the conv rows past the
ResNet cases (1x1, dilated, boxes wholly out of bounds, ragged pixel tiles). The GEMM and bmm
build is ~2.8 MB (93 rows, ~75 s on 2 cores, before the cluster rows); ONLY and MATCH make a
smaller one (``ONLY=conv2d``: the conv rows), e.g. the cluster rows beside rows 8 and 9 (their
1x1 kernels):

    MATCH='^8 |^9 |^10|cluster' python3 -m bocast.tools.hopper_ladder build ladder_cluster.json

A cluster kernel launches with cuLaunchKernelEx and its cluster dims (the task's ``cluster``);
its runs also report ``max_active_clusters`` (cuOccupancyMaxActiveClusters: fewer than the
persistent grid's clusters means a tail wave). A protocol bug (a barrier never released) shows
as a timeout of that kernel alone.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from bocast.measure import gpu_worker
from bocast.measure.builder import build_one
from bocast.measure.pool import TaskFailure, TimedPool
from bocast.measure.runner import kernel_task
from bocast.space.operators.operator import make
from bocast.space.tensorcore import source_only

# (name, shape M,N,K, config): the ladder of issue 24 as this template spells it; the first
# rows have no warp-specialized-free variant (the template always has a producer warpgroup)
BASE = {"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "24/240", "inflight": 0, "persistent": "on",
        "raster": 8, "epilogue": "scalar"}
#: (row name, the configuration's changes from BASE), as the ladder lists them
Rows = list[tuple[str, dict[str, Any]]]
LADDER: Rows = [
    ("1 one consumer, 64x64 tile, 2 stages, one tile per CTA",
     dict(bm=64, bn=64, stages=2, consumers=1, regs="off", persistent="off", raster=1)),
    ("2 128x128 tile (2 m64 atoms), 4 stages",
     dict(bm=128, bn=128, consumers=1, regs="off", persistent="off", raster=1)),
    ("3 2 consumers, 128x128, 5 stages",
     dict(bm=128, bn=128, stages=5, regs="off", persistent="off", raster=1)),
    ("4 128x256, 2 consumers, 4 stages", dict(regs="off", persistent="off", raster=1)),
    ("4b + setmaxnreg 24/240", dict(persistent="off", raster=1)),
    ("5 + persistent, raster 1", dict(raster=1)),
    ("5b + persistent, raster 8", {}),
    ("5c + 1 wgmma group in flight", dict(inflight=1)),
    ("5d 3 stages, inflight 1", dict(stages=3, inflight=1)),
    ("5e 128x128, 2 consumers, 6 stages, persistent, inflight 1",
     dict(bn=128, stages=6, inflight=1)),
    ("5f 256x128 (2 atoms each), 4 stages, 40/232", dict(bm=256, bn=128, regs="40/232")),
    ("5g bk 32 (64-byte swizzle), 6 stages", dict(bk=32, stages=6)),
    ("6 ping-pong 128x128, 2 consumers, 6 stages", dict(arrangement="pingpong", bn=128,
                                                      stages=6, raster=1)),
    ("6b ping-pong 64x256, 5 stages", dict(arrangement="pingpong", bm=64, stages=5, raster=1)),
    ("6c ping-pong 128x128, raster 8, inflight 1",
     dict(arrangement="pingpong", bn=128, stages=6, inflight=1)),
    ("7 v2 stores: 5 + 8-byte stores", dict(raster=1, epilogue="v2")),
    ("7b v2 stores: 6 + 8-byte stores", dict(arrangement="pingpong", bn=128, stages=6, raster=1,
                                             epilogue="v2")),
    ("7c v2 stores: 6b + 8-byte stores", dict(arrangement="pingpong", bm=64, stages=5, raster=1,
                                              epilogue="v2")),
    ("7d v2 stores: 5b (raster 8) + 8-byte stores", dict(epilogue="v2")),
    ("7e v2 ping-pong 128x128, raster 8, inflight 1", dict(arrangement="pingpong", bn=128,
                                                           stages=6, inflight=1, epilogue="v2")),
    ("8 the live search's best: 7 + 40/232, raster 16",
     dict(regs="40/232", raster=16, epilogue="v2")),
    ("9 TMA-store epilogue: 8 with epilogue tma", dict(regs="40/232", raster=16, epilogue="tma")),
    ("9b TMA-store epilogue: 128x128, 6 stages, inflight 1 (5e + tma)",
     dict(bn=128, stages=6, inflight=1, epilogue="tma")),
    ("9c TMA-store epilogue: ping-pong 128x128, raster 8, inflight 1 (7e + tma)",
     dict(arrangement="pingpong", bn=128, stages=6, inflight=1, epilogue="tma")),
    # thread-block clusters of 2 CTAs: 2x1 pairs two block rows (they share B's tile, each
    # loads half and multicasts it to both), 1x2 two block columns (sharing A's)
    ("10 cluster 2x1 multicast: 8 + cluster 2x1",
     dict(regs="40/232", raster=16, epilogue="v2", cluster="2x1")),
    ("10b cluster 2x1 multicast: 9 (TMA store) + cluster 2x1",
     dict(regs="40/232", raster=16, epilogue="tma", cluster="2x1")),
    ("10c cluster 2x1 multicast, one tile per CTA (8 + 2x1, not persistent)",
     dict(regs="40/232", raster=16, epilogue="v2", cluster="2x1", persistent="off")),
    ("10d cluster 1x2 multicast of A: 8 + cluster 1x2",
     dict(regs="40/232", raster=16, epilogue="v2", cluster="1x2")),
    ("10e cluster 2x1: 128x128, 6 stages, inflight 1, TMA store (9b + 2x1)",
     dict(bn=128, stages=6, inflight=1, epilogue="tma", cluster="2x1")),
    ("10f cluster 2x1: ping-pong 128x128, raster 8, inflight 1 (7e + 2x1)",
     dict(arrangement="pingpong", bn=128, stages=6, inflight=1, epilogue="v2", cluster="2x1")),
]
# the other shapes of issue 24 (an LLM-like one: an 8B model's MLP down projection over 4096
# tokens), each with a few configurations picked by hand before any was timed
SWEEP: Rows = [
    ("4096^3's live best, raster 8", dict(regs="40/232", raster=8, epilogue="v2")),
    ("4096^3's live best, raster 8, TMA-store epilogue", dict(regs="40/232", raster=8,
                                                              epilogue="tma")),
    ("coop 128x256, 4 st, 24/240", dict(epilogue="v2", raster=1)),
    ("coop 128x256, 4 st, raster 8", dict(epilogue="v2")),
    ("coop 128x128, 6 st, inflight 1", dict(bn=128, stages=6, inflight=1, epilogue="v2",
                                            raster=1)),
    ("ping-pong 128x128, 6 st", dict(arrangement="pingpong", bn=128, stages=6, epilogue="v2",
                                     raster=1)),
    ("ping-pong 64x256, 5 st", dict(arrangement="pingpong", bm=64, stages=5, epilogue="v2",
                                    raster=1)),
    ("ping-pong 64x128, 6 st", dict(arrangement="pingpong", bm=64, bn=128, stages=6,
                                    epilogue="v2", raster=1)),
    ("1 consumer 64x128, 6 st", dict(bm=64, bn=128, stages=6, consumers=1, epilogue="v2",
                                     raster=1)),
    ("1 consumer 128x128, 5 st, not persistent", dict(bn=128, stages=5, consumers=1,
                                                      persistent="off", epilogue="v2",
                                                      raster=1)),
]
# clusters at the other large shapes of issue 24, each beside its 1x1 kernel (the same
# configuration as SWEEP's first two rows, named here so that MATCH=cluster builds them)
CLUSTER: Rows = [
    ("cluster 1x1: 4096^3's live best, raster 8", dict(regs="40/232", raster=8, epilogue="v2")),
    ("cluster 1x1: 4096^3's live best, raster 8, TMA store",
     dict(regs="40/232", raster=8, epilogue="tma")),
    ("cluster 2x1: live best, raster 8 + 2x1",
     dict(regs="40/232", raster=8, epilogue="v2", cluster="2x1")),
    ("cluster 2x1: live best, raster 8, TMA store + 2x1",
     dict(regs="40/232", raster=8, epilogue="tma", cluster="2x1")),
    ("cluster 2x1: live best + 2x1, one tile per CTA",
     dict(regs="40/232", raster=8, epilogue="v2", cluster="2x1", persistent="off")),
    ("cluster 1x2: live best, raster 8 + 1x2",
     dict(regs="40/232", raster=8, epilogue="v2", cluster="1x2")),
]
# tile order (raster_major): groups of block rows (m) or of block columns (n), each pair the
# same kernel otherwise; the second pair is GEMM 4096^3's best of BO's 5 x 200 live run
ORDER: Rows = [
    (f"order {major}, raster {g}, TMA store{', cluster 2x1' if c == '2x1' else ''}",
     dict(regs=regs, raster=g, epilogue="tma", cluster=c, inflight=inf, raster_major=major))
    for g, c, regs, inf in ((8, "1x1", "40/232", 0), (16, "2x1", "24/240", 1))
    for major in ("m", "n")]
# clusters on ragged extents (M and K; the shared B's N whole: cluster_shared_operand_whole)
# and on a bmm (pairs inside a batch element): correctness first
CLUSTER_RAGGED: Rows = [
    ("cluster 2x1 ragged M, K: coop 128x256, v2", dict(regs="40/232", raster=1, epilogue="v2",
                                                       cluster="2x1")),
    ("cluster 2x1 ragged M, K: coop 128x256, tma", dict(regs="40/232", raster=1,
                                                        epilogue="tma", cluster="2x1")),
    ("cluster 2x1 ragged M, K: ping-pong 128x128, 6 st, scalar",
     dict(arrangement="pingpong", bn=128, stages=6, raster=1, cluster="2x1")),
]
# (40/232: with a 24-register producer the non-persistent one spills 8 bytes, 1x1 does not)
CLUSTER_BMM: Rows = [
    ("bmm cluster 2x1: coop 128x128, 2 st, persistent", dict(bn=128, stages=2, raster=1,
                                                            regs="40/232", epilogue="v2",
                                                            cluster="2x1")),
    ("bmm cluster 1x2: coop 128x128, 2 st, one tile per CTA",
     dict(bn=128, stages=2, raster=1, regs="40/232", epilogue="v2", cluster="1x2",
          persistent="off")),
]
# bmm on the same template (batch outermost in the tile walk), beside space v2's best known
# kernel of the shape measured in the same run: v2's exhaustive-table optimum at 12x512x512x64
# (issue 24's bmm target), and cold v2 BO's best live run at 32x1024x1024x128 (issue 26's new
# shape, seed 1 of experiments/device/warm_default.sh)
BMM: Rows = [
    ("bmm coop 128x128, 2 st, one tile per CTA", dict(bn=128, stages=2, persistent="off",
                                                     raster=1, epilogue="v2")),
    ("bmm coop 128x128, 2 st, persistent", dict(bn=128, stages=2, raster=1, epilogue="v2")),
    ("bmm 1 consumer 64x128, 2 st, one tile per CTA", dict(bm=64, bn=128, stages=2,
                                                         consumers=1, persistent="off",
                                                         raster=1, epilogue="v2")),
    ("bmm 1 consumer 64x64, 2 st, one tile per CTA", dict(bm=64, bn=64, stages=2, consumers=1,
                                                        persistent="off", raster=1,
                                                        epilogue="v2")),
    ("bmm ping-pong 64x128, 4 st, persistent", dict(arrangement="pingpong", bm=64, bn=128,
                                                  stages=4, raster=1, epilogue="v2")),
    ("bmm coop 128x256, 2 st, one tile per CTA", dict(stages=2, persistent="off", raster=1,
                                                     epilogue="v2")),
]
# ragged extents (M, N or K not a multiple of the tile): correctness first (every run is checked
# against torch; the NaN-poisoned output catches unwritten elements), each epilogue at a few
# tile shapes; raster 1 where ceil(M / BM) is odd or small
RAGGED: Rows = [
    ("ragged coop 128x256, 4 st, v2", dict(regs="40/232", raster=1, epilogue="v2")),
    ("ragged coop 128x256, 4 st, scalar", dict(regs="40/232", raster=1)),
    ("ragged coop 128x256, 4 st, tma", dict(regs="40/232", raster=1, epilogue="tma")),
    ("ragged ping-pong 128x128, 6 st, v2", dict(arrangement="pingpong", bn=128, stages=6,
                                                raster=1, epilogue="v2")),
    ("ragged ping-pong 128x128, 6 st, tma", dict(arrangement="pingpong", bn=128, stages=6,
                                                 raster=1, epilogue="tma")),
    ("ragged 1 consumer 64x128, 6 st, scalar", dict(bm=64, bn=128, stages=6, consumers=1,
                                                    raster=1)),
    ("ragged 1 consumer 64x128, 6 st, tma", dict(bm=64, bn=128, stages=6, consumers=1, raster=1,
                                                 epilogue="tma")),
]
# odd N: only the scalar stores (v2_stores_need_even_n, tma_store_needs_n_multiple_of_4)
RAGGED_ODD_N: Rows = [row for row in RAGGED if row[1].get("epilogue", "scalar") == "scalar"]
# a bmm's K may be ragged (its M and N not: bmm_tiles_within_batch)
BMM_RAGGED_K: Rows = [
    ("bmm ragged K coop 128x128, 2 st, v2", dict(bn=128, stages=2, raster=1, epilogue="v2")),
    ("bmm ragged K coop 128x128, 2 st, tma", dict(bn=128, stages=2, raster=1, epilogue="tma")),
]
# conv2d on the template as an implicit GEMM (bocast/space/operators/_hopper_conv.py: a 4-D TMA box
# of X per (r, s, c-block), pixel tiles tile_n x tile_h x tile_w), Heron's ResNet cases C5, C3, C1
# beside cuDNN (torch conv2d, fp16 channels-last), picked by hand before any was timed; then
# correctness rows: a 1x1, a dilated conv2d, boxes wholly out of bounds (tile_w 1 at the left edge),
# ragged pixel tiles with the tma epilogue
CONV = dict(bn=128, regs="40/232", raster=1, epilogue="v2")
CONV_C5: Rows = [
    ("conv C5 coop 128x128, 16x2x4 pixels, 4 st", dict(CONV, tile_w=4, tile_h=2)),
    ("conv C5 1 consumer 64x128, 16x2x2 pixels (exact), 6 st",
     dict(CONV, bm=64, consumers=1, stages=6, tile_w=2, tile_h=2)),
    ("conv C5 1 consumer 64x64, 16x2x2 pixels (exact), 6 st",
     dict(CONV, bm=64, bn=64, consumers=1, stages=6, tile_w=2, tile_h=2)),
    ("conv C5 coop 128x128, 16x8x1 pixels (boxes wholly out of bounds), tma",
     dict(CONV, tile_w=1, tile_h=8, epilogue="tma")),
]
CONV_C3: Rows = [
    ("conv C3 coop 128x128, 8x4x4 pixels, 4 st", dict(CONV, tile_w=4, tile_h=4)),
    ("conv C3 1 consumer 64x128, 4x4x4 pixels, 6 st",
     dict(CONV, bm=64, consumers=1, stages=6, tile_w=4, tile_h=4)),
    ("conv C3 coop 128x64, 8x4x4 pixels, 6 st, tma",
     dict(CONV, bn=64, stages=6, tile_w=4, tile_h=4, epilogue="tma")),
]
CONV_C1: Rows = [
    ("conv C1 coop 128x64, 2x8x8 pixels, 6 st", dict(CONV, bn=64, stages=6, tile_w=8,
                                                     tile_h=8)),
    ("conv C1 coop 256x64, 4x8x8 pixels, 4 st, tma",
     dict(CONV, bm=256, bn=64, tile_w=8, tile_h=8, epilogue="tma")),
    ("conv C1 ping-pong 128x64, 2x8x8 pixels, 6 st",
     dict(CONV, bn=64, stages=6, arrangement="pingpong", tile_w=8, tile_h=8)),
]
CONV_1X1: Rows = [("conv 1x1 1 consumer 64x128, 16x2x2 pixels, 4 st",
             dict(CONV, bm=64, consumers=1, tile_w=2, tile_h=2))]
CONV_DILATED: Rows = [("conv dilation 2 coop 128x128, 16x2x4 pixels, 4 st, scalar",
                 dict(CONV, tile_w=4, tile_h=2, epilogue="scalar"))]
CONV_RAGGED: Rows = [("conv ragged 14x14 coop 128x128, 2x8x8 pixels, tma",
                dict(CONV, tile_w=8, tile_h=8, epilogue="tma"))]
V2_BMM_512 = {"instr": "mma", "tile_i": [16, 1, 2], "tile_j": [8, 2, 2], "tile_k": [2, 2],
              "stages": 2, "async_copy": "on", "frag_pipeline": "off", "smem_layout": "xor",
              "vec": 8, "raster": 1, "unroll": 0, "writeback": "shared", "out_vec": 4,
              "batch_bind": "y"}
V2_BMM_1024 = {"async_copy": "on", "batch_bind": "x", "frag_pipeline": "full",
               "instr": "wmma8x32x16", "out_vec": None, "raster": 1, "smem_layout": "pad16",
               "stages": 2, "tile_i": [16, 1, 8], "tile_j": [8, 2, 2], "tile_k": [2, 4],
               "unroll": 512, "vec": 8, "writeback": "direct"}
# (operator, shape, space) -> variants; a v2 variant is a whole configuration
SHAPES: dict[tuple[str, tuple[int, ...], str], Rows] = {
          ("gemm", (4096, 4096, 4096), "v3"): LADDER + ORDER,
          ("gemm", (1024, 1024, 1024), "v3"): SWEEP,
          ("gemm", (2048, 8192, 1024), "v3"): SWEEP + CLUSTER + ORDER,
          ("gemm", (4096, 4096, 14336), "v3"): SWEEP + CLUSTER + ORDER,
          ("gemm", (1000, 1024, 1000), "v3"): CLUSTER_RAGGED,
          ("bmm", (12, 512, 512, 64), "v3"): BMM + CLUSTER_BMM,
          ("bmm", (32, 1024, 1024, 128), "v3"): BMM,
          ("gemm", (1000, 1000, 1000), "v3"): RAGGED, ("gemm", (4096, 4096, 4104), "v3"): RAGGED,
          ("gemm", (4100, 4096, 4104), "v3"): RAGGED, ("gemm", (1000, 1001, 1000), "v3"):
          RAGGED_ODD_N, ("bmm", (12, 512, 512, 72), "v3"): BMM_RAGGED_K,
          ("bmm", (12, 512, 512, 64), "v2"): [("bmm v2: exhaustive table's best", V2_BMM_512)],
          ("bmm", (32, 1024, 1024, 128), "v2"): [("bmm v2: cold BO's best (live, seed 1)",
                                                  V2_BMM_1024)],
          ("conv2d", (16, 14, 14, 256, 256, 3, 3, 1, 1, 1), "v3"): CONV_C5 + CONV_RAGGED,
          ("conv2d", (16, 28, 28, 128, 128, 3, 3, 1, 1, 1), "v3"): CONV_C3,
          ("conv2d", (16, 56, 56, 64, 64, 3, 3, 1, 1, 1), "v3"): CONV_C1,
          ("conv2d", (16, 14, 14, 256, 256, 1, 1, 1, 0, 1), "v3"): CONV_1X1,
          ("conv2d", (16, 14, 14, 256, 256, 3, 3, 1, 2, 2), "v3"): CONV_DILATED}


def build(out: Path) -> None:
    source_only()
    rows = []
    only = os.environ.get("ONLY")  # an operator: build only its rows
    match = re.compile(os.environ.get("MATCH", ""))  # a regex: only the rows whose name it finds
    for (name_op, shape, space), variants in SHAPES.items():
        if only and name_op != only:
            continue
        op = make(name_op, shape, space=space)
        for name, change in variants:
            if not match.search(name):
                continue
            config = {**BASE, **change} if space == "v3" else change
            bad = op.space.validate(config)
            if bad:
                raise SystemExit(f"{name} at {shape} is outside the space: {bad}")
            built = build_one({"workload": op.workload, "config": config}).result
            row = {"name": name, "op": name_op, "space": space, "workload": op.workload,
                   "shape": list(shape), "config": config,
                   "status": str(built.status), "error": built.error,
                   "features": built.features, "violations": bad}
            if built.cubin is not None:
                task = kernel_task(op, built, seed=0, repeats=20, warmup_ms=50)
                task["cubin"] = base64.b64encode(built.cubin).decode()
                row["task"] = task
            print(f"{name:58s} {row['status']:12s} regs {built.features.get('registers')} "
                  f"spills {built.features.get('spill_stores', 0)} {built.error[:80]}")
            rows.append(row)
    out.write_text(json.dumps(rows))


def _workload(row: dict) -> dict:
    """A row's workload (rows built before bmm joined were v3 GEMMs and did not say)."""
    return row.get("workload") or {"op": "gemm", "shape": row["shape"], "dtype": "fp16:fp32",
                                   "layout": "NT", "space": "v3"}


def _shape_key(row: dict) -> str:
    """The reference a row is timed against: its operator and shape (any space)."""
    return f"{row.get('op', 'gemm')} {tuple(row['shape'])}"


def run(src: Path, out: Path, rounds: int) -> None:
    rows = json.loads(src.read_text())
    info = gpu_worker.device_info()
    with TimedPool("bocast.measure.gpu_worker:run_task", 1) as pool:
        def once(task, timeout_s=15.0):
            res = pool.map([task], timeout_s)[0]
            return {"status": res.kind, "error": res.detail[-300:]} \
                if isinstance(res, TaskFailure) else res

        for row in rows:
            row["runs"] = []
        refs: dict[str, list] = {}
        for r in range(rounds):
            for key in sorted({_shape_key(row) for row in rows}):
                wl = next(_workload(row) for row in rows if _shape_key(row) == key)
                ref = once({"kind": "reference", "workload": wl, "seed": 0, "repeats": 20,
                            "warmup_ms": 50})
                refs.setdefault(key, []).append(ref)
            for row in rows:
                # a kernel that failed (hung, crashed, wrong) is not run again
                if "task" in row and all(x.get("status") == "ok" for x in row["runs"]):
                    task = dict(row["task"], cubin=base64.b64decode(row["task"]["cubin"]))
                    res = once(task)
                    row["runs"].append({k: v for k, v in res.items() if not k.startswith("_")})
                    if res.get("status") != "ok":
                        print(f"{row['name']} {row['shape']}: {res.get('status')} "
                              f"{str(res.get('error'))[:120]}", file=sys.stderr)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    table = []
    for row in rows:
        ref_t = [x["tflops"] for x in refs[_shape_key(row)] if "tflops" in x]
        ok = [x["tflops"] for x in row["runs"] if x.get("status") == "ok"]
        bad = [x for x in row["runs"] if x.get("status") != "ok"]
        cub = statistics.median(ref_t) if ref_t else float("nan")
        med = statistics.median(ok) if ok else float("nan")
        task = row.pop("task", None) or {}
        # a cluster launch: how many of its clusters the GPU holds at once (fewer than the grid's
        # in a persistent kernel: a tail wave)
        held = next((x["max_active_clusters"] for x in row["runs"]
                     if "max_active_clusters" in x), None)
        size = math.prod(task.get("cluster") or (1,))
        held_note = f" {held} of {task['grid'][0] // size} clusters at once" \
            if held is not None else ""
        errors = [x["rel_error"] for x in row["runs"] if "rel_error" in x]
        # cublas_median: the vendor reference's median (its older name; cuDNN for conv2d)
        row["summary"] = {"tflops_median": med, "tflops_min": min(ok, default=None),
                          "tflops_max": max(ok, default=None), "cublas_median": cub,
                          "reference_median": cub,
                          "ratio": med / cub if ok else None, "failures": len(bad),
                          "rel_error_max": max(errors, default=None)}
        fail = f" {bad[0].get('status')}: {str(bad[0].get('error'))[:60]}" if bad else ""
        table.append(f"| {row['name']} | {row.get('op', 'gemm')} "
                     f"{'x'.join(map(str, row['shape']))} | "
                     f"{med:.1f} [{min(ok, default=0):.1f}-{max(ok, default=0):.1f}] | "
                     f"{cub:.1f} | {med / cub if ok else 0:.3f} |{fail}{held_note}")
    out.write_text(json.dumps({"device": info, "references": refs, "rows": rows}, indent=1))
    print(f"{info.get('gpu')} driver {info.get('driver')}; references:")
    for key, results in sorted(refs.items()):
        print(f"  {key}: {next((x['what'] for x in results if 'what' in x), 'failed')}")
    print("| kernel | shape | TFLOPS median [min-max] | reference median | / reference |")
    print("\n".join(table))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("build", "run"))
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    if a.mode == "build":
        build(a.paths[0])
    else:
        run(a.paths[0], a.paths[1], a.rounds)


if __name__ == "__main__":
    main()
