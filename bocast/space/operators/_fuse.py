"""The fused epilogue of a GEMM (issue 39, item 4): the workload field ``fuse``.

An LLM calls its GEMMs as ``out = act(scale * (A @ B^T) + bias)`` cast to bf16 or fp16. A
workload with ``fuse`` (``--fuse bias+gelu``) computes exactly that: the space v3 kernel's
consumers add the bias and apply the activation to their fp32 accumulators (after fp8's
per-tensor scales) before the output's rounding, so the product never leaves the registers in
between. It changes what is computed, so it is part of the workload (its identity, records and
library entry) like the dtype, and distinct from the *schedule* knob ``epilogue`` (how a tile's
accumulators are stored: v2, scalar or tma), which it leaves to the tuner.

``fuse`` is "none" (the default: no field in the workload, which therefore reads as before),
"bias", an activation ("relu", "gelu", "silu"), or "bias+" one. ``bias`` is a length-N vector
in the output's type (cuBLASLt's default bias type, the output's); gelu is torch's default
``F.gelu``, the erf form, its erf evaluated branch-free to 1.5e-7 (:data:`ERF_AS`; about 15
instructions an element, once a tile); silu is x sigmoid(x) (``expf``).

The check's reference computes it in float64 (:func:`reference64`); the vendor baseline is the
unfused torch sequence a user writes, ``F.gelu(torch.mm(a, b.t()) + bias)``, each step in the
output's type (:func:`unfused`), timed as one callable the way every reference is (a CUDA
graph of it). Its operands are drawn narrower than an unfused GEMM's (:func:`operand_values`),
so that the accumulators' spread is about 1, where the activation bends and a bias of [-1, 1)
matters: at the default [-1, 1) a sum over K = 4096 spreads about 21, where gelu is relu to
2.3e-3 (inside the 16-bit tolerances) and the bias moves the output by 2.7e-2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bocast.space.operators.operator import WorkloadError

NONE = "none"
ACTIVATIONS = ("relu", "gelu", "silu")
#: every value of the workload's ``fuse``
CHOICES = (NONE, "bias", *ACTIVATIONS, *(f"bias+{a}" for a in ACTIVATIONS))
#: fp8 GEMMs' per-tensor scales are drawn from [1/64, 1/16) (``gemm.SCALE_VALUES``): their
#: product's mean, which :func:`operand_values` assumes
FP8_SCALE_PRODUCT = ((1 / 64 + 1 / 16) / 2) ** 2


@dataclass(frozen=True)
class Fuse:
    """What the epilogue adds to the product: a bias (a length-N vector), an activation."""

    bias: bool
    act: str  # "none" | ACTIVATIONS

    @property
    def name(self) -> str:
        return "+".join(x for x in ("bias" if self.bias else "", self.act if self.act != NONE
                                    else "") if x) or NONE


def parse(op: str, text: str, space: str) -> Fuse | None:
    """The epilogue named by ``text`` (None for "none"); one WorkloadError naming the values
    accepted, or the space that implements it."""
    if text not in CHOICES:
        raise WorkloadError(f"{op}: fuse {text!r} not known; use one of {list(CHOICES)}")
    if text == NONE:
        return None
    if space != "v3":
        raise WorkloadError(f"{op}: fuse {text!r} needs space v3 (the Hopper template's "
                            f"consumers apply it); space {space} has no fused epilogue")
    bias = text.startswith("bias")
    act = text.removeprefix("bias").removeprefix("+") or NONE
    return Fuse(bias, act)


def operand_values(K: int, scaled: bool) -> tuple[float, float]:
    """The interval A's and B's values are drawn from for a fused GEMM: +-a with a product's
    spread near 1, a^2 sqrt(K / 9) (times the scales' mean product for fp8) = 1."""
    a = math.sqrt(3 / math.sqrt(K) / (FP8_SCALE_PRODUCT if scaled else 1.0))
    return (-a, a)


def reference64(fuse: Fuse, c, bias):
    """The exact epilogue of the float64 product ``c`` ([M, N]) and ``bias`` ([N] or None)."""
    import torch

    if fuse.bias:
        c = c + bias.double()
    if fuse.act == "relu":
        return torch.clamp_min(c, 0.0)
    if fuse.act == "gelu":  # torch's default F.gelu: the erf form
        return 0.5 * c * (1.0 + torch.erf(c / math.sqrt(2.0)))
    if fuse.act == "silu":
        return c * torch.sigmoid(c)
    return c


def unfused(fuse: Fuse, c, bias):
    """The torch sequence a user writes after the GEMM ``c`` (in the output's type): ``+ bias``,
    then the activation, each a kernel of its own in the output's type."""
    import torch.nn.functional as F

    if fuse.bias:
        c = c + bias
    if fuse.act == "relu":
        return F.relu(c)
    if fuse.act == "gelu":  # the default, approximate="none": the erf form
        return F.gelu(c)
    return F.silu(c) if fuse.act == "silu" else c


def unfused_name(fuse: Fuse) -> str:
    steps = (["+ bias"] if fuse.bias else []) + \
        ([f"F.{fuse.act}"] if fuse.act != NONE else [])
    return f", then {', '.join(steps)} (unfused, each in the output's type)"


def te_epilogue(fuse: Fuse, c, bias, out_dtype: str):
    """The epilogue in TE over the fp32 tensor ``c`` (the prim_func's statement of it)."""
    from tvm import te, tirx

    def f(i, j):
        x = c[i, j] + (bias[j].astype("float32") if fuse.bias else 0.0)
        if fuse.act == "relu":
            x = te.max(x, tirx.const(0.0, "float32"))
        elif fuse.act == "gelu":
            x = 0.5 * x * (1.0 + tirx.erf(x * (1 / math.sqrt(2.0))))
        elif fuse.act == "silu":
            x = x / (1.0 + tirx.exp(-x))
        return x.astype(out_dtype)

    return te.compute(c.shape, f, name="C")


# ------------------------------------------------------------------------- the kernel's part

#: erf(z) of z >= 0, branch-free: 1 - t (a1 + a2 t + ... + a5 t^4) exp(-z^2), t = 1 / (1 + p z)
#: (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7 over all z): (p, a1..a5). CUDA's erff is as
#: exact but branches on |z| < 1.0: unrolled over a thread's 128 accumulators (BN 256, ragged
#: stores) that took ptxas past the 168 registers of 384 threads (144 bytes of spills), where
#: this one builds without
ERF_AS = (0.3275911, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf_as(z):
    """:data:`ERF_AS`'s erf of ``z`` >= 0 (numpy or float), as the kernel's helper computes it."""
    import numpy as np

    p, *a = ERF_AS
    t = 1.0 / (1.0 + p * z)
    poly = a[4]
    for c in reversed(a[:4]):
        poly = poly * t + c
    return 1.0 - poly * t * np.exp(-z * z)


def _gelu_cuda() -> str:
    p, a1, a2, a3, a4, a5 = (f"{c!r}f" for c in ERF_AS)
    return ("float z = fabsf(x) * 0.70710678118654752f;\n"
            f"  float t = __frcp_rn(fmaf({p}, z, 1.0f));\n"
            f"  float q = fmaf(fmaf(fmaf(fmaf({a5}, t, {a4}), t, {a3}), t, {a2}), t, {a1});\n"
            "  float erf_z = 1.0f - q * t * __expf(-z * z);  // erf(|x| / sqrt(2))\n"
            "  return 0.5f * x * (1.0f + copysignf(erf_z, x));")


#: each activation's CUDA, on an fp32 accumulator: gelu the erf form, torch's default F.gelu
#: (:data:`ERF_AS`), silu x sigmoid(x) with expf
_CUDA = {"relu": "return fmaxf(x, 0.0f);", "gelu": _gelu_cuda(),
         "silu": "return x / (1.0f + expf(-x));"}


def activation(act: str):
    """A function of a TIR float32 expression: the activation ``act`` of it (a call of a small
    CUDA helper, ``bocast_<act>``), or the expression itself for "none"."""
    if act == NONE:
        return lambda x: x
    from tvm.script import tirx as T

    name = f"bocast_{act}"
    source = f"__forceinline__ __device__ float {name}(float x) {{\n  {_CUDA[act]}\n}}\n"
    return lambda x: T.cuda.func_call(name, x, source_code=source, return_type="float32")


def tile_macro(fuse: Fuse, BN: int, atoms: int, N: int):
    """A TIRx macro of (acc, bias, tn, lt): consumer thread ``lt``'s accumulators of block
    column ``tn`` after the epilogue (bias added, activation applied), in place. The thread's
    columns are 8 jj + 2 (lt % 4) (+1) of the tile (wgmma's m64nNk16 f32 fragment), each held
    in 2 rows of every m64 atom: the bias of a column is loaded once a tile, then added to its
    2 x atoms accumulators. A ragged N reads no bias past its end (the columns past it, which
    are not stored, take the last column's)."""
    from tvm.script import tirx as T

    act, half_n, ragged = activation(fuse.act), BN // 2, N % BN != 0

    @T.macro
    def apply(acc, bias, tn, lt):
        bv = T.alloc_buffer((2,), "float32", scope="local")
        for jj in T.unroll(BN // 8):
            for e in T.unroll(2):
                col = T.meta_var(tn * BN + jj * 8 + lt % 4 * 2 + e)
                if fuse.bias and ragged:
                    # past N: the last column's bias, never stored (a clamped address costs
                    # no branch and no register, where a predicated load spilled at BN 256)
                    bv[e] = T.cast(bias[T.min(col, N - 1)], "float32")
                elif fuse.bias:
                    bv[e] = T.cast(bias[col], "float32")
                for a in T.unroll(atoms):
                    for h in T.unroll(2):
                        v = T.meta_var(a * half_n + jj * 4 + h * 2 + e)
                        if fuse.bias:
                            acc[v] = act(acc[v] + bv[e])
                        else:
                            acc[v] = act(acc[v])

    return apply


def entry(launch, *, rows_a: int, rows_b: int, K: int, N: int, in_dtype: str, b_dtype: str,
          out_dtype: str, scaled: bool):
    """The prim_func of a GEMM with a bias: (A, B[, scale_a, scale_b], bias, C), its tensors'
    order, around ``launch`` (``_hopper_matmul.kernel``'s macro of A, B, C, the scales and the
    bias). Without a bias the kernel is the plain one's."""
    from tvm.script import tirx as T

    if not scaled:
        @T.prim_func
        def main(A_ptr: T.handle, B_ptr: T.handle, bias_ptr: T.handle, C_ptr: T.handle):
            A = T.match_buffer(A_ptr, (rows_a, K), in_dtype, align=16)
            B = T.match_buffer(B_ptr, (rows_b, K), b_dtype, align=16)
            bias = T.match_buffer(bias_ptr, (N,), out_dtype)
            C = T.match_buffer(C_ptr, (rows_a, N), out_dtype, align=16)
            launch(A, B, C, None, None, bias)

        return main

    @T.prim_func
    def scaled_main(A_ptr: T.handle, B_ptr: T.handle, scale_a_ptr: T.handle,
                    scale_b_ptr: T.handle, bias_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (rows_a, K), in_dtype, align=16)
        B = T.match_buffer(B_ptr, (rows_b, K), b_dtype, align=16)
        scale_a = T.match_buffer(scale_a_ptr, (1,), "float32")
        scale_b = T.match_buffer(scale_b_ptr, (1,), "float32")
        bias = T.match_buffer(bias_ptr, (N,), out_dtype)
        C = T.match_buffer(C_ptr, (rows_a, N), out_dtype, align=16)
        launch(A, B, C, scale_a, scale_b, bias)

    return scaled_main.with_attr("global_symbol", "main")
