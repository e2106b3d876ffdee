"""GEMM on Tensor Cores (WMMA): C[M, N] = A[M, K] @ B, with B stored [N, K] ("NT", C = A B^T) or
[K, N] ("NN"); fp16 inputs, fp32 or fp16 accumulation and output.

Heron's GEMM knob set (seed 003) brought to TensorIR:

====================  =========================================================================
knob                  what it sets in the schedule
====================  =========================================================================
wmma                  WMMA intrinsic shape m x n x k (16x16x16, 32x8x16, 8x32x16)
tile_i, tile_j        WMMA tiles along i / j split in three levels: thread blocks (blockIdx.x),
                      warps (threadIdx.y) and fragments per warp; the fourth level is the
                      intrinsic itself. Heron: dense{i,j}.*tileSpatial and ...accumulator*tileAll
tile_k                k/16 split in three levels: outer loop (ko), middle (km), inner (ki)
smem_at               loop (ko or km) under which A and B tiles are fetched to shared memory
                      (Heron: dense.wmma.accumulator_shared_pos)
frag_at               loop (ko, km or ki) under which WMMA fragments are loaded from shared
                      memory (Heron: dense.wmma.accumulator_local_pos)
a_pad, b_pad          storage_align offsets (elements) of the shared A / B tiles (Heron: *.shared_offset)
vec                   vector width of the cooperative global->shared fetch (Heron: *.shared_vectorize)
pipeline              software-pipelining depth of the fetch loop; >1 uses cp.async
unroll                auto_unroll_max_step on the block loop (Heron: dense_unroll_pragma)
writeback             accumulators to global directly (store_matrix_sync) or staged in shared memory
c_at                  (staged) the staging copy runs per thread block or per warp (Heron: dense_shared_pos)
c_pad                 (staged) storage_align offset of the staging tile (Heron: ...accumulator.shared_offset)
out_vec               (staged) vector width of the shared->global copy (Heron: output_vectorize)
====================  =========================================================================

Extents that are not multiples of the WMMA shape are padded with ``pad_einsum`` (zeros read past
the edge, stores past the edge predicated off), which needs the staged write-back when M or N is
padded. The A/B tiles live in static shared memory and the staging tile in dynamic shared memory,
so shared-memory use is exactly their sum (TVM's allocator would otherwise reuse space in ways a
constraint cannot predict, and its storage rewrite fails when it merges the fp32 staging tile into
an fp16 one). Threads per block are 32 x warps, so they are a multiple of 32 by construction; fragment
tiles are whole WMMA tiles by construction (the splits count WMMA tiles).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bocast.operator import Operator, TensorSpec, WorkloadError, register
from bocast.space import Categorical, Constraint, Ordinal, PowerOfTwo, Space, Split
from bocast.tensorcore import WMMA_SHAPES, wmma_intrin

STATIC_SMEM_LIMIT = 48 * 1024  # static shared memory per block (ptxas)
SMEM_LIMIT = 227 * 1024  # static + dynamic shared memory per block on Hopper (with opt-in)
ACC_REGISTER_LIMIT = 128  # accumulator registers per thread (see the constraint's doc)
DTYPE_PAIRS = {"fp16:fp32": ("float16", "float32"), "fp16:fp16": ("float16", "float16")}
LAYOUTS = ("NT", "NN")
UNROLL_STEPS = (0, 16, 64, 512, 1500)
STAGE_SCOPE = "shared.dyn"


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@register
class Gemm(Operator):
    name = "gemm"
    shape_help = "M,N,K (C[M,N] = A[M,K] @ B; B is [N,K] with --layout NT, [K,N] with NN)"
    default_shape = (1024, 1024, 1024)

    def __init__(self, M: int, N: int, K: int, *, dtype: str = "fp16:fp32", layout: str = "NT"):
        for name, v in (("M", M), ("N", N), ("K", K)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise WorkloadError(f"gemm: {name} must be a positive integer, got {v!r}")
        if dtype not in DTYPE_PAIRS:
            raise WorkloadError(f"gemm: dtype {dtype!r} not supported; use one of {list(DTYPE_PAIRS)}")
        if layout not in LAYOUTS:
            raise WorkloadError(f"gemm: layout {layout!r} not supported; use one of {list(LAYOUTS)}")
        self.M, self.N, self.K = int(M), int(N), int(K)
        self.in_dtype, self.out_dtype = DTYPE_PAIRS[dtype]
        self.layout = layout
        self.workload = {"op": self.name, "shape": [self.M, self.N, self.K], "dtype": dtype,
                         "layout": layout}
        self.space = self._space()

    @classmethod
    def from_args(cls, shape=None, **options: Any) -> "Gemm":
        shape = tuple(shape) if shape is not None else cls.default_shape
        if len(shape) != 3:
            raise WorkloadError(f"gemm: shape needs 3 extents M,N,K, got {len(shape)}: {shape}")
        unknown = set(options) - {"dtype", "layout"}
        if unknown:
            raise WorkloadError(f"gemm: unknown option(s) {sorted(unknown)}")
        return cls(*shape, **options)

    # ------------------------------------------------------------------------------ space
    def _space(self) -> Space:
        M, N, K = self.M, self.N, self.K
        acc_bytes = 4 if self.out_dtype == "float32" else 2
        out_vecs = (1, 2, 4) if acc_bytes == 4 else (1, 2, 4, 8)
        staged = {"writeback": ("shared",)}
        knobs = [
            Categorical("wmma", tuple(WMMA_SHAPES), doc="WMMA shape m x n x k"),
            Split("tile_i", 3, extent=lambda c: _round_up(M, WMMA_SHAPES[c["wmma"]][0])
                  // WMMA_SHAPES[c["wmma"]][0], extent_from=("wmma",),
                  doc="WMMA tiles along M: blocks, warps, fragments per warp"),
            Split("tile_j", 3, extent=lambda c: _round_up(N, WMMA_SHAPES[c["wmma"]][1])
                  // WMMA_SHAPES[c["wmma"]][1], extent_from=("wmma",),
                  doc="WMMA tiles along N: blocks, warps, fragments per warp"),
            Split("tile_k", 3, extent=_round_up(K, 16) // 16, doc="k/16: outer, middle, inner"),
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
        trans_b = self.layout == "NT"
        wm_of = {s: v[0] for s, v in WMMA_SHAPES.items()}
        wn_of = {s: v[1] for s, v in WMMA_SHAPES.items()}

        def derive(c):
            wm = np.vectorize(wm_of.get, otypes=[np.int64])(c["wmma"])
            wn = np.vectorize(wn_of.get, otypes=[np.int64])(c["wmma"])
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

        vec_b_extent = K if trans_b else N
        constraints = [
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
            Constraint("vec_divides_k", f"fetch vectors stay inside rows of A (K={K}) and "
                       f"B ({'K' if trans_b else 'N'}={vec_b_extent}) at the padded edge",
                       lambda c: (K % c["vec"] == 0) & (vec_b_extent % c["vec"] == 0)),
            Constraint("out_vec_divides_n", f"store vectors stay inside rows of C (N={N})",
                       lambda c: ~c["staged"] | (N % c["out_vec"] == 0)),
            Constraint("direct_writeback_unpadded",
                       "store_matrix_sync straight to C needs M and N to be multiples of the "
                       "WMMA shape (padded outputs go through the staging tile)",
                       lambda c: c["staged"] | ((M % c["wm"] == 0) & (N % c["wn"] == 0))),
            Constraint("pipeline_le_fetch_loop", "pipeline depth <= trip count of the fetch loop",
                       lambda c: c["pipeline"] <= c["pipe_extent"]),
        ]
        return Space(knobs, constraints, derive)

    # --------------------------------------------------------------------------- workload
    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def tensors(self) -> list[TensorSpec]:
        b_shape = (self.N, self.K) if self.layout == "NT" else (self.K, self.N)
        return [TensorSpec("A", (self.M, self.K), self.in_dtype, "input"),
                TensorSpec("B", b_shape, self.in_dtype, "input"),
                TensorSpec("C", (self.M, self.N), self.out_dtype, "output")]

    def reference(self, a, b):
        b = b.float().t() if self.layout == "NT" else b.float()
        return a.float() @ b

    reference_name = "torch.matmul (cuBLAS)"

    def reference_fast(self, a, b):
        """cuBLAS as users call it on fp16 operands: output in the workload's dtype where torch
        offers it (``torch.mm(..., out_dtype=float32)``), else fp16 output."""
        import torch

        b = b.t() if self.layout == "NT" else b
        if self.out_dtype == "float32":
            try:
                out = torch.mm(a, b, out_dtype=torch.float32)
                self.reference_name = "torch.mm(out_dtype=float32) (cuBLAS, fp32 out)"
                return out
            except TypeError:
                self.reference_name = "torch.matmul (cuBLAS, fp16 out; torch has no out_dtype)"
        return torch.matmul(a, b)

    def prim_func(self):
        from tvm import te

        acc = self.out_dtype
        A = te.placeholder((self.M, self.K), self.in_dtype, name="A")
        B = te.placeholder(self.tensors()[1].shape, self.in_dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        nt = self.layout == "NT"
        C = te.compute((self.M, self.N), lambda i, j: te.sum(
            A[i, k].astype(acc) * (B[j, k] if nt else B[k, j]).astype(acc), axis=k), name="C")
        return te.create_prim_func([A, B, C])

    # ---------------------------------------------------------------------------- schedule
    def apply(self, config):
        from tvm import s_tir

        c = config
        wm, wn, wk = WMMA_SHAPES[c["wmma"]]
        trans_b = self.layout == "NT"
        acc = self.out_dtype
        sch = s_tir.Schedule(self.prim_func())
        blk = sch.get_sblock("C")
        pad_mn = self.M % wm or self.N % wn
        if pad_mn or self.K % wk:
            sch.pad_einsum(blk, [wm, wn, wk])

        i, j, k = sch.get_loops(blk)
        i, ii = sch.split(i, [None, wm])
        j, ji = sch.split(j, [None, wn])
        k, ki = sch.split(k, [None, wk])
        sch.reorder(i, j, k, ii, ji, ki)
        mma = sch.blockize(ii)  # one WMMA tile per block instance
        i0, i1, i2 = sch.split(i, list(c["tile_i"]))
        j0, j1, j2 = sch.split(j, list(c["tile_j"]))
        k0, k1, k2 = sch.split(k, list(c["tile_k"]))
        sch.reorder(i0, j0, i1, j1, k0, k1, k2, i2, j2)
        bx = sch.fuse(i0, j0)
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

        fetch(0, c["a_pad"])
        fetch(1, c["b_pad"])
        for padded in ("A_pad", "B_pad"):
            if _has_block(sch, padded):
                sch.compute_inline(sch.get_sblock(padded))

        frag_a = sch.cache_read(mma, 0, "wmma.matrix_a")
        frag_b = sch.cache_read(mma, 1, "wmma.matrix_b")
        if c["frag_at"] != c["smem_at"]:  # cache_read already placed them at the fetch's loop
            sch.compute_at(frag_a, k_loops[c["frag_at"]])
            sch.compute_at(frag_b, k_loops[c["frag_at"]])

        staged = c["writeback"] == "shared"
        if staged:
            if pad_mn:  # pad_einsum's C_pad becomes the staging tile; its consumer slices to C
                sch.set_scope(mma, 0, STAGE_SCOPE)
                stage_out = sch.get_sblock("C_pad")
            else:
                stage_out = sch.cache_write(mma, 0, STAGE_SCOPE)
        acc_frag = sch.cache_write(mma, 0, "wmma.accumulator")
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

        sch.tensorize(tile2(frag_a, wm, wk), wmma_intrin("load_a", (wm, wn, wk), self.in_dtype))
        b_tile = (wn, wk) if trans_b else (wk, wn)
        sch.tensorize(tile2(frag_b, *b_tile),
                      wmma_intrin("load_b", (wm, wn, wk), self.in_dtype, b_transposed=trans_b))
        tile2(acc_frag, wm, wn)
        sch.tensorize(sch.get_loops(init)[-2], wmma_intrin("fill", (wm, wn, wk), acc))
        store_name = sch.get(acc_frag).name_hint
        sch.tensorize(sch.get_loops(acc_frag)[-2], wmma_intrin(
            "store", (wm, wn, wk), acc, scope=STAGE_SCOPE if staged else "global"))
        sch.tensorize(sch.get_loops(blk)[-3],
                      wmma_intrin("sync", (wm, wn, wk), acc, b_transposed=trans_b))

        if staged:
            if c["c_pad"]:  # on the tensorized store, which now writes the staging tile
                bn = c["tile_j"][1] * c["tile_j"][2] * wn
                sch.storage_align(store_name + "_o", 0, axis=-2, factor=bn, offset=c["c_pad"])
            fused = sch.fuse(*sch.get_loops(stage_out)[-2:])
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


def _has_block(sch, name: str) -> bool:
    try:
        sch.get_sblock(name)
        return True
    except Exception:  # noqa: BLE001 - TVM raises its own error type for a missing block
        return False
