"""Swap AB for space v3's skinny GEMMs and GEMV (issue 38 item 3): the ``swap_ab`` knob and what
it needs. wgmma's M is 64 rows a warpgroup, so a GEMM of M = 16 wastes 3/4 of every MMA and of
A's tile, while its cost is the weight (B) stream. Swapped, the kernel computes C^T = B A^T
(CUTLASS's and TensorRT-LLM's "swap AB"): B's rows (the weights, N) fill wgmma's M and A's rows
(the tokens, M) become wgmma's N, any multiple of 8, so a C tile of BM = 8, 16 or 32 rows is a
whole wgmma (``bm`` takes those values only under swap). Both operands stay K-major (fp8 too).

The knobs keep naming C's tile: ``bm`` rows over M, ``bn`` columns over N, ``cluster`` and
``raster_major`` C's walk; :func:`kernel_config` turns a configuration into the kernel's own
(its rows BN over N, its columns BM over M: the knobs' roles swapped), so every constraint of
``_hopper_matmul`` over C's tiles holds as written. The output is written transposed: the
kernel's accumulator (row n, column m) is C[m, n] (:func:`transposed_stores`), one element at a
time (a thread's pairs are consecutive in m, a column of C): the scalar epilogue only. The tma
epilogue is refused under swap (its staging box is C's row-major box; transposed it would need
a column-major box of BM rows, not built); the v2 epilogue's pairs are not contiguous in C.
Split K combines with it (the scalar adds, red.global.add.f32, at the transposed address).

GEMM and GEMV (batch 1) have the knob; bmm's space has none (its tiles' batch element would need
the transposed store's own index map), conv2d's neither."""

from __future__ import annotations

import numpy as np

from bocast.space.space import Categorical, Constraint, Knob, Ordinal

from . import _hopper_layout as hl

#: C tiles of fewer rows than a wgmma atom: a wgmma's N (a multiple of 8) under swap only
SMALL_BM = (8, 16, 32)
#: swap only for GEMMs of at most this many rows: where a 64-row atom is mostly padding or the
#: tokens fit one wgmma N (<= 256) with room for BN's weights; the spaces of larger GEMMs keep
#: their feasible set
SWAP_MAX_M = 128
#: the kernel's configuration keys a swap exchanges (C's view -> the kernel's, and back)
_CLUSTER_T = {"1x1": "1x1", "2x1": "1x2", "1x2": "2x1"}
_MAJOR_T = {"m": "n", "n": "m"}


def has_knob(spec) -> bool:
    """GEMM and GEMV have the knob (batch 1); bmm's space keeps its knobs, and so does fp8 with
    block scales (its scales' index maps follow the unswapped kernel: _hopper_blockscale)."""
    return max(spec.batch, 1) == 1 and not getattr(spec, "scale_block", 0)


def knobs(spec) -> list[Knob]:
    # came after every v3 dataset and store: theirs read as off (today's kernel)
    return [Categorical("swap_ab", ("off", "on"), default="off",
                        doc="compute C^T = B A^T: B's rows (N) fill wgmma's 64-row M, C's BM "
                            "rows (M) are wgmma's N (8 to 256), the output stored transposed "
                            "(scalar epilogue); for skinny M")] if has_knob(spec) else []


def bm_knob(knob: Knob, spec) -> Knob:
    """``_hopper_matmul``'s bm knob, with :data:`SMALL_BM` before its values where the space has
    the swap knob (the C tile's rows are wgmma's N only under swap: small_bm_needs_swap)."""
    if not has_knob(spec):
        return knob
    assert isinstance(knob, Ordinal) and min(knob.choices) == 64, knob
    return Ordinal(knob.name, (*SMALL_BM, *knob.choices), doc=knob.doc + "; 8, 16, 32 under "
                   "swap_ab only (then wgmma's N)")


def swapped(c):
    """Per configuration of a column batch: whether it swaps (False where the space has no
    knob)."""
    return (c["swap_ab"] == "on") if "swap_ab" in c else np.zeros_like(c["bm"], dtype=bool)


def kernel_tile(c):
    """(the kernel's tile rows, its columns = wgmma's N) of a column batch: (BM, BN), or (BN, BM)
    under swap."""
    s = swapped(c)
    return np.where(s, c["bn"], c["bm"]), np.where(s, c["bm"], c["bn"])


