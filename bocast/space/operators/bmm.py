"""Batched matmul on Tensor Cores (WMMA): C[b, M, N] = A[b, M, K] @ B[b], with B stored [b, N, K]
("NT", C = A B^T, attention scores Q K^T) or [b, K, N] ("NN", attention output P V); fp16 inputs,
fp32 or fp16 accumulation and output (space v3: also bf16 inputs, fp32 accumulation, fp32 or
16-bit output; ``_matmul.SPACE_DTYPES``).

The knobs and constraints are the GEMM's (``gemm.py``, built by ``_wmma_matmul.py``)
on the M, N, K of one batch element, plus ``batch_bind``: the batch axis runs on blockIdx.y, or
is fused outermost with the block tiles into blockIdx.x (one flat grid; consecutive blocks then
share a batch element's operands in L2). Every thread block computes its tile of one batch
element, so the per-block quantities (threads, shared memory, registers) are the GEMM's. Heron's
bmm list (45 parameters) also tiles the batch axis over warps; that would multiply every shared
tile by the batch tile, and is left out.

Default shape: BERT-base attention scores, 12 heads x [512 x 64] @ [64 x 512]. Heron's figure 6
(tests/figure6/configs/bmm.json, its order B,M,K,N) uses B1 [12,512,64,512], B2 [12,512,512,64],
B3/B4 the same with 16 heads, B5/B6 [96,2048,128,2048] and [96,2048,2048,128].
"""

from __future__ import annotations

from bocast.space.operators.operator import TensorSpec, WorkloadError, register

from . import _hopper_layout as hl
from . import _matmul as mm
from . import _matmul_operator as mo

LAYOUTS = ("NT", "NN")


@register
class Bmm(mo.MatmulOperator):
    name = "bmm"
    shape_help = ("B,M,N,K (C[b,M,N] = A[b,M,K] @ B[b]; B[b] is [N,K] with --layout NT, "
                  "[K,N] with NN)")
    default_shape = (12, 512, 512, 64)
    extents = ("B", "M", "N", "K")
    option_names = (*mo.MatmulOperator.option_names, "sm_count")
    v3_rule = mm.AUTO_V3_RULE

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(cls.extents) and min(shape[1:3]) >= mm.AUTO_V3_MIN_MN

    def __init__(self, B: int, M: int, N: int, K: int, *, dtype: str = "fp16:fp32",
                 layout: str = "NT", space: str = mm.DEFAULT_SPACE, sm_count: int | None = None):
        mm.check_extents(self.name, self.extents, (B, M, N, K))
        self.in_dtype, self.out_dtype = mm.dtype_pair(self.name, dtype, space)
        if layout not in LAYOUTS:
            raise WorkloadError(f"bmm: layout {layout!r} not supported; use one of {list(LAYOUTS)}")
        self.B, self.M, self.N, self.K = int(B), int(M), int(N), int(K)
        self.layout = layout
        self.workload = {"op": self.name, "shape": [self.B, self.M, self.N, self.K],
                         "dtype": dtype, "layout": layout,
                         "space": mm.space_version(self.name, space),
                         **(target := hl.sm_count_entry(self.name, space, sm_count))}
        self.matmul = mm.MatmulSpec(self.M, self.N, self.K, self.in_dtype,
                                    mm.acc_dtype(space, self.out_dtype), out_dtype=self.out_dtype,
                                    trans_b=layout == "NT", batch=self.B, space=space,
                                    sm_count=target.get("sm_count", hl.DEFAULT_SM_COUNT))
        b_extent = self.K if layout == "NT" else self.N
        self.space = self.matmul_space(mm.vec_constraint(
            "vec_divides_k", f"fetch vectors stay inside rows of A (K={self.K}) and "
            f"B ({'K' if layout == 'NT' else 'N'}={b_extent})", (self.K, b_extent)))

    @property
    def flops(self) -> int:
        return 2 * self.B * self.M * self.N * self.K

    def tensors(self) -> list[TensorSpec]:
        b_shape = (self.B, self.N, self.K) if self.layout == "NT" else (self.B, self.K, self.N)
        return [TensorSpec("A", (self.B, self.M, self.K), self.in_dtype, "input"),
                TensorSpec("B", b_shape, self.in_dtype, "input"),
                TensorSpec("C", (self.B, self.M, self.N), self.out_dtype, "output")]

    def reference(self, a, b):
        """The exact product of the fp16/bf16 inputs in float64 (every dtype's check)."""
        b = b.double().transpose(1, 2) if self.layout == "NT" else b.double()
        return a.double() @ b

    reference_name = "torch.bmm (cuBLAS)"

    def reference_fast(self, a, b):
        import torch

        b = b.transpose(1, 2) if self.layout == "NT" else b
        return mm.vendor_matmul(self, torch.bmm, a, b, "torch.bmm")

    def prim_func(self):
        from tvm import te

        acc, out = self.matmul.acc_dtype, self.out_dtype
        A = te.placeholder((self.B, self.M, self.K), self.in_dtype, name="A")
        B = te.placeholder(self.tensors()[1].shape, self.in_dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        nt = self.layout == "NT"
        C = te.compute((self.B, self.M, self.N), lambda b, i, j: te.sum(
            A[b, i, k].astype(acc) * (B[b, j, k] if nt else B[b, k, j]).astype(acc), axis=k),
            name="C" if acc == out else "C_acc")
        if acc != out:  # space v3's 16-bit output: fp32 sums, rounded once
            C = te.compute(C.shape, lambda b, i, j: C[b, i, j].astype(out), name="C")
        return te.create_prim_func([A, B, C])
