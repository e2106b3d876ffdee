"""Matrix times a batch of vectors on Tensor Cores: Y[b, m] = sum_k X[b, k] * A[m, k], i.e.
``torch.nn.functional.linear(X, A)``, with a matrix A[M, K], vectors X[B, K] and fp16 inputs, fp32
or fp16 accumulation and output.

It is the GEMM (``gemm.py``, built by ``_wmma_matmul.py``) with M = B (the batch of
vectors), N = M (matrix rows) and K = K, B stored [N, K] ("NT"): the knobs and constraints are the
GEMM's. A batch that is not a multiple of the WMMA m extent (B = 1 in particular) is padded to it
with zeros; the 8x32x16 WMMA shape wastes the least on it, and the padded rows are never stored
(``direct_writeback_unpadded`` sends them through the staging tile). GEMV is memory bound: the
matrix is read once whatever the batch.

Default: a 4096 x 4096 matrix and 16 vectors. Heron's figure-6 cases use batch 1 and shapes (M, K)
GV1 [512,16], GV2 [1024,256], GV3 [256,1024], GV4 [512,256], GV5 [1024,1024]; here
``--shape M,K`` is batch 1.

Space v3 (``--space v3``, fp16 only; ``space: auto`` keeps v2 until measured,
:data:`AUTO_V3_GEMV`) runs it on the GEMM's Hopper template (``_hopper_matmul``), whose
``swap_ab`` knob (``_hopper_swap``) lets the matrix's rows fill wgmma's 64-row M and the vectors
be its N (8 to 256), with split K for matrices of few row tiles.
"""

from __future__ import annotations

from typing import Any

from bocast.space.operators.operator import TensorSpec, WorkloadError, register

from . import _matmul as mm
from . import _matmul_operator as mo

#: ``space auto`` takes v3 (swap_ab, split K) for a GEMV whose matrix has at least 64 rows:
#: measured on an H200 (2026-11-28, experiments/results/skinny_tconv_h200x4/, cold BO, 64 trials,
#: seed 0, each space in its own run): 8 vectors times a 4096 x 14336 matrix (Llama-3-8B's MLP
#: down projection at decode) v3 1.118 of cuBLAS against v2 0.944 (re-timed figures)
AUTO_V3_GEMV = True


@register
class Gemv(mo.MatmulOperator):
    name = "gemv"
    shape_help = ("M,K[,B] (Y[B,M] = X[B,K] @ A[M,K]^T: B vectors times an M x K matrix; "
                  "B=1 when left out)")
    default_shape = (4096, 4096, 16)
    v3_rule = f"AUTO_V3_GEMV (switched on): M >= {mm.AUTO_V3_MIN_MN}" if AUTO_V3_GEMV else None

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        return AUTO_V3_GEMV and len(shape) in (2, 3) and shape[0] >= mm.AUTO_V3_MIN_MN

    def __init__(self, M: int, K: int, B: int = 1, *, dtype: str = "fp16:fp32",
                 space: str = mm.DEFAULT_SPACE):
        mm.check_extents(self.name, ("M", "K", "B"), (M, K, B))
        # fp16 only, on every space (v3 too: bf16 and fp8 GEMVs are not offered yet)
        self.in_dtype, self.out_dtype = mm.dtype_pair(self.name, dtype, space, ("v1", "v2"))
        self.M, self.K, self.B = int(M), int(K), int(B)
        self.workload = {"op": self.name, "shape": [self.M, self.K, self.B], "dtype": dtype,
                         "space": mm.space_version(self.name, space)}
        # the vectors are the matmul's A operand and the matrix its (transposed) B; on v3
        # (_hopper_matmul, its swap_ab knob: the matrix's rows fill wgmma's M) the kernel's
        # parameters are named as these tensors (operands) and it accumulates in fp32
        self.matmul = mm.MatmulSpec(self.B, self.M, self.K, self.in_dtype,
                                    mm.acc_dtype(space, self.out_dtype),
                                    out_dtype=self.out_dtype, trans_b=True, block="Y",
                                    space=space, operands=("X", "A", "Y"))
        self.space = self.matmul_space(mm.vec_constraint(
            "vec_divides_k", f"fetch vectors stay inside rows of X and A (K={self.K})", (self.K,)))

    @classmethod
    def from_args(cls, shape=None, **options: Any) -> Gemv:
        shape = tuple(shape) if shape is not None else cls.default_shape
        if len(shape) not in (2, 3):
            raise WorkloadError(f"gemv: shape needs 2 or 3 extents M,K[,B], got {len(shape)}: "
                                f"{shape}")
        mm.check_options(cls.name, options, ("dtype", "space"))
        return cls(*shape, **options)

    @property
    def flops(self) -> int:
        return 2 * self.B * self.M * self.K

    def tensors(self) -> list[TensorSpec]:
        return [TensorSpec("A", (self.M, self.K), self.in_dtype, "input"),
                TensorSpec("X", (self.B, self.K), self.in_dtype, "input"),
                TensorSpec("Y", (self.B, self.M), self.out_dtype, "output")]

    def reference(self, a, x):
        return x.float() @ a.float().t()

    reference_name = "torch.nn.functional.linear (cuBLAS)"

    def reference_fast(self, a, x):
        import torch

        return mm.vendor_matmul(self, torch.mm, x, a.t(), "torch.mm")

    def prim_func(self):
        from tvm import te

        acc = self.out_dtype
        A = te.placeholder((self.M, self.K), self.in_dtype, name="A")
        X = te.placeholder((self.B, self.K), self.in_dtype, name="X")
        k = te.reduce_axis((0, self.K), name="k")
        Y = te.compute((self.B, self.M), lambda b, m: te.sum(
            X[b, k].astype(acc) * A[m, k].astype(acc), axis=k), name="Y")
        return te.create_prim_func([A, X, Y])
