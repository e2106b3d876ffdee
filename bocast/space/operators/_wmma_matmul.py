"""Space v1: Heron's WMMA knob set on the matmul of ``_matmul.py``.

The space of the datasets and results recorded before space v2 (``_pipelined_matmul.py``);
kept so that they replay and rerun. The knobs are documented in ``gemm.py``. Its
``pipeline`` knob annotates the fetch loop for TVM's software pipeline with async stage 0, but the
lowering never set ``tirx.use_async_copy``: the copies were synchronous (commit/wait groups around
plain loads and stores). Space v2 makes that a knob of its own (``async_copy``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bocast.space.knobs import Categorical, Constraint, Knob, Ordinal, PowerOfTwo, Split
from bocast.space.space import Space
from bocast.space.tensorcore import WMMA_SHAPES, wmma_intrin

from . import _matmul as mm
from ._matmul import copy_loop, fetch, inline_producers, round_up, spread, tile2, tile_dims

ACC_REGISTER_LIMIT = 128  # accumulator registers per thread (see the constraint's doc)
UNROLL_STEPS = (0, 16, 64, 512, 1500)
STAGE_SCOPE = "shared.dyn"


# ------------------------------------------------------------------------------------ space


def knobs(spec) -> list[Knob]:
    """Heron's GEMM knobs; ``gemm.py`` documents what each one sets."""
    M, N, K = spec.M, spec.N, spec.K
    out_vecs = (1, 2, 4) if spec.acc_bytes == 4 else (1, 2, 4, 8)
    staged = {"writeback": ("shared",)}
    return [
        Categorical("wmma", tuple(WMMA_SHAPES), doc="WMMA shape m x n x k"),
        Split("tile_i", 3, extent=lambda c: round_up(M, WMMA_SHAPES[c["wmma"]][0])
              // WMMA_SHAPES[c["wmma"]][0], extent_from=("wmma",),
              doc="WMMA tiles along M: blocks, warps, fragments per warp"),
        Split("tile_j", 3, extent=lambda c: round_up(N, WMMA_SHAPES[c["wmma"]][1])
              // WMMA_SHAPES[c["wmma"]][1], extent_from=("wmma",),
              doc="WMMA tiles along N: blocks, warps, fragments per warp"),
        Split("tile_k", 3, extent=round_up(K, 16) // 16, doc="k/16: outer, middle, inner"),
        Ordinal("smem_at", (0, 1), doc="shared-memory fetch under k loop level 0 or 1"),
        Ordinal("frag_at", (0, 1, 2), doc="fragment load under k loop level 0, 1 or 2"),
        PowerOfTwo("a_pad", (0, 8, 16), doc="storage_align offset of the A tile"),
        PowerOfTwo("b_pad", (0, 8, 16), doc="storage_align offset of the B tile"),
        PowerOfTwo("vec", (1, 2, 4, 8), doc="global->shared vector width (elements)"),
        Ordinal("pipeline", (1, 2, 3), doc="software pipeline depth of the fetch loop"),
        Ordinal("unroll", UNROLL_STEPS, doc="auto_unroll_max_step"),
        Categorical("writeback", ("direct", "shared"), doc="accumulator write-back path"),
        Categorical("c_at", ("block", "warp"), active_when=staged, doc="staging copy scope"),
        PowerOfTwo("c_pad", (0, 8, 16), active_when=staged, doc="storage_align of staging tile"),
        PowerOfTwo("out_vec", out_vecs, active_when=staged, doc="shared->global vector width"),
    ]


def derive(spec):
    """Tile sizes, threads, shared memory and registers of a batch of configurations."""
    acc_bytes, trans_b = spec.acc_bytes, spec.trans_b
    wm_of, wn_of = tile_dims(WMMA_SHAPES, 0), tile_dims(WMMA_SHAPES, 1)

    def run(c):
        wm, wn = wm_of(c["wmma"]), wn_of(c["wmma"])
        ti, tj, tk = c["tile_i"], c["tile_j"], c["tile_k"]
        warps = ti[:, 1] * tj[:, 1]
        bm, bn = ti[:, 1] * ti[:, 2] * wm, tj[:, 1] * tj[:, 2] * wn
        kc = np.where(c["smem_at"] == 0, tk[:, 1] * tk[:, 2], tk[:, 2]) * 16
        a_row, a_rows = kc, bm
        b_row, b_rows = (kc, bn) if trans_b else (bn, kc)
        ab_bytes = 2 * (a_rows * (a_row + c["a_pad"]) + b_rows * (b_row + c["b_pad"]))
        staged_ = c["writeback"] == "shared"
        c_bytes = np.where(staged_, bm * (bn + c["c_pad"]) * acc_bytes, 0)
        kf = np.select([c["frag_at"] == 0, c["frag_at"] == 1], [tk[:, 1] * tk[:, 2], tk[:, 2]], 1)
        pipe_extent = np.where(c["smem_at"] == 0, tk[:, 0], tk[:, 1])
        return {
            "wm": wm, "wn": wn, "warps": warps, "threads": 32 * warps, "bm": bm, "bn": bn,
            "kc": kc, "a_row": a_row, "b_row": b_row, "staged": staged_,
            "pipe_extent": pipe_extent,
            # A/B tiles are static shared memory (one copy per pipeline stage); the staging
            # tile is dynamic shared memory, allocated beside them.
            "static_smem_bytes": c["pipeline"] * ab_bytes,
            "dynamic_smem_bytes": c_bytes,
            "smem_bytes": c["pipeline"] * ab_bytes + c_bytes,
            "acc_regs": ti[:, 2] * tj[:, 2] * wm * wn * acc_bytes // (32 * 4),
            "frag_regs": (ti[:, 2] * wm + tj[:, 2] * wn) * 16 * kf * 2 // (32 * 4),
        }

    return run


def constraints(spec, vec: Constraint) -> list[Constraint]:
    return [
        mm.threads_constraint(),
        mm.static_shared_memory_constraint(
            "A and B tiles (x pipeline depth) fit the 48 KB of static shared memory"),
        mm.shared_memory_constraint(
            "static tiles plus the dynamic staging tile fit Hopper's 227 KB per block"),
        Constraint("accumulators_le_128_registers",
                   "accumulator fragments of one warp take <= 128 of the 255 registers per "
                   "thread; beyond that ptxas spills them to local memory",
                   lambda c: c["acc_regs"] <= ACC_REGISTER_LIMIT),
        Constraint("operand_fragments_le_128_registers",
                   "A and B fragments held at frag_at take <= 128 registers per thread",
                   lambda c: c["frag_regs"] <= ACC_REGISTER_LIMIT),
        Constraint("fragments_after_shared", "frag_at is at or inside smem_at",
                   lambda c: c["frag_at"] >= c["smem_at"]),
        Constraint("a_pad_lt_row", "storage_align offset below the A row width (TVM ignores "
                   "offsets >= the row, which would duplicate pad 0)",
                   lambda c: c["a_pad"] < c["a_row"]),
        Constraint("b_pad_lt_row", "storage_align offset below the B row width",
                   lambda c: c["b_pad"] < c["b_row"]),
        Constraint("c_pad_lt_row", "storage_align offset below the staging row width",
                   lambda c: ~c["staged"] | (c["c_pad"] < c["bn"])),
        vec,
        mm.out_vec_constraint(spec.N),
        mm.direct_writeback_constraint(
            spec, "store_matrix_sync straight to C needs M and N to be multiples of the WMMA "
                  "shape (padded outputs go through the staging tile)", "wm", "wn"),
        Constraint("pipeline_le_fetch_loop", "pipeline depth <= trip count of the fetch loop",
                   lambda c: c["pipeline"] <= c["pipe_extent"]),
    ]


def space(spec, vec: Constraint, extra_knobs: Sequence[Knob] = (),
          extra_constraints: Sequence[Constraint] = ()) -> Space:
    return Space(knobs(spec) + list(extra_knobs), constraints(spec, vec) + list(extra_constraints),
                 derive(spec))


def build_options(config) -> dict:
    return {}  # TVM's defaults and bocast.space.tensorcore.SM90_TARGET


# --------------------------------------------------------------------------------- schedule


def schedule(spec, func, config, prepare):
    """Apply a feasible configuration to ``func`` (the operator's prim_func); returns the
    ``tvm.s_tir.Schedule``. ``prepare`` is ``_matmul.py``'s first steps."""
    from tvm import s_tir

    c = config
    wm, wn, wk = WMMA_SHAPES[c["wmma"]]
    trans_b, acc = spec.trans_b, spec.acc_dtype
    sch = s_tir.Schedule(func)
    blk, b, (i, j, k), mma, pad_mn = prepare(sch, wm, wn, wk)
    i0, i1, i2 = sch.split(i, list(c["tile_i"]))
    j0, j1, j2 = sch.split(j, list(c["tile_j"]))
    k0, k1, k2 = sch.split(k, list(c["tile_k"]))
    sch.reorder(i0, j0, i1, j1, k0, k1, k2, i2, j2)
    if b is None:
        bx = sch.fuse(i0, j0)
    elif c["batch_bind"] == "x":
        bx = sch.fuse(b, i0, j0)
    else:
        bx = sch.fuse(i0, j0)
        sch.bind(b, "blockIdx.y")
    sch.bind(bx, "blockIdx.x")
    ty = sch.fuse(i1, j1)
    sch.bind(ty, "threadIdx.y")
    warps = c["tile_i"][1] * c["tile_j"][1]
    k_loops = (k0, k1, k2)

    stages = []
    for idx, pad in ((0, c["a_pad"]), (1, c["b_pad"])):
        stage, row_width = fetch(sch, mma, idx, "shared", k_loops[c["smem_at"]], warps, c["vec"])
        if pad:
            sch.storage_align(stage, 0, axis=-2, factor=row_width, offset=pad)
        stages.append(stage)
    for stage in stages:
        inline_producers(sch, stage)

    frag_a = sch.cache_read(mma, 0, "wmma.matrix_a")
    frag_b = sch.cache_read(mma, 1, "wmma.matrix_b")
    if c["frag_at"] != c["smem_at"]:  # cache_read already placed them at the fetch's loop
        sch.compute_at(frag_a, k_loops[c["frag_at"]])
        sch.compute_at(frag_b, k_loops[c["frag_at"]])

    staged = c["writeback"] == "shared"
    acc_frag, stage_out = mm.write_back(sch, spec, mma, staged=staged, padded_mn=pad_mn,
                                        acc_scope="wmma.accumulator", stage_scope=STAGE_SCOPE,
                                        warp_loop=ty,
                                        stage_at=bx if c["c_at"] == "block" else ty)

    init = sch.get_child_blocks(sch.decompose_reduction(mma, k0))[0]

    shape = (wm, wn, wk)
    sch.tensorize(tile2(sch, frag_a, wm, wk), wmma_intrin("load_a", shape, spec.in_dtype))
    b_tile = (wn, wk) if trans_b else (wk, wn)
    sch.tensorize(tile2(sch, frag_b, *b_tile),
                  wmma_intrin("load_b", shape, spec.in_dtype, b_transposed=trans_b))
    tile2(sch, acc_frag, wm, wn)
    sch.tensorize(sch.get_loops(init)[-2], wmma_intrin("fill", shape, acc))
    store_name = sch.get(acc_frag).name_hint
    sch.tensorize(sch.get_loops(acc_frag)[-2], wmma_intrin(
        "store", shape, acc, scope=STAGE_SCOPE if staged else "global"))
    sch.tensorize(sch.get_loops(blk)[-3], wmma_intrin("sync", shape, acc, b_transposed=trans_b))

    if staged:
        if c["c_pad"]:  # on the tensorized store, which now writes the staging tile
            bn = c["tile_j"][1] * c["tile_j"][2] * wn
            sch.storage_align(store_name + "_o", 0, axis=-2, factor=bn, offset=c["c_pad"])
        # the copy's own loops, under the block loop (all warps copy) or the warp loop
        block_copy = c["c_at"] == "block"
        spread(sch, copy_loop(sch, stage_out, bx if block_copy else ty),
               warps if block_copy else None, c["out_vec"])

    if c["pipeline"] > 1:
        # Statements under the fetch loop: the two fetches, the two fragment loads when they
        # sit at the same level, then the inner loop. Fetches form stage 0 (cp.async).
        loop = k_loops[c["smem_at"]]
        n_stmt = 5 if c["frag_at"] == c["smem_at"] else 3
        sch.annotate(loop, "software_pipeline_stage", [0, 0] + [c["pipeline"] - 1] * (n_stmt - 2))
        sch.annotate(loop, "software_pipeline_order", list(range(n_stmt)))
        sch.annotate(loop, "software_pipeline_async_stages", [0])
    if c["unroll"]:
        sch.annotate(bx, "pragma_auto_unroll_max_step", c["unroll"])
        sch.annotate(bx, "pragma_unroll_explicit", 1)
    return sch
