"""Split K for space v3's GEMM and bmm (``_hopper_matmul.space``; conv2d's space has none): the
``split_k`` knob and what it needs. A tile's k blocks are divided into ``split_k`` equal slices,
each a CTA's unit of work (``_hopper_plan.Plan``: the walk of (k slice, tile) units, the k slice
outermost, ``_hopper_layout.split_unit``); each unit's fp32 partial sums add into the output,
which the launch zeroes first (``TirxKernel.zeroed``). For skinny shapes (an LLM's decode
projections) whose tiles alone leave most SMs idle."""

from __future__ import annotations

from bocast.space.space import Constraint, Knob, Ordinal

from ._hopper_layout import SPLIT_K, target_sms


def knobs(spec) -> list[Knob]:  # noqa: ARG001 - the knobs' signature
    """Split K, GEMM's and bmm's (conv2d's space, which takes :func:`knobs`, has none)."""
    # came after the v3 datasets and stores were recorded: theirs read as 1 (today's kernel)
    return [Ordinal("split_k", SPLIT_K, default=1,
                    doc="k slices a tile's k blocks are divided into, each a CTA's unit of work "
                        "whose fp32 partial sums add into the zeroed output (TMA reduce-add "
                        "with the tma epilogue, red.global.add otherwise); 1: one CTA a tile")]


def constraints(spec) -> list[Constraint]:
    """What split K needs; split_k 1 passes every one."""
    K, out, sms = spec.K, spec.out_dtype, target_sms(spec)
    return [
        Constraint("split_k_divides_k_blocks",
                   f"each k slice is the same number of whole k blocks (the ring's phases count "
                   f"them): split_k divides ceil(K / BK) (K = {K})",
                   lambda c: c["k_blocks"] % c["split_k"] == 0),
        Constraint("split_k_needs_fp32_output",
                   f"the k slices' partial sums add into the output in fp32 (TMA's reduce-add, "
                   f"red.global.add.f32), so split_k > 1 needs an fp32 output (got {out})",
                   lambda c: (c["split_k"] == 1) | (out == "float32")),
        Constraint("split_k_only_below_a_wave",
                   f"splitting K pays only while the tiles leave SMs idle: split_k > 1 only when "
                   f"half its units, tiles x split_k / 2, are fewer than the target's {sms} SMs "
                   "(the spaces of shapes whose tiles fill a wave stay as they were)",
                   lambda c: (c["split_k"] == 1) | (c["tiles"] * (c["split_k"] // 2) < sms)),
        Constraint("split_k_without_fuse",
                   f"a fused epilogue (bias, activation) applies to the whole sum, never to one "
                   f"k slice's part of it: split_k > 1 only without one (fuse "
                   f"{fuse_name(spec)})",
                   lambda c: (c["split_k"] == 1) | (getattr(spec, "fuse", None) is None)),
    ]


def fuse_name(spec) -> str:
    fuse = getattr(spec, "fuse", None)  # a conv's spec has none
    return "none" if fuse is None else fuse.name
