"""Split K for space v3's GEMM and bmm (``_hopper_matmul.space``; conv2d's space has none): the
``split_k`` knob and what it needs. A tile's k blocks are divided into ``split_k`` equal slices,
each a CTA's unit of work (``_hopper_plan.Plan``: the walk of (k slice, tile) units, the k slice
outermost, ``_hopper_layout.split_unit``); each unit's fp32 partial sums add into the output,
which the launch zeroes first (``TirxKernel.zeroed``); or, with ``split_reduce`` cluster
(``_hopper_cluster_split``), a tile's slices are one cluster's CTAs and meet in distributed
shared memory. For skinny shapes (an LLM's decode projections) whose tiles alone leave most SMs
idle."""

from __future__ import annotations

import numpy as np

from bocast.space.space import Categorical, Constraint, Knob, Ordinal

from ._hopper_cluster_split import PORTABLE_CLUSTER
from ._hopper_layout import SPLIT_K, target_sms

#: how the k slices' partial sums meet: added into the zeroed fp32 output (TMA reduce-add,
#: red.global.add), or inside a cluster through distributed shared memory
#: (``_hopper_cluster_split``)
SPLIT_REDUCE = ("atomic", "cluster")


def knobs(spec) -> list[Knob]:  # noqa: ARG001 - the knobs' signature
    """Split K, GEMM's and bmm's (conv2d's space, which takes :func:`knobs`, has none)."""
    # came after the v3 datasets and stores were recorded: theirs read as 1 (today's kernel)
    return [Ordinal("split_k", SPLIT_K, default=1,
                    doc="k slices a tile's k blocks are divided into, each a CTA's unit of work "
                        "whose fp32 partial sums add into the zeroed output (TMA reduce-add "
                        "with the tma epilogue, red.global.add otherwise); 1: one CTA a tile"),
            # came after every dataset and store: theirs read as atomic (the kernel they timed)
            Categorical("split_reduce", SPLIT_REDUCE, default="atomic",
                        doc="split K's reduction: atomic adds into the zeroed fp32 output, or "
                            "the k slices as the CTAs of one cluster, summed through "
                            "distributed shared memory and stored once (any output type, a "
                            "fused epilogue on the sum)")]


def cluster_mode(c):
    """Per configuration of a column batch: whether it reduces in a cluster (False where the
    space has no split_reduce knob)."""
    if "split_reduce" not in c:
        return np.zeros_like(c["bm"], dtype=bool)
    return (c["split_reduce"] == "cluster") & (c["split_k"] > 1)


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
                   f"red.global.add.f32), so split_k > 1 needs an fp32 output (got {out}), "
                   "unless they meet in a cluster (split_reduce cluster: summed in fp32, "
                   "rounded once)",
                   lambda c: (c["split_k"] == 1) | (out == "float32") | cluster_mode(c)),
        Constraint("split_k_only_below_a_wave",
                   f"splitting K pays only while the tiles leave SMs idle: split_k > 1 only when "
                   f"half its units, tiles x split_k / 2, are fewer than the target's {sms} SMs "
                   "(the spaces of shapes whose tiles fill a wave stay as they were)",
                   lambda c: (c["split_k"] == 1) | (c["tiles"] * (c["split_k"] // 2) < sms)),
        Constraint("split_k_without_fuse",
                   f"a fused epilogue (bias, activation) applies to the whole sum, never to one "
                   f"k slice's part of it: split_k > 1 only without one (fuse "
                   f"{fuse_name(spec)}), unless the slices meet in a cluster (split_reduce "
                   "cluster applies it to the sum)",
                   lambda c: (c["split_k"] == 1) | (getattr(spec, "fuse", None) is None)
                   | cluster_mode(c)),
        *cluster_constraints(),
    ]


def cluster_constraints() -> list[Constraint]:
    """What split_reduce "cluster" needs; "atomic" passes every one."""
    def cl(c):
        return c["split_reduce"] == "cluster"

    return [
        Constraint("split_reduce_cluster_needs_split",
                   "split_reduce cluster reduces k slices: only with split_k > 1 (split_k 1 "
                   "has one name, atomic, so no kernel is two configurations)",
                   lambda c: ~cl(c) | (c["split_k"] > 1)),
        Constraint("split_reduce_cluster_one_unit_a_cta",
                   "the k slices of a tile are the CTAs of one cluster and must hold that "
                   "tile's slices at the same time: one unit a CTA, persistent off",
                   lambda c: ~cl(c) | (c["persistent"] == "off")),
        Constraint("split_reduce_cluster_without_multicast",
                   "the cluster is the tile's k slices: no 2-CTA multicast cluster besides "
                   "(cluster 1x1; both in one cluster is not built)",
                   lambda c: ~cl(c) | (c["cluster"] == "1x1")),
        Constraint("split_reduce_cluster_portable",
                   f"a cluster of split_k CTAs: at most {PORTABLE_CLUSTER}, the portable "
                   "cluster size every Hopper launch admits",
                   lambda c: ~cl(c) | (c["split_k"] <= PORTABLE_CLUSTER)),
        Constraint("split_reduce_cluster_own_stores",
                   "the cluster's reduce-scatter stores its rows with its own global stores "
                   "after the sum (16 bytes of fp32, two 4-byte pairs of a 16-bit type, when "
                   "N % 4 == 0), whatever the epilogue knob says: it takes one value there, "
                   "scalar, so no kernel is two configurations",
                   lambda c: ~cl(c) | (c["epilogue"] == "scalar")),
    ]


def fuse_name(spec) -> str:
    fuse = getattr(spec, "fuse", None)  # a conv's spec has none
    return "none" if fuse is None else fuse.name