def constraints(spec) -> list[Constraint]:
    """What swap needs; a configuration with swap_ab off and bm >= 64 passes every one."""
    if not has_knob(spec):
        return []
    M, fuse = spec.M, getattr(spec, "fuse", None)
    return [
        Constraint("small_bm_needs_swap",
                   "a C tile of fewer than 64 rows (bm 8, 16, 32) is a whole wgmma only as its "
                   "N, under swap_ab; unswapped it would be a fraction of an m64 atom",
                   lambda c: (c["bm"] >= 64) | swapped(c)),
        Constraint("swap_ab_only_when_skinny",
                   f"swap_ab only for M <= {SWAP_MAX_M} (M = {M}): the skinny GEMMs it is for; "
                   "larger GEMMs keep the spaces they had",
                   lambda c: ~swapped(c) | (M <= SWAP_MAX_M)),
        Constraint("swap_ab_scalar_epilogue",
                   "swapped, a thread's accumulator pairs lie along M, a column of C: stored "
                   "one element at a time (scalar); the v2 pairs would not be contiguous and "
                   "the tma epilogue's box would have to be column-major (not built)",
                   lambda c: ~swapped(c) | (c["epilogue"] == "scalar")),
        Constraint("swap_ab_without_fuse",
                   f"the fused epilogue's bias follows C's columns, the kernel's rows under "
                   f"swap (not built): swap_ab only without one (fuse "
                   f"{'none' if fuse is None else fuse.name})",
                   lambda c: ~swapped(c) | (fuse is None)),
        Constraint("swap_ab_multicast_half_whole",
                   "swapped, a 1x2 cluster multicasts A's tile (the kernel's second operand) "
                   "in halves of bm / 2 rows, each whole 8-row swizzle atoms: bm % 16 == 0",
                   lambda c: ~swapped(c) | (c["cluster"] != "1x2") | (c["bm"] % 16 == 0)),
    ]


def kernel_config(config) -> dict:
    """The kernel's configuration of a swapped one: C^T's tile (bn rows, bm columns), its
    cluster and raster walk transposed (C's 2x1 pairs two block rows sharing B's tile: the
    kernel's 1x2, pairing two of its block columns that share its A, which is B)."""
    c = dict(config)
    c["bm"], c["bn"] = config["bn"], config["bm"]
    c["cluster"] = _CLUSTER_T[config.get("cluster", "1x1")]
    c["raster_major"] = _MAJOR_T[config.get("raster_major", "m")]
    return c


def transposed_stores(p, out_dtype: str, *, adds: bool = False):
    """The output hooks of a swapped kernel (``Plan`` ``p`` over C^T: p.M = C's N, p.N = C's
    M): consumer thread lt's accumulator (kernel row r, column q) to C[q, r], scalar (or, split
    K: added, red.global.add.f32, into the zeroed fp32 C). The tma epilogue's box store does
    not exist here (swap_ab_scalar_epilogue)."""
    from tvm.script import tirx as T

    assert p.batch == 1 and not p.tma_store and not p.vec_store, "swap_ab_scalar_epilogue"
    BM, BN, atoms, half_n = p.BM, p.BN, p.atoms, p.half_n
    rows, cols = p.M, p.N  # the kernel's: C's N and M
    pred_r, pred_q = rows % BM != 0, cols % BN != 0
    pred_q1 = cols % 2 != 0  # column q + 1 may be past M while q is not
    scalar_pair = hl.scalar_pair(out_dtype)  # a 16-bit output's pair, rounded at once

    def store_box(*_):
        raise AssertionError("swap_ab_scalar_epilogue: no tma store under swap")

    @T.macro
    def store_rows(C, acc, tm, tn, row0, lt):
        for a in T.unroll(atoms):
            for jj in T.unroll(BN // 8):
                r = T.meta_var(tm * BM + row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4)
                q = T.meta_var(tn * BN + jj * 8 + lt % 4 * 2)
                v = T.meta_var(a * half_n + jj * 4)
                for h in T.unroll(2):  # kernel rows r and r + 8: C's columns
                    if (not pred_r or r + h * 8 < rows) and (not pred_q or q < cols):
                        if adds:
                            T.ptx["red.global.add.f32"](T.address_of(C[q, r + h * 8]),
                                                        acc[v + h * 2])
                            if not pred_q1 or q + 1 < cols:
                                T.ptx["red.global.add.f32"](
                                    T.address_of(C[q + 1, r + h * 8]), acc[v + h * 2 + 1])
                        elif scalar_pair is not None:  # 16-bit: rounded as a pair
                            scalar_pair(T.address_of(C[q, r + h * 8]),
                                        T.address_of(C[q + 1, r + h * 8]), acc[v + h * 2],
                                        acc[v + h * 2 + 1], not pred_q1 or q + 1 < cols)
                        else:
                            C[q, r + h * 8] = T.cast(acc[v + h * 2], out_dtype)
                            if not pred_q1 or q + 1 < cols:
                                C[q + 1, r + h * 8] = T.cast(acc[v + h * 2 + 1], out_dtype)

    return store_box, store_rows
