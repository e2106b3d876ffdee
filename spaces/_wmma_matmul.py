"""The WMMA matmul schedule every Tensor Core space maps onto, with its knobs and constraints.

Every operator here is, like in Heron, one matmul on Tensor Cores:

    C[(b,) i, j] = sum_k A[(b,) i, k] * B[(b,) j, k]      (trans_b, "NT")
    C[(b,) i, j] = sum_k A[(b,) i, k] * B[(b,) k, j]      ("NN")

with fp16 operands and an fp32 or fp16 accumulator. An operator describes its matmul with a
:class:`MatmulSpec` and writes ``prim_func()`` so that one block (``spec.block``) is that einsum.
Its operands may be produced by other blocks (padding, an im2col gather, a reshape of the weights):
the schedule inlines every such producer into the shared-memory fetch, so the gather costs index
arithmetic in the cooperative copy and no extra kernel. Its result may be copied by one more block
(``spec.epilogue``) into the operator's output layout when that layout is a row-major reshape of
the matmul's ``[M, N]`` (NHWC convolution outputs are ``[N*OH*OW, K]``): the schedule views the
output buffer through that reshape (``transform_layout``, which leaves its memory unchanged) and
inlines the copy into the write-back, so the kernel writes the operator's output directly.

The knobs and constraints (Heron's GEMM set, seed 003) are documented in ``spaces/gemm.py``; the
GEMM space is this module with M, N, K taken from its shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from bocast.operator import WorkloadError
from bocast.space import Categorical, Constraint, Knob, Ordinal, PowerOfTwo, Space, Split
from bocast.tensorcore import WMMA_SHAPES, wmma_intrin

STATIC_SMEM_LIMIT = 48 * 1024  # static shared memory per block (ptxas)
SMEM_LIMIT = 227 * 1024  # static + dynamic shared memory per block on Hopper (with opt-in)
ACC_REGISTER_LIMIT = 128  # accumulator registers per thread (see the constraint's doc)
GRID_Y_LIMIT = 65535
DTYPE_PAIRS = {"fp16:fp32": ("float16", "float32"), "fp16:fp16": ("float16", "float16")}
UNROLL_STEPS = (0, 16, 64, 512, 1500)
STAGE_SCOPE = "shared.dyn"


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def dtype_pair(op: str, dtype: str) -> tuple[str, str]:
    if dtype not in DTYPE_PAIRS:
        raise WorkloadError(f"{op}: dtype {dtype!r} not supported; use one of {list(DTYPE_PAIRS)}")
    return DTYPE_PAIRS[dtype]


def check_extents(op: str, names: Sequence[str], values: Sequence[Any], *, minimum: int = 1) -> None:
    """Every value an integer >= ``minimum``; else one WorkloadError naming the first bad one."""
    for name, v in zip(names, values):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise WorkloadError(f"{op}: {name} must be {what}, got {v!r}")


def check_options(op: str, options: dict, allowed: Sequence[str]) -> None:
    unknown = set(options) - set(allowed)
    if unknown:
        raise WorkloadError(f"{op}: unknown option(s) {sorted(unknown)}"
                            + (f"; known: {', '.join(allowed)}" if allowed else ""))


@dataclass(frozen=True)
class MatmulSpec:
    """The matmul an operator runs on Tensor Cores, and where ``prim_func()`` keeps it."""

    M: int
    N: int
    K: int
    in_dtype: str = "float16"
    acc_dtype: str = "float32"
    trans_b: bool = True  # B is [N, K] ("NT"); else [K, N] ("NN")
    batch: int = 0  # extent of a leading batch axis of A, B and C (0: none)
    block: str = "C"  # name of the matmul block
    epilogue: str | None = None  # block copying the matmul result into the output layout
    # the epilogue's iterators -> (i, j) of the matmul (a row-major flattening of the output)
    epilogue_map: Callable | None = None

    @property
    def acc_bytes(self) -> int:
        return 4 if self.acc_dtype == "float32" else 2


def vendor_matmul(op, fn, a, b, what: str):
    """cuBLAS as users call it on fp16 operands (``fn`` is torch.mm or torch.bmm): fp32 output
    where the workload has it and torch offers ``out_dtype``, else fp16 output. Sets
    ``op.reference_name`` to what ran."""
    import torch

    if op.out_dtype == "float32":
        try:
            out = fn(a, b, out_dtype=torch.float32)
            op.reference_name = f"{what}(out_dtype=float32) (cuBLAS, fp32 out)"
            return out
        except (TypeError, NotImplementedError):  # older torch; or a CPU tensor (tests)
            op.reference_name = f"{what} (cuBLAS, fp16 out; no out_dtype here)"
    return fn(a, b)


# ------------------------------------------------------------------------------------ space


def _wmma_dim(axis: int):
    names = list(WMMA_SHAPES)
    dims = np.array([WMMA_SHAPES[s][axis] for s in names], dtype=np.int64)
    return lambda col: np.select([col == s for s in names], dims, 0)


def knobs(spec: MatmulSpec) -> list[Knob]:
    """Heron's GEMM knobs; ``spaces/gemm.py`` documents what each one sets."""
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


