"""fp8 GEMM with block scales (``e4m3b128:bf16``, ``e4m3b128:fp32``; ``gemm.py``), DeepSeek-V3's
recipe: C = sum over k blocks kb of scale_a[m, kb] scale_b[n / 128, kb] (A B^T over kb's 128 k),
A [M, K] and B [N, K] in e4m3, scale_a [M, ceil(K / 128)] (one a row per 128 of K: 1 x 128) and
scale_b [ceil(N / 128), ceil(K / 128)] (one per 128 x 128 block of B), both fp32 row-major,
inputs of the workload like A and B. The float64 reference and the vendor call live here."""

from __future__ import annotations

from ._hopper_blockscale import SCALE_BLOCK, scale_shapes

__all__ = ["SCALE_BLOCK", "dequantized", "reference64", "scale_shapes", "vendor_block_mm"]


def dequantized(x, scale, rows_per_scale: int):
    """``x`` [R, K] (fp8) times its block scales ``scale`` [ceil(R / rows_per_scale), ceil(K /
    128)], in float64: each fp8 value and each product of two fp32 numbers is exact there."""
    r, k = x.shape
    s = scale.double().repeat_interleave(rows_per_scale, 0)[:r]
    return x.double() * s.repeat_interleave(SCALE_BLOCK, 1)[:, :k]


def reference64(a, b, scale_a, scale_b):
    """The exact block-scaled product of the inputs, float64: A's rows scaled per 1 x 128 block,
    B's per 128 x 128 block, then A B^T."""
    return dequantized(a, scale_a, 1) @ dequantized(b, scale_b, SCALE_BLOCK).t()


def cublaslt_scales(scale_a, scale_b):
    """The scales laid out as cuBLASLt's block scaling takes them (torch's
    test_scaled_mm_block_wise_numerics): scale_a [M, L] column-major ("outer-dim-major"),
    scale_b as [L4, ceil(N / 128)] K-major, L4 = L rounded up to a multiple of 4 (zeros)."""
    import torch

    sa = scale_a.t().contiguous().t()
    nb, kb = scale_b.shape
    sb = torch.zeros((nb, -(-kb // 4) * 4), dtype=scale_b.dtype, device=scale_b.device)
    sb[:, :kb] = scale_b
    return sa, sb.t()


def vendor_calls(a, b, scale_a, scale_b, out):
    """(name, callable) of each vendor call :func:`vendor_block_mm` tries, in order, on these
    inputs (``b`` [K, N], the column-major view of B [N, K]): torch's scaled_mm with cuBLASLt's
    block scales (CUDA 12.9+, sm90: ScalingType.BlockWise1x128 x BlockWise128x128), the same
    through the older ``torch._scaled_mm`` (which reads the scaling from the scales' shapes),
    and last a speed bar only: per-tensor ``_scaled_mm`` (not the block-scaled product; its
    error says so, its name why the others did not run)."""
    import torch
    import torch.nn.functional as F

    sa, sb = cublaslt_scales(scale_a, scale_b)
    o = str(out).removeprefix("torch.")
    how = "cuBLASLt block scales, e4m3 in; the scales laid out for it once, untimed"
    yield (f"torch.nn.functional.scaled_mm(BlockWise1x128 x BlockWise128x128, output_dtype={o}) "
           f"({how})", lambda: F.scaled_mm(a, b, sa, F.ScalingType.BlockWise1x128, sb,
                                           F.ScalingType.BlockWise128x128, output_dtype=out))
    yield (f"torch._scaled_mm(out_dtype={o}, 1x128 and 128x128 scales) ({how})",
           lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=out))
    one_a, one_b = scale_a.reshape(-1)[:1].contiguous(), scale_b.reshape(-1)[:1].contiguous()
    yield (f"torch._scaled_mm(out_dtype={o}, use_fast_accum=True) with PER-TENSOR scales "
           "(cuBLASLt): a speed bar only, not the block-scaled product (this torch took no "
           "block scales: {why})",
           lambda: torch._scaled_mm(a, b, one_a, one_b, out_dtype=out, use_fast_accum=True))


def vendor_block_mm(op, a, b, scale_a, scale_b):
    """The vendor's block-scaled fp8 GEMM on these inputs: the first of :func:`vendor_calls`
    that runs here, chosen once per set of input tensors (the runner times the same tensors
    over and over; the scales' cuBLASLt layout is made with the choice, outside the timing).
    Sets ``op.reference_name`` to exactly what ran (with the fallback, why the others did
    not)."""
    import torch

    def choose():
        out = {"bfloat16": torch.bfloat16, "float32": torch.float32}[op.out_dtype]
        why = []
        for name, call in vendor_calls(a, b, scale_a, scale_b, out):
            try:
                call()
            except (RuntimeError, NotImplementedError, TypeError, ValueError,
                    AttributeError) as e:
                why.append(f"{name.split('(')[0]}: {str(e).splitlines()[0][:160]}")
                continue
            return call, name.replace("{why}", "; ".join(why))
        raise RuntimeError("no vendor fp8 GEMM ran here: " + "; ".join(why))

    call, op.reference_name = op.once_for("vendor block mm", (a, b, scale_a, scale_b), choose)
    return call()
