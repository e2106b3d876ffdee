"""GEMM on Tensor Cores: C[M, N] = A[M, K] @ B, with B stored [N, K] ("NT", C = A B^T) or
[K, N] ("NN"); fp16 inputs, fp32 or fp16 accumulation and output (space v3: also bf16 inputs,
fp32 accumulation, fp32 or 16-bit output; ``_matmul.SPACE_DTYPES``).

fp8 (``e4m3:bf16``, ``e4m3:fp32``; ``e5m2xe4m3:bf16``/``:fp32``, A in e5m2, B in e4m3, the
backward pass's gradient x weights; space v3): C = scale_a scale_b (A B^T), A [M, K] and B
[N, K] in fp8, two fp32 scalars scale_a and scale_b (per-tensor scales, inputs of the
workload like A and B), fp32 accumulation, the output rounded once. Layout NT only: fp8 wgmma
reads both operands K-major, and B stored [N, K] row-major is exactly the column-major [K, N]
second operand torch._scaled_mm (cuBLASLt's "TN" fp8 GEMM, the vendor baseline) takes, so the
two run on the same tensors. N and K multiples of 16 (_scaled_mm's rule; K's is TMA's too).
``e4m3b128:bf16``/``:fp32``: the same with DeepSeek-V3's block scales (scale_a [M, K/128],
scale_b [N/128, K/128]; ``_block_fp8``), a dtype of its own.

Fused epilogue (``fuse``, space v3, ``_fuse.py``): C = act(scale (A B^T) + bias), the bias a
length-N vector in the output's type, the activation relu, gelu (erf) or silu, applied to the
fp32 accumulators before the output's rounding; the baseline is the unfused torch sequence.

Three schedule spaces (``--space``, the workload's ``space``; ``auto``, the default of ``bocast
tune gemm --shape``, picks v3 where M and N >= 64 and where 16 <= M < 64 with N >= 64, see
:meth:`Gemm.prefers_v3`). v1 and v2 are
shared with every operator that runs as a Tensor Core matmul (bmm, the convolutions, gemv;
``_matmul.py``); v3 is the Hopper template of ``_hopper_matmul.py``:

- ``v2`` (the default of a workload that names no space): the pipelined space of
  ``_pipelined_matmul.py`` (its docstring lists the knobs): ldmatrix + mma.sync or WMMA,
  cp.async stages, fragment double buffers, XOR-swizzled or padded dynamic shared memory,
  block rasterisation, CTA tiles up to 256 x 256.
- ``v1``: Heron's GEMM knob set (seed 003) brought to TensorIR, ``_wmma_matmul.py``; the
  space of every dataset and result recorded before v2. Its knobs:

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
a_pad, b_pad          storage_align offsets (elements) of the shared A / B tiles
                      (Heron: *.shared_offset)
vec                   vector width of the cooperative global->shared fetch
                      (Heron: *.shared_vectorize)
pipeline              software-pipelining depth of the fetch loop (synchronous copies: v1 never
                      set TVM's ``tirx.use_async_copy``)
unroll                auto_unroll_max_step on the block loop (Heron: dense_unroll_pragma)
writeback             accumulators to global directly (store_matrix_sync) or staged in shared memory
c_at                  (staged) the staging copy runs per thread block or per warp
                      (Heron: dense_shared_pos)
c_pad                 (staged) storage_align offset of the staging tile
                      (Heron: ...accumulator.shared_offset)
out_vec               (staged) vector width of the shared->global copy (Heron: output_vectorize)
====================  =========================================================================

In both spaces, extents that are not multiples of the Tensor Core tile are padded with
``pad_einsum`` (zeros read past the edge, stores past the edge predicated off), which needs the
staged write-back when M or N is padded. In v1 the A/B tiles live in static shared memory and the
staging tile in dynamic shared memory, so shared-memory use is exactly their sum (TVM's allocator
would otherwise reuse space in ways a constraint cannot predict, and its storage rewrite fails when
it merges the fp32 staging tile into an fp16 one). Threads per block are 32 x warps, so they are a
multiple of 32 by construction; fragment tiles are whole Tensor Core tiles by construction (the
splits count them).

This file only sets the GEMM's extents and its ``vec_divides_k`` rule.
"""

