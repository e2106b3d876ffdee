"""The output stores of space v3's kernels whose output is a row-major matrix: a GEMM's C[M, N],
a bmm's [b x M, N], and conv2d's Y as [N*OH*OW, K] when the im2col producer loads its rows
(one definition for both templates: ``_hopper_matmul`` and ``_hopper_conv``)."""

from __future__ import annotations

from . import _hopper_kernel as hk
from . import _hopper_layout as hl


def row_major_stores(p: hk.Plan, M: int, N: int, out_dtype: str, *, adds: bool = False):
    """The output hooks (``Operands.store_box``, ``store_rows``) of a row-major C[M, N] (a bmm's
    [b x M, N]; conv2d's Y as [N*OH*OW, K] when im2col loads its rows): the tma epilogue's
    2-D box store, the direct epilogues' stores of each accumulator at (row, column); ``adds``
    (split K, an fp32 C zeroed by the launch): each adds its partial sums instead."""
    from tvm.script import tirx as T

    BM, BN, atoms, half_n, vec_store = p.BM, p.BN, p.atoms, p.half_n, p.vec_store
    # ragged M or N (not a bmm's: bmm_tiles_within_batch): the direct stores test their rows
    # and columns; TMA zero-fills the loads past each edge (and past K)
    pred_m, pred_n = M % BM != 0, N % BN != 0
    pred_n1 = N % 2 != 0  # scalar stores: column 2j + 1 may be past the edge while 2j is not
    tma_st = ("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" if adds
              else "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group")
    # a 16-bit output: two accumulators rounded into one 4-byte store (fp32: st.global.v2.f32)
    store_pair = hl.store_pair(out_dtype, "global")
    scalar_pair = hl.scalar_pair(out_dtype)  # the scalar epilogue's, rounded as a pair

    @T.macro
    def store_box(C_map, smem, tm, row0, a, col0, lt):
        grow0 = T.meta_var(tm * BM + row0 + a * 64)
        # a box wholly past a ragged edge stores nothing: skip it
        if lt == 0 and (not pred_m or grow0 < M) and (not pred_n or col0 < N):
            T.ptx[tma_st](T.address_of(C_map), col0, grow0, smem)
            T.ptx["cp.async.bulk.commit_group"]()

    @T.macro
    def store_rows(C, acc, tm, tn, row0, lt):
        # past a ragged edge (pred_m, pred_n) a store is skipped (its accumulators hold the
        # products of TMA's zero fill)
        for a in T.unroll(atoms):
            for jj in T.unroll(BN // 8):
                row = T.meta_var(tm * BM + row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4)
                col = T.meta_var(tn * BN + jj * 8 + lt % 4 * 2)
                v = T.meta_var(a * half_n + jj * 4)
                for h in T.unroll(2):  # rows row and row + 8
                    if (not pred_m or row + h * 8 < M) and (not pred_n or col < N):
                        if adds and vec_store:  # split K: the pair added (N even)
                            T.ptx["red.global.add.v2.f32"](T.address_of(C[row + h * 8, col]),
                                                           acc[v + h * 2], acc[v + h * 2 + 1])
                        elif adds:
                            T.ptx["red.global.add.f32"](T.address_of(C[row + h * 8, col]),
                                                        acc[v + h * 2])
                            if not pred_n1 or col + 1 < N:
                                T.ptx["red.global.add.f32"](
                                    T.address_of(C[row + h * 8, col + 1]), acc[v + h * 2 + 1])
                        elif vec_store and store_pair is None:  # N even (v2_stores_need_even_n)
                            T.ptx["st.global.v2.f32"](T.address_of(C[row + h * 8, col]),
                                                      acc[v + h * 2], acc[v + h * 2 + 1])
                        elif vec_store:
                            store_pair(T.address_of(C[row + h * 8, col]), acc[v + h * 2],
                                       acc[v + h * 2 + 1])
                        elif scalar_pair is not None:  # 16-bit, 2 bytes a store
                            scalar_pair(T.address_of(C[row + h * 8, col]),
                                        T.address_of(C[row + h * 8, col + 1]), acc[v + h * 2],
                                        acc[v + h * 2 + 1], not pred_n1 or col + 1 < N)
                        else:
                            C[row + h * 8, col] = T.cast(acc[v + h * 2], out_dtype)
                            if not pred_n1 or col + 1 < N:
                                C[row + h * 8, col + 1] = T.cast(acc[v + h * 2 + 1], out_dtype)

    return store_box, store_rows