def batch_knob() -> Knob:
    return Categorical("batch_bind", ("y", "x"),
                       doc="batch axis on blockIdx.y, or fused outermost with the block tiles "
                           "into blockIdx.x")


def batch_constraint(batch: int) -> Constraint:
    return Constraint("batch_grid_y_le_65535",
                      f"batch on blockIdx.y needs batch ({batch}) <= 65535, the grid's y limit",
                      lambda c: (c["batch_bind"] != "y") | (batch <= GRID_Y_LIMIT))


def derive(spec: MatmulSpec):
    """Tile sizes, threads, shared memory and registers of a batch of configurations."""
    acc_bytes, trans_b = spec.acc_bytes, spec.trans_b
    wm_of, wn_of = _wmma_dim(0), _wmma_dim(1)

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


def vec_constraint(name: str, doc: str, extents: Sequence[int]) -> Constraint:
    """The fetch's vector width must divide every extent in ``extents``: the lengths of the
    contiguous, vector-aligned runs the operands are read in (rows of A and B for a GEMM, runs of
    input channels for an implicit-GEMM convolution). A vector across a run's end would be a
    misaligned or out-of-bounds vector access."""
    ext = tuple(int(e) for e in extents)
    return Constraint(name, doc, lambda c: np.logical_and.reduce([e % c["vec"] == 0 for e in ext]))


def constraints(spec: MatmulSpec, vec: Constraint) -> list[Constraint]:
    M, N = spec.M, spec.N
    return [
        Constraint("threads_le_1024", "32 x warps per block <= 1024",
                   lambda c: c["threads"] <= 1024),
        Constraint("static_shared_memory_le_48KB",
                   "A and B tiles (x pipeline depth) fit the 48 KB of static shared memory",
                   lambda c: c["static_smem_bytes"] <= STATIC_SMEM_LIMIT),
        Constraint("shared_memory_le_227KB",
                   "static tiles plus the dynamic staging tile fit Hopper's 227 KB per block",
                   lambda c: c["smem_bytes"] <= SMEM_LIMIT),
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
        Constraint("out_vec_divides_n", f"store vectors stay inside rows of C (N={N})",
                   lambda c: ~c["staged"] | (N % c["out_vec"] == 0)),
        Constraint("direct_writeback_unpadded",
                   "store_matrix_sync straight to C needs M and N to be multiples of the "
                   "WMMA shape (padded outputs go through the staging tile)",
                   lambda c: c["staged"] | ((M % c["wm"] == 0) & (N % c["wn"] == 0))),
        Constraint("pipeline_le_fetch_loop", "pipeline depth <= trip count of the fetch loop",
                   lambda c: c["pipeline"] <= c["pipe_extent"]),
    ]


def space(spec: MatmulSpec, vec: Constraint) -> Space:
    """The GEMM knobs and constraints, plus the batch binding when the matmul has a batch axis."""
    ks, cs = knobs(spec), constraints(spec, vec)
    if spec.batch:
        ks.append(batch_knob())
        cs.append(batch_constraint(spec.batch))
    return Space(ks, cs, derive(spec))


# --------------------------------------------------------------------------------- schedule