from __future__ import annotations

from bocast.space.operators.operator import TensorSpec, WorkloadError, register

from . import _block_fp8 as bf
from . import _fuse as fx
from . import _hopper_layout as hl
from . import _matmul as mm
from . import _matmul_operator as mo

LAYOUTS = ("NT", "NN")
#: the smallest M for which ``space: auto`` takes v3 (with its split K, the ``split_k`` knob, and
#: swap-AB, ``swap_ab``) below AUTO_V3_MIN_MN rows, N >= 64; None: v3 from AUTO_V3_MIN_MN rows
#: only. Measured (results/skinny_v2_v3_h200: both spaces in one session, the default command,
#: re-timed against cuBLAS): v2 ahead at 16 and 32 x 6144,4096 (1.070 and 1.034 against 1.010
#: and 1.020) but 0.908 and 0.968 at 16 and 32 x 4096,14336 (v3 1.050 and 1.050 there the session
#: before), level at 28672,4096 (v2 1.076 at M 16, v3 1.078 the session before; at M 32 v3 1.066);
#: v3's worst 1.010, v2's 0.908. M 1-15 were not measured beside v2: they keep it
AUTO_V3_SKINNY_MIN_M: int | None = 16


@register
class Gemm(mo.MatmulOperator):
    name = "gemm"
    shape_help = "M,N,K (C[M,N] = A[M,K] @ B; B is [N,K] with --layout NT, [K,N] with NN)"
    default_shape = (1024, 1024, 1024)
    extents = ("M", "N", "K")
    option_names = (*mo.MatmulOperator.option_names, "sm_count", "fuse")
    v3_rule = (mm.AUTO_V3_RULE if AUTO_V3_SKINNY_MIN_M is None else
               f"N >= {mm.AUTO_V3_MIN_MN} and M >= {AUTO_V3_SKINNY_MIN_M} "
               f"(AUTO_V3_SKINNY_MIN_M); measured, v3 beat v2 from M = 64 and, by its worst "
               f"cell, at M 16 and 32 (1.010 of cuBLAS against v2's 0.908)")

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(cls.extents) and (
            min(shape[0:2]) >= mm.AUTO_V3_MIN_MN
            or (AUTO_V3_SKINNY_MIN_M is not None and shape[0] >= AUTO_V3_SKINNY_MIN_M
                and shape[1] >= mm.AUTO_V3_MIN_MN))

    def __init__(self, M: int, N: int, K: int, *, dtype: str = "fp16:fp32", layout: str = "NT",
                 space: str = mm.DEFAULT_SPACE, sm_count: int | None = None,
                 fuse: str = fx.NONE):
        mm.check_extents(self.name, self.extents, (M, N, K))
        self.in_dtype, self.out_dtype = mm.dtype_pair(self.name, dtype, space, fp8=True)
        if layout not in LAYOUTS:
            raise WorkloadError(f"gemm: layout {layout!r} not supported; "
                                f"use one of {list(LAYOUTS)}")
        self.M, self.N, self.K = int(M), int(N), int(K)
        #: fp8 operands with per-tensor scales (torch._scaled_mm's contract); B's type
        self.scaled = dtype in mm.FP8_PAIRS
        #: of those, block scales (``_block_fp8``): scale_a and scale_b are matrices
        self.block_scaled = dtype in mm.BLOCK_FP8_PAIRS
        self.b_dtype = B_DTYPES.get(dtype, self.in_dtype)
        if self.scaled:
            check_fp8(dtype, layout, self.N, self.K)
        if self.block_scaled and fuse != fx.NONE:
            raise WorkloadError(f"gemm: dtype {dtype!r} (block scales) has no fused epilogue "
                                f"yet; got fuse {fuse!r}")
        self.layout = layout
        target = hl.sm_count_entry(self.name, space, sm_count)
        self.workload = {"op": self.name, "shape": [self.M, self.N, self.K], "dtype": dtype,
                         "layout": layout, "space": mm.space_version(self.name, space), **target}
        #: the fused epilogue (bias, activation; ``_fuse``), or None; a workload field only
        #: when there is one, so every workload recorded before it reads as it did
        self.fuse = fx.parse(self.name, fuse, space)
        if self.fuse is not None:
            self.workload["fuse"] = fuse
        trans_b = layout == "NT"
        self.matmul = mm.MatmulSpec(self.M, self.N, self.K, self.in_dtype,
                                    mm.acc_dtype(space, self.out_dtype), out_dtype=self.out_dtype,
                                    trans_b=trans_b, space=space,
                                    b_dtype=None if self.b_dtype == self.in_dtype else self.b_dtype,
                                    sm_count=target.get("sm_count", hl.DEFAULT_SM_COUNT),
                                    fuse=self.fuse,
                                    scale_block=bf.SCALE_BLOCK if self.block_scaled else 0)
        vec_b_extent = self.K if trans_b else self.N
        self.space = self.matmul_space(mm.vec_constraint(
            "vec_divides_k", f"fetch vectors stay inside rows of A (K={self.K}) and "
            f"B ({'K' if trans_b else 'N'}={vec_b_extent}) at the padded edge",
            (self.K, vec_b_extent)))

    # --------------------------------------------------------------------------- workload
    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def tensors(self) -> list[TensorSpec]:
        b_shape = (self.N, self.K) if self.layout == "NT" else (self.K, self.N)
        # fp8: the per-tensor scales, drawn in [1/64, 1/16) (away from 1: a kernel that left
        # either out fails the check)
        scales = [TensorSpec(s, shape, "float32", "input", SCALE_VALUES)
                  for s, shape in zip(("scale_a", "scale_b"), self.scale_shapes())] \
            if self.scaled else []
        # fused: operands drawn so that the products spread about 1, the activation's
        # non-linear range (fx.operand_values); the bias in the output's type
        values = fx.operand_values(self.K, self.scaled) if self.fuse else (-1.0, 1.0)
        bias = [TensorSpec("bias", (self.N,), self.out_dtype, "input")] \
            if self.fuse is not None and self.fuse.bias else []
        return [TensorSpec("A", (self.M, self.K), self.in_dtype, "input", values),
                TensorSpec("B", b_shape, self.b_dtype, "input", values), *scales, *bias,
                TensorSpec("C", (self.M, self.N), self.out_dtype, "output")]

    def scale_shapes(self):
        """The shapes of scale_a and scale_b: one element each, or block scales' matrices."""
        return bf.scale_shapes(self.M, self.N, self.K) if self.block_scaled else ((1,), (1,))

    def _split(self, rest):
        """The inputs after A and B: (scale_a, scale_b, bias), None where the workload has
        none."""
        scales, rest = (rest[:2], rest[2:]) if self.scaled else ((None, None), rest)
        return (*scales, rest[0] if rest else None)

    def reference(self, a, b, *rest):
        """The exact product of the inputs in float64 (every dtype's check); fp8's dequantized
        (scale_a A, scale_b B: each fp8 value is exact in float64); then the fused epilogue's
        bias and activation, in float64 too."""
        scale_a, scale_b, bias = self._split(rest)
        if self.block_scaled:  # every 1 x 128 block of A and 128 x 128 block of B scaled
            return bf.reference64(a, b, scale_a, scale_b)
        b = b.double().t() if self.layout == "NT" else b.double()
        c = a.double() @ b
        c = c if scale_a is None else c * (scale_a.double() * scale_b.double())
        return c if self.fuse is None else fx.reference64(self.fuse, c, bias)

    reference_name = "torch.matmul (cuBLAS)"

    def reference_fast(self, a, b, *rest):
        """The vendor's GEMM on the same inputs, then (fused) the unfused torch sequence of
        the epilogue: what a user writes without bocast."""
        import torch

        scale_a, scale_b, bias = self._split(rest)
        b = b.t() if self.layout == "NT" else b
        if self.block_scaled:
            c = bf.vendor_block_mm(self, a, b, scale_a, scale_b)
        elif self.scaled:
            c = vendor_scaled_mm(self, a, b, scale_a, scale_b)
        else:
            c = mm.vendor_matmul(self, torch.mm, a, b, "torch.mm")
        if self.fuse is None:
            return c
        self.reference_name += fx.unfused_name(self.fuse)
        return fx.unfused(self.fuse, c, bias)

    def prim_func(self):
        from tvm import te

        acc, out = self.matmul.acc_dtype, self.out_dtype
        A = te.placeholder((self.M, self.K), self.in_dtype, name="A")
        B = te.placeholder(self.tensors()[1].shape, self.b_dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        nt = self.layout == "NT"
        scales = [te.placeholder(shape, "float32", name=s) for s, shape in
                  zip(("scale_a", "scale_b"), self.scale_shapes())] if self.scaled else []
        blk = bf.SCALE_BLOCK  # block scales: each product times its blocks' two scales
        fuse = self.fuse
        bias = [te.placeholder((self.N,), out, name="bias")] if fuse and fuse.bias else []

        def product(i, j):
            p = A[i, k].astype(acc) * (B[j, k] if nt else B[k, j]).astype(acc)
            return p * scales[0][i, k // blk] * scales[1][j // blk, k // blk] \
                if self.block_scaled else p

        C = te.compute((self.M, self.N), lambda i, j: te.sum(product(i, j), axis=k),
                       name="C" if acc == out and not scales and not fuse else "C_acc")
        if scales and self.block_scaled:
            C = te.compute(C.shape, lambda i, j: C[i, j].astype(out), name="C")
        elif scales:  # fp8: fp32 sums times both scales, then rounded once
            C = te.compute(C.shape, lambda i, j: (C[i, j] * scales[0][0] * scales[1][0])
                           .astype(acc if fuse else out), name="C_scaled" if fuse else "C")
        elif acc != out and not fuse:  # space v3's 16-bit output: fp32 sums, rounded once
            C = te.compute(C.shape, lambda i, j: C[i, j].astype(out), name="C")
        if fuse:  # bias and activation on the fp32 values, then rounded once
            C = fx.te_epilogue(fuse, C, bias[0] if bias else None, out)
        return te.create_prim_func([A, B, *scales, *bias, C])


#: B's element type where it is not A's (wgmma and cuBLASLt take e4m3 x e5m2 either way
#: round, not e5m2 x e5m2; one pairing here: e5m2 gradients times e4m3 weights)
B_DTYPES = {"e5m2xe4m3:bf16": "float8_e4m3fn", "e5m2xe4m3:fp32": "float8_e4m3fn"}
#: the interval fp8 GEMMs' per-tensor scales are drawn from (TensorSpec.values)
SCALE_VALUES = (1 / 64, 1 / 16)


def check_fp8(dtype: str, layout: str, N: int, K: int) -> None:
    """What an fp8 GEMM needs of its workload, refused by name otherwise."""
    if layout != "NT":
        raise WorkloadError(f"gemm: dtype {dtype!r} needs layout NT (B stored [N, K]): fp8 "
                            f"wgmma reads both operands K-major only, as torch._scaled_mm "
                            f"takes its second operand column-major; got {layout}")
    if N % 16 or K % 16:
        raise WorkloadError(f"gemm: dtype {dtype!r} needs N and K multiples of 16 "
                            f"(torch._scaled_mm, the vendor baseline; TMA's 16-byte rows of "
                            f"fp8 for K), got N = {N}, K = {K}")


def vendor_scaled_mm(op, a, b, scale_a, scale_b):
    """cuBLASLt's fp8 GEMM as torch offers it: ``torch._scaled_mm(a, b, scale_a, scale_b,
    out_dtype=, use_fast_accum=True)``, ``a`` [M, K] row-major, ``b`` [K, N] column-major (a
    GEMM's B [N, K], transposed: no copy), both fp8, the scales one-element fp32 tensors
    (tensor-wise scaling). Fast accumulation: cuBLASLt then keeps the sums in wgmma's
    accumulator as the v3 kernel does, where the default promotes them to fp32 on the CUDA
    cores every few k blocks (slower and more exact); the same arithmetic, so the faster bar.
    Sets ``op.reference_name`` to what ran."""
    import torch

    out = {"bfloat16": torch.bfloat16, "float32": torch.float32}[op.out_dtype]
    ins = " x ".join(str(x.dtype).removeprefix("torch.float8_")[:4] for x in (a, b))
    op.reference_name = (f"torch._scaled_mm(out_dtype={str(out).removeprefix('torch.')}, "
                         f"use_fast_accum=True) (cuBLASLt, {ins} in, per-tensor scales)")
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out, use_fast_accum=True)
