"""Space v2: the pipelined Tensor Core matmul (cp.async stages, ldmatrix + mma.sync or WMMA,
XOR-swizzled or padded dynamic shared memory, block rasterisation).

The matmul is the one of ``_matmul.py`` (``MatmulSpec``); this module gives its knobs,
derived quantities, known constraints, schedule and build options. The loop nest is

    blockIdx.x   <- (block rows / raster, block columns, raster)   [tile_i[0] x tile_j[0]]
    threadIdx.y  <- warps                                          [tile_i[1] x tile_j[1]]
    k0           <- shared-memory tiles of BK = 16 tile_k[1]       (software-pipelined, stages)
      A, B tiles -> shared.dyn (cooperative vectorised copy; cp.async when async_copy is on)
      k1         <- 16-wide k steps inside the tile                 (fragment double buffer)
        fragments <- shared (ldmatrix or wmma::load_matrix_sync)
        tile_i[2] x tile_j[2] Tensor Core tiles per warp (mma.sync m16n8k16 pairs or wmma)
    accumulators -> global (direct) or through a shared.dyn staging tile (vectorised copy)

Knobs (``bocast space gemm --describe``):

==============  ===========================================================================
instr           Tensor Core instruction path: ``mma`` (ldmatrix + mma.sync m16n8k16, two per
                16x16x16 tile) or WMMA fragments 16x16x16, 32x8x16, 8x32x16
tile_i, tile_j  Tensor Core tiles along M / N: thread blocks, warps, tiles per warp
tile_k          k/16 split in two: shared-memory tiles (the pipelined loop), 16-wide steps per
                tile (BK = 16 x tile_k[1])
stages          shared-memory buffers of the pipelined k0 loop (1: no pipeline)
async_copy      the global->shared copy as cp.async (PTX async copy, ``tirx.use_async_copy``)
                or as plain loads and stores; only with stages >= 2
frag_pipeline   fragments of the k1 loop: ``off`` (loaded and used in the same step),
                ``full`` (double-buffered; k0's stages [0, 0, S-1, S-1, S-1]: S-1 tiles in
                flight) or ``ms`` (double-buffered with MetaSchedule's lead [0, 0, S-2, S-1, S-1]:
                the next tile's first fragments are loaded a stage early, one tile fewer in flight)
smem_layout     shared A/B tiles padded by 0, 8 or 16 elements per row (storage_align), or
                XOR-swizzled in 16-byte chunks (``permuted_layout``; ldmatrix only: it does not
                rewrite WMMA loads)
vec             vector width (elements) of the global->shared copy
raster          block rows grouped together in blockIdx order (L2 reuse, Triton's GROUP_M)
unroll          auto_unroll_max_step on the block loop
writeback       accumulators straight to global memory, or staged through shared memory
out_vec         (staged) vector width of the shared->global copy
==============  ===========================================================================

A and B tiles (times ``stages``) are one dynamic allocation (``shared.dyn``, up to the H100's
227 KB per block). The mma path's staging tile joins it, and TVM's merge of dynamic buffers
places it over the A/B buffers (they are not live at the same time): the kernel asks for the
larger of the two (see ``merged_dynamic_bytes`` for TVM's rule and where the kernel asks for
more). WMMA stores cannot address that merged allocation in TVM 0.27, so the WMMA
staging tile is static shared memory (48 KB at most) beside it. The known constraints count
this (tests check it against the shared memory of lowered kernels).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bocast.space.knobs import Categorical, Constraint, Knob, Ordinal, PowerOfTwo, Split
from bocast.space.space import Space
from bocast.space.tensorcore import ldmatrix_layout, mma_intrin, wmma_intrin

from . import _matmul as mm
from ._matmul import copy_loop, fetch, inline_producers, spread, tile2, tile_dims

#: Tensor Core instruction paths and the (m, n, k) of one tile.
INSTRUCTIONS = {"mma": (16, 16, 16), "wmma16x16x16": (16, 16, 16), "wmma32x8x16": (32, 8, 16),
                "wmma8x32x16": (8, 32, 16)}
REGISTERS_PER_SM = 65536
REGISTER_LIMIT = 255
MAX_TILE = 256  # CTA tile edge
MAX_BK = 128
UNROLL_STEPS = (0, 16, 64, 512, 1500)
LAYOUT_PAD = {"pad0": 0, "pad8": 8, "pad16": 16, "xor": 0}
SCOPE = "shared.dyn"
#: registers a thread needs beyond fragments (addresses, loop counters, predicates): with 16 the
#: estimate's median error over 200 sampled GEMM 4096^3 kernels was about 0 (ptxas reports; it
#: is a rough figure, off by -30..+30 for most kernels)
REGISTER_OVERHEAD = 16


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def knobs(spec) -> list[Knob]:
    M, N, K = spec.M, spec.N, spec.K
    out_vecs = (1, 2, 4) if spec.acc_bytes == 4 else (1, 2, 4, 8)
    staged = {"writeback": ("shared",)}
    return [
        Categorical("instr", tuple(INSTRUCTIONS), doc="Tensor Core path: mma (ldmatrix + "
                    "mma.sync m16n8k16) or a WMMA shape m x n x k"),
        Split("tile_i", 3, extent=lambda c: _ceil_div(M, INSTRUCTIONS[c["instr"]][0]),
              extent_from=("instr",), doc="Tensor Core tiles along M: blocks, warps, per warp"),
        Split("tile_j", 3, extent=lambda c: _ceil_div(N, INSTRUCTIONS[c["instr"]][1]),
              extent_from=("instr",), doc="Tensor Core tiles along N: blocks, warps, per warp"),
        Split("tile_k", 2, extent=_ceil_div(K, 16),
              doc="k/16: shared-memory tiles (pipelined loop), 16-wide steps per tile"),
        Ordinal("stages", (1, 2, 3, 4, 5), doc="shared-memory buffers of the pipelined loop"),
        Categorical("async_copy", ("on", "off"), doc="global->shared copy as cp.async"),
        Categorical("frag_pipeline", ("off", "full", "ms"),
                    doc="fragment double buffer: off, full cp.async lead, MetaSchedule's lead"),
        Categorical("smem_layout", tuple(LAYOUT_PAD),
                    doc="shared A/B rows padded by 0/8/16 elements, or XOR-swizzled"),
        PowerOfTwo("vec", (1, 2, 4, 8), doc="global->shared vector width (elements)"),
        Ordinal("raster", (1, 2, 4, 8, 16), doc="block rows grouped in blockIdx order"),
        Ordinal("unroll", UNROLL_STEPS, doc="auto_unroll_max_step"),
        Categorical("writeback", ("direct", "shared"), doc="accumulator write-back path"),
        PowerOfTwo("out_vec", out_vecs, active_when=staged, doc="shared->global vector width"),
    ]


def merged_dynamic_bytes(a, b, c):
    """Bytes of one dynamic allocation holding buffers of ``a`` and ``b`` bytes (A and B tiles)
    and then one of ``c`` bytes (the staging tile; 0: none), as TVM 0.27's
    MergeSharedMemoryAllocations plans it once the A/B buffers are dead: ``c`` reuses the
    smallest free buffer of ``c`` to ``16 c`` bytes; failing that, the free buffers smaller than
    ``c``, from the largest down until they cover it; failing that, it is allocated beside them.

    This is TVM's best case, and it was exact for every lowered GEMM kernel with fp32
    accumulators and a long k loop that we compared (400 samples at 1024^3, 4096^3 and 32x4096
    x4096). TVM's liveness is statement-grained, so where the A/B buffers stay alive longer than
    this assumes (short k loops that the unroll knob unrolls, or whose pipeline has no steady
    state; fp16 accumulators with equal A and B tiles) the kernel asks for more, never less; a
    kernel that then needs more than 227 KB fails to launch, a recorded failure. The tests
    check both statements."""
    x, y = np.minimum(a, b), np.maximum(a, b)
    fits = lambda e: (e >= c) & (e <= 16 * c)  # noqa: E731
    return np.select(
        [c == 0, fits(x) | fits(y), y < c, x < c],
        [x + y, x + y, np.maximum(c, x + y), y + c],
        x + y + c)


def derive(spec):
    """Tile sizes, threads, shared memory and registers of a batch of configurations."""
    acc_bytes, trans_b = spec.acc_bytes, spec.trans_b
    m_of, n_of = tile_dims(INSTRUCTIONS, 0), tile_dims(INSTRUCTIONS, 1)
    pads = list(LAYOUT_PAD)

    def pad_of(col):
        return np.select([col == p for p in pads], list(LAYOUT_PAD.values()), 0)

    def run(c):
        m, n = m_of(c["instr"]), n_of(c["instr"])
        ti, tj, tk = c["tile_i"], c["tile_j"], c["tile_k"]
        warps = ti[:, 1] * tj[:, 1]
        bm, bn, bk = ti[:, 1] * ti[:, 2] * m, tj[:, 1] * tj[:, 2] * n, tk[:, 1] * 16
        pad = pad_of(c["smem_layout"])
        b_row, b_rows = (bk, bn) if trans_b else (bn, bk)
        a_bytes = 2 * c["stages"] * bm * (bk + pad)
        b_bytes = 2 * c["stages"] * b_rows * (b_row + pad)
        staged = c["writeback"] == "shared"
        c_bytes = np.where(staged, bm * bn * acc_bytes, 0)
        mma = c["instr"] == "mma"
        # mma: the staging tile joins the dynamic allocation (where TVM may place it over the
        # dead A/B buffers); WMMA: it is static shared memory beside them
        static_smem = np.where(mma, 0, c_bytes)
        smem = np.where(mma, merged_dynamic_bytes(a_bytes, b_bytes, c_bytes),
                        a_bytes + b_bytes + c_bytes)
        double = np.where(c["frag_pipeline"] == "off", 1, 2)
        acc_regs = ti[:, 2] * tj[:, 2] * m * n * acc_bytes // (32 * 4)
        frag_regs = double * (ti[:, 2] * m + tj[:, 2] * n) * 16 * 2 // (32 * 4)
        regs = acc_regs + frag_regs + REGISTER_OVERHEAD
        return {"m": m, "n": n, "warps": warps, "threads": 32 * warps, "bm": bm, "bn": bn,
                "bk": bk, "a_row": bk, "b_row": b_row, "pad": pad, "staged": staged,
                "smem_bytes": smem, "static_smem_bytes": static_smem,
                "dynamic_smem_bytes": smem - static_smem, "staging_bytes": c_bytes,
                "acc_regs": acc_regs, "frag_regs": frag_regs,
                "reg_estimate": regs, "blocks_i": ti[:, 0], "k_tiles": tk[:, 0]}

    return run


def constraints(spec, vec: Constraint) -> list[Constraint]:
    def mma(c):
        return c["instr"] == "mma"

    return [
        mm.threads_constraint(),
        Constraint("block_tile_le_256", f"thread-block tile at most {MAX_TILE} x {MAX_TILE}",
                   lambda c: (c["bm"] <= MAX_TILE) & (c["bn"] <= MAX_TILE)),
        Constraint("bk_le_128", f"BK = 16 x tile_k[1] <= {MAX_BK}",
                   lambda c: c["bk"] <= MAX_BK),
        mm.shared_memory_constraint(
            "stages x (A + B tiles) and the staging tile (for mma in the same dynamic "
            "allocation, over the A/B buffers) fit the 227 KB per block"),
        mm.static_shared_memory_constraint(
            "a WMMA staging tile (static shared memory) fits the 48 KB static limit"),
        Constraint("registers_le_255", "estimated registers per thread (accumulators, "
                   "fragments x buffers, overhead) <= 255", lambda c: c["reg_estimate"] <= 255),
        Constraint("register_file_per_block",
                   "estimated registers x threads fit the 64K-register file (ptxas caps the "
                   "registers at 65536 / threads and spills the rest)",
                   lambda c: c["reg_estimate"] * c["threads"] <= REGISTERS_PER_SM),
        Constraint("stages_le_k_tiles", "pipeline stages <= trip count of the k0 loop",
                   lambda c: c["stages"] <= c["k_tiles"]),
        Constraint("async_copy_needs_stages",
                   "cp.async belongs to the pipeline: with one stage the copy is synchronous "
                   "(async_copy off), so each configuration has one spelling",
                   lambda c: (c["stages"] > 1) | (c["async_copy"] == "off")),
        Constraint("cp_async_needs_4_bytes", "cp.async copies 4, 8 or 16 bytes: vec >= 2",
                   lambda c: (c["async_copy"] == "off") | (c["vec"] >= 2)),
        Constraint("frag_pipeline_needs_k_steps",
                   "a fragment double buffer needs >= 2 k steps per shared tile (tile_k[1])",
                   lambda c: (c["frag_pipeline"] == "off") | (c["tile_k"][:, 1] >= 2)),
        Constraint("ms_lead_needs_stages",
                   "MetaSchedule's lead loads the next tile's fragments one stage early: it needs "
                   "stages >= 2, and >= 3 with cp.async (with 2, TVM 0.27 puts those loads in the "
                   "stage of the tile's own cp.async copies with no wait between: all 64 such "
                   "kernels measured on the H100 read unwritten shared memory)",
                   lambda c: (c["frag_pipeline"] != "ms")
                   | (c["stages"] >= np.where(c["async_copy"] == "on", 3, 2))),
        Constraint("wmma_ms_lead_needs_even_k_steps",
                   "TVM 0.27 cannot infer WMMA fragments when MetaSchedule's lead rotates them "
                   "over an odd number of k steps (every such build failed to lower; even ones "
                   "built)",
                   lambda c: mma(c) | (c["frag_pipeline"] != "ms") | (c["tile_k"][:, 1] % 2 == 0)),
        Constraint("xor_swizzle_needs_ldmatrix",
                   "the XOR swizzle rewrites ldmatrix reads, not WMMA loads",
                   lambda c: (c["smem_layout"] != "xor") | mma(c)),
        Constraint("xor_rows_32_or_multiple_of_64",
                   "the XOR swizzle permutes 16-byte chunks of rows of 32 or 64k elements (TVM "
                   "also takes other multiples of 32, but its CUDA codegen then emits 8-lane "
                   "int64 vectors nvcc rejects: every BK = 96 kernel failed to compile)",
                   lambda c: (c["smem_layout"] != "xor")
                   | (((c["a_row"] == 32) | (c["a_row"] % 64 == 0))
                      & ((c["b_row"] == 32) | (c["b_row"] % 64 == 0)))),
        Constraint("pad_lt_row", "padding below the row width (TVM ignores larger offsets)",
                   lambda c: (c["pad"] < c["a_row"]) & (c["pad"] < c["b_row"])),
        Constraint("raster_divides_block_rows",
                   "raster groups whole block rows: it divides tile_i[0]",
                   lambda c: c["blocks_i"] % c["raster"] == 0),
        vec,
        mm.out_vec_constraint(spec.N),
        mm.direct_writeback_constraint(
            spec, "stores straight to C need M and N to be multiples of the instruction tile "
                  "(padded outputs go through the staging tile)", "m", "n"),
    ]


def space(spec, vec: Constraint, extra_knobs: Sequence[Knob] = (),
          extra_constraints: Sequence[Constraint] = ()) -> Space:
    return Space(knobs(spec) + list(extra_knobs), constraints(spec, vec) + list(extra_constraints),
                 derive(spec))


def build_options(config) -> dict:
    """How to lower ``config``: cp.async where it asks for it, and the H100's real limit of
    dynamic shared memory per block in the target."""
    return {"pass_config": {"tirx.use_async_copy": config["async_copy"] == "on"},
            "target": {"max_shared_memory_per_block": mm.SMEM_LIMIT}}


# --------------------------------------------------------------------------------- schedule


def schedule(spec, func, config, prepare):
    """Apply a feasible configuration; ``prepare(sch, m, n, k)`` (from ``_matmul.py``)
    views the output as the matmul, pads the einsum, blockizes one Tensor Core tile and returns
    (block, batch loop, (i, j, k) over tiles, tile block, whether M or N was padded)."""
    from tvm import s_tir

    c = config
    path = c["instr"]
    use_mma = path == "mma"
    m, n, kk = INSTRUCTIONS[path]
    trans_b, acc = spec.trans_b, spec.acc_dtype
    sch = s_tir.Schedule(func)
    blk, b, (i, j, k), tile, padded_mn = prepare(sch, m, n, kk)

    i0, i1, i2 = sch.split(i, list(c["tile_i"]))
    j0, j1, j2 = sch.split(j, list(c["tile_j"]))
    k0, k1 = sch.split(k, list(c["tile_k"]))
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    raster = c["raster"]
    if raster > 1:  # blockIdx order (row group, column, row in group)
        io, ii0 = sch.split(i0, [None, raster])
        sch.reorder(io, j0, ii0)
        grid = [io, j0, ii0]
    else:
        grid = [i0, j0]
    if b is not None and c.get("batch_bind") == "y":
        sch.bind(b, "blockIdx.y")
    elif b is not None:
        grid = [b] + grid
    bx = sch.fuse(*grid)
    sch.bind(bx, "blockIdx.x")
    ty = sch.fuse(i1, j1)
    sch.bind(ty, "threadIdx.y")
    warps = c["tile_i"][1] * c["tile_j"][1]
    xor = c["smem_layout"] == "xor"
    pad = LAYOUT_PAD[c["smem_layout"]]

    stages = []
    for idx in (0, 1):
        stage, row_width = fetch(sch, tile, idx, SCOPE, k0, warps, c["vec"])
        if xor:
            sch.annotate(stage, "permuted_layout", 1)
        elif pad:
            sch.storage_align(stage, 0, axis=-2, factor=row_width, offset=pad)
        stages.append(stage)
    for stage in stages:
        inline_producers(sch, stage)

    frag_scope_a, frag_scope_b, acc_scope = (("warp",) * 3 if use_mma else
                                             ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"))
    frag_a = sch.cache_read(tile, 0, frag_scope_a)
    frag_b = sch.cache_read(tile, 1, frag_scope_b)
    sch.compute_at(frag_a, k1)
    sch.compute_at(frag_b, k1)

    staged = c["writeback"] == "shared"
    # WMMA stores address the staging tile through a typed pointer, which TVM 0.27 cannot take
    # into the merged (fp16) dynamic allocation: that tile is static shared memory instead
    stage_scope = SCOPE if use_mma else "shared"
    acc_frag, stage_out = mm.write_back(sch, spec, tile, staged=staged, padded_mn=padded_mn,
                                        acc_scope=acc_scope, stage_scope=stage_scope,
                                        warp_loop=ty, stage_at=bx)
    init = sch.get_child_blocks(sch.decompose_reduction(tile, k0))[0]

    b_tile = (n, kk) if trans_b else (kk, n)
    store_scope = stage_scope if staged else "global"
    if use_mma:
        la, lb = tile2(sch, frag_a, m, kk), tile2(sch, frag_b, *b_tile)
        tile2(sch, acc_frag, m, n)
        # the fragment buffers of a batched matmul keep the batch axis in front
        layout = ldmatrix_layout if b is None else (lambda bb, i, j: (bb, *ldmatrix_layout(i, j)))
        for blk_, rw in ((frag_a, "write"), (frag_b, "write"), (acc_frag, "read")):
            sch.transform_layout(blk_, (rw, 0), layout)
        load_a, load_b = sch.blockize(la), sch.blockize(lb)
        if xor:  # ldmatrix reads must follow the copy's XOR swizzle
            sch.annotate(load_a, "permuted_layout", 1)
            sch.annotate(load_b, "permuted_layout", 1)
        sch.tensorize(load_a, mma_intrin("load_a", spec.in_dtype, scope=SCOPE))
        sch.tensorize(load_b, mma_intrin("load_b", spec.in_dtype, scope=SCOPE,
                                         b_transposed=trans_b))
        sch.tensorize(sch.get_loops(init)[-2], mma_intrin("fill", acc))
        sch.tensorize(sch.get_loops(acc_frag)[-2], mma_intrin("store", acc, scope=store_scope))
        sch.tensorize(sch.get_loops(blk)[-3], mma_intrin("sync", acc, b_transposed=trans_b))
    else:
        shape = (m, n, kk)
        sch.tensorize(tile2(sch, frag_a, m, kk),
                      wmma_intrin("load_a", shape, spec.in_dtype, scope=SCOPE))
        sch.tensorize(tile2(sch, frag_b, *b_tile), wmma_intrin(
            "load_b", shape, spec.in_dtype, scope=SCOPE, b_transposed=trans_b))
        tile2(sch, acc_frag, m, n)
        sch.tensorize(sch.get_loops(init)[-2], wmma_intrin("fill", shape, acc))
        sch.tensorize(sch.get_loops(acc_frag)[-2], wmma_intrin("store", shape, acc,
                                                              scope=store_scope))
        sch.tensorize(sch.get_loops(blk)[-3], wmma_intrin("sync", shape, acc,
                                                          b_transposed=trans_b))

    if staged:
        spread(sch, copy_loop(sch, stage_out, bx), warps, c["out_vec"])

    _pipeline(sch, k0, k1, c)
    if c["unroll"]:
        sch.annotate(bx, "pragma_auto_unroll_max_step", c["unroll"])
        sch.annotate(bx, "pragma_unroll_explicit", 1)
    return sch


def _pipeline(sch, k0, k1, c) -> None:
    """Software-pipeline annotations. k0's body is the two copies and the k1 loop; a pipelined
    k1 (fragments of step s+1 loaded during step s) turns into prologue, body and epilogue, so
    k0 then has five statements."""
    S = c["stages"]
    frag = c["frag_pipeline"]
    if frag != "off":
        sch.annotate(k1, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(k1, "software_pipeline_order", [0, 1, 2])
    if S == 1:
        return
    if frag == "off":
        stage, order = [0, 0, S - 1], [0, 1, 2]
    elif frag == "full":
        stage, order = [0, 0, S - 1, S - 1, S - 1], [0, 1, 2, 3, 4]
    else:  # MetaSchedule's: the next tile's first fragments one stage early
        stage, order = [0, 0, S - 2, S - 1, S - 1], [0, 1, 3, 2, 4]
    sch.annotate(k0, "software_pipeline_stage", stage)
    sch.annotate(k0, "software_pipeline_order", order)
    if c["async_copy"] == "on":
        sch.annotate(k0, "software_pipeline_async_stages", [0])