def schedule(spec: MatmulSpec, func, config):
    """Apply a feasible configuration to ``func`` (the operator's prim_func); returns the
    ``tvm.s_tir.Schedule``."""
    from tvm import s_tir

    c = config
    wm, wn, wk = WMMA_SHAPES[c["wmma"]]
    trans_b, acc = spec.trans_b, spec.acc_dtype
    sch = s_tir.Schedule(func)
    if spec.epilogue is not None:
        # The output is a row-major reshape of C: view it as C's [M, N] so that the epilogue
        # becomes a plain copy, which the write-back absorbs below.
        from tvm.tirx import IndexMap

        iters = sch.get(sch.get_sblock(spec.epilogue)).iter_vars
        view = IndexMap.from_func(spec.epilogue_map, ndim=len(iters),
                                  index_dtype=str(iters[0].var.ty))
        sch.transform_layout(spec.epilogue, ("write", 0), view)
        sch.transform_block_layout(spec.epilogue, view)
    blk = sch.get_sblock(spec.block)
    pad_mn = spec.M % wm or spec.N % wn
    if pad_mn or spec.K % wk:
        sch.pad_einsum(blk, ([1] if spec.batch else []) + [wm, wn, wk])

    loops = sch.get_loops(blk)
    b, (i, j, k) = (loops[0] if spec.batch else None), loops[-3:]
    i, ii = sch.split(i, [None, wm])
    j, ji = sch.split(j, [None, wn])
    k, ki = sch.split(k, [None, wk])
    sch.reorder(i, j, k, ii, ji, ki)
    mma = sch.blockize(ii)  # one WMMA tile per block instance
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

    def fetch(idx: int, pad: int):
        stage = sch.cache_read(mma, idx, "shared")
        sch.compute_at(stage, k_loops[c["smem_at"]])
        rows, cols = sch.get_loops(stage)[-2:]
        row_width = int(sch.get(cols).extent)
        fused = sch.fuse(rows, cols)
        _, f_ty, f_tx, f_vec = sch.split(fused, [None, warps, 32, c["vec"]])
        sch.bind(f_ty, "threadIdx.y")
        sch.bind(f_tx, "threadIdx.x")
        sch.vectorize(f_vec)
        if pad:
            sch.storage_align(stage, 0, axis=-2, factor=row_width, offset=pad)
        return stage

    stages = [fetch(0, c["a_pad"]), fetch(1, c["b_pad"])]
    for stage in stages:
        # pad_einsum's zero padding, and whatever produces the operand (a gather, a reshape),
        # becomes index arithmetic of the cooperative copy
        producers = list(sch.get_producers(stage))
        while producers:
            p = producers.pop()
            upstream = list(sch.get_producers(p))
            sch.compute_inline(p)
            producers.extend(upstream)

    frag_a = sch.cache_read(mma, 0, "wmma.matrix_a")
    frag_b = sch.cache_read(mma, 1, "wmma.matrix_b")
    if c["frag_at"] != c["smem_at"]:  # cache_read already placed them at the fetch's loop
        sch.compute_at(frag_a, k_loops[c["frag_at"]])
        sch.compute_at(frag_b, k_loops[c["frag_at"]])

    staged = c["writeback"] == "shared"
    if staged:
        if pad_mn:  # pad_einsum's C_pad becomes the staging tile; its consumer slices to C
            sch.set_scope(mma, 0, STAGE_SCOPE)
            stage_out = sch.get_sblock(f"{spec.block}_pad")
        else:
            stage_out = sch.cache_write(mma, 0, STAGE_SCOPE)
    acc_frag = sch.cache_write(mma, 0, "wmma.accumulator")
    if spec.epilogue is not None:  # into the block that now writes C to global memory
        sch.reverse_compute_inline(spec.epilogue)
    sch.reverse_compute_at(acc_frag, ty)
    if staged:
        sch.reverse_compute_at(stage_out, bx if c["c_at"] == "block" else ty)

    init = sch.get_child_blocks(sch.decompose_reduction(mma, k0))[0]

    def tile2(block, r: int, s: int):
        x, y = sch.get_loops(block)[-2:]
        x0, x1 = sch.split(x, [None, r])
        y0, y1 = sch.split(y, [None, s])
        sch.reorder(x0, y0, x1, y1)
        return x1

    shape = (wm, wn, wk)
    sch.tensorize(tile2(frag_a, wm, wk), wmma_intrin("load_a", shape, spec.in_dtype))
    b_tile = (wn, wk) if trans_b else (wk, wn)
    sch.tensorize(tile2(frag_b, *b_tile),
                  wmma_intrin("load_b", shape, spec.in_dtype, b_transposed=trans_b))
    tile2(acc_frag, wm, wn)
    sch.tensorize(sch.get_loops(init)[-2], wmma_intrin("fill", shape, acc))
    store_name = sch.get(acc_frag).name_hint
    sch.tensorize(sch.get_loops(acc_frag)[-2], wmma_intrin(
        "store", shape, acc, scope=STAGE_SCOPE if staged else "global"))
    sch.tensorize(sch.get_loops(blk)[-3], wmma_intrin("sync", shape, acc, b_transposed=trans_b))

    if staged:
        if c["c_pad"]:  # on the tensorized store, which now writes the staging tile
            bn = c["tile_j"][1] * c["tile_j"][2] * wn
            sch.storage_align(store_name + "_o", 0, axis=-2, factor=bn, offset=c["c_pad"])
        # the copy's own loops, under the block or warp loop: two, or one where the tile has a
        # single real row (M = 1, the padding rows are never copied) or column
        at = sch.get_sref(bx if c["c_at"] == "block" else ty)
        loops = sch.get_loops(stage_out)
        depth = next(n for n, lp in enumerate(loops) if sch.get_sref(lp).same_as(at))
        copy_loops = loops[depth + 1:]
        fused = sch.fuse(*copy_loops) if len(copy_loops) > 1 else copy_loops[0]
        if c["c_at"] == "block":
            _, f_ty, f_tx, f_vec = sch.split(fused, [None, warps, 32, c["out_vec"]])
            sch.bind(f_ty, "threadIdx.y")
        else:
            _, f_tx, f_vec = sch.split(fused, [None, 32, c["out_vec"]])
        sch.bind(f_tx, "threadIdx.x")
        sch.vectorize(f_vec)

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
