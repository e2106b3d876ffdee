"""Space v3's conv2d, its tiled producer (``a_load: tiled``, ``_hopper_conv``): the pixel tiles'
coordinates, X's and Y's 4-D tiled maps and the kernel hooks (loads of a pixel tile's box,
stores pixel by pixel or atom box by atom box). Each coordinate helper takes TIR expressions in
the kernel and ints in the tests (the numpy simulation in tests/spaces/test_hopper_conv.py runs
them against a direct convolution); ``g`` is a ``_hopper_conv.ConvGeometry``."""

from __future__ import annotations

import numpy as np

from bocast.space.space import Constraint, Knob, Ordinal

from . import _hopper_im2col as im2col
from . import _hopper_kernel as hk
from . import _hopper_layout as hl
from ._hopper_layout import DTYPE_BYTES, SWIZZLE, epi_cols

#: pixel-tile extents along OW and OH (powers of two: a 64-row wgmma atom is then a sub-box of
#: the tile, see :func:`atom_box`); tile_n = BM / (tile_h x tile_w) is derived
TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64)
#: the box's extents are at most 256 elements (TMA), tile_w x stride among them
MAX_BOX = 256


def knobs() -> list[Knob]:
    """The pixel tile's knobs, active for this producer only."""
    tiled = {"a_load": ("tiled",)}
    return [Ordinal("tile_w", TILE_CHOICES, active_when=tiled,
                    doc="pixel tile: output columns (OW) per CTA tile"),
            Ordinal("tile_h", TILE_CHOICES, active_when=tiled,
                    doc="pixel tile: output rows (OH) per CTA tile; BM / (tile_h x tile_w) "
                        "images")]


def tiles(c, g):
    """(tile_n, pixel tiles) of a batch of configurations' columns (im2col's, whose tile_w and
    tile_h read as 1, are never used)."""
    bm, tw, th = c["bm"], c["tile_w"], c["tile_h"]
    tn = np.where(bm % (tw * th) == 0, bm // np.maximum(tw * th, 1), 1)  # images per tile
    return tn, -(-g.N // tn) * -(-g.OH // th) * -(-g.OW // tw)


def constraints(g) -> list[Constraint]:
    """The tiled producer's constraints (each passes an im2col configuration)."""
    def tiled(c):
        return c["a_load"] == "tiled"

    return [
        Constraint("tiled_box_within_256",
                   f"the tiled producer's box spans tile_w x stride and tile_h x stride input "
                   f"pixels (stride {g.stride}; TMA loads every stride-th), at most {MAX_BOX} "
                   "each",
                   lambda c: ~tiled(c) | ((c["tile_w"] * g.stride <= MAX_BOX)
                                          & (c["tile_h"] * g.stride <= MAX_BOX))),
        Constraint("pixel_tile_divides_bm",
                   "the tiled producer's pixel tile is whole images' rectangles: tile_h x "
                   "tile_w divides BM (tile_n = BM / (tile_h x tile_w) images)",
                   lambda c: ~tiled(c) | (c["bm"] % (c["tile_w"] * c["tile_h"]) == 0)),
        Constraint("pixel_tile_within_output",
                   f"(tiled producer) no pixel-tile extent is twice the output's or more "
                   f"(tile_w < 2 OW = {2 * g.OW}, tile_h < 2 OH = {2 * g.OH}, tile_n < 2 N = "
                   f"{2 * g.N}; tile_n may be more where the tile already holds whole images, "
                   "tile_w >= OW and tile_h >= OH): such a tile's second half would be rows "
                   "past the edge in every tile",
                   lambda c: ~tiled(c) | ((c["tile_w"] < 2 * g.OW) & (c["tile_h"] < 2 * g.OH)
                                          & ((c["tile_n"] < 2 * g.N)
                                             | ((c["tile_w"] >= g.OW) & (c["tile_h"] >= g.OH))))),
    ]


def tile_counts(g, tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """Pixel tiles along N, OH, OW for a (tile_n, tile_h, tile_w) tile (ceil: ragged edges)."""
    tn, th, tw = tile
    return -(-g.N // tn), -(-g.OH // th), -(-g.OW // tw)


def tile_origin(tm, g, tile: tuple[int, int, int]):
    """(n0, oh0, ow0): the first output pixel of pixel tile ``tm`` (images outermost, then
    rows, then columns; the raster walks tm like the GEMM's block rows)."""
    tn, th, tw = tile
    _, tiles_h, tiles_w = tile_counts(g, tile)
    return tm // (tiles_h * tiles_w) * tn, tm // tiles_w % tiles_h * th, tm % tiles_w * tw


def a_coords(kb, origin, g, bk: int):
    """TMA coordinates (c, w, h, n) of X's box for k block ``kb`` = (r, s, c-block) of the pixel
    tile at ``origin``: the input position the tile's first pixel reads through tap (r, s)
    (negative or past the edge: TMA's zero fill is the padding); the box's element strides
    step by the conv's stride from there."""
    r, s, cb = im2col.tap(kb, g, bk)
    n0, oh0, ow0 = origin
    return (cb * bk, ow0 * g.stride + s * g.dil - g.pad, oh0 * g.stride + r * g.dil - g.pad,
            n0)


def row_pixel(row, origin, tile: tuple[int, int, int]):
    """(n, oh, ow): the output pixel of row ``row`` of the tile (its row in shared memory, where
    TMA put the box's elements innermost first)."""
    _, th, tw = tile
    n0, oh0, ow0 = origin
    return n0 + row // (th * tw), oh0 + row // tw % th, ow0 + row % tw


def out_row(pixel, g):
    """Row of Y's [N*OH*OW, K] matrix of an output pixel."""
    n, oh, ow = pixel
    return (n * g.OH + oh) * g.OW + ow


def atom_box(tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """(bn, bh, bw): the sub-box of the pixel tile that 64 consecutive rows starting at a
    multiple of 64 form (the tma epilogue's store box over Y; tile_w, tile_h powers of two)."""
    _, th, tw = tile
    if tw >= 64:
        return 1, 1, 64
    if tw * th >= 64:
        return 1, 64 // tw, tw
    return 64 // (tw * th), th, tw


def tiled_maps(g, BK: int, tile, tma_store: bool) -> dict:
    """The tiled producer's maps of X (a 4-D box over the pixel tile, every stride-th input
    pixel) and, for the tma epilogue, of Y (a 4-D store box of one atom)."""
    tn, th, tw = tile
    ins, st = DTYPE_BYTES[g.in_dtype], g.stride
    maps = {"X_map": {"tensor": "X", "dtype": g.in_dtype, "dims": [g.C, g.W, g.H, g.N],
                      "strides": [g.C * ins, g.W * g.C * ins, g.H * g.W * g.C * ins],
                      "box": [BK, tw * st, th * st, tn], "element_strides": [1, st, st, 1],
                      "swizzle": SWIZZLE[BK * ins]}}
    if tma_store:  # a staging box's 128-byte rows: 32 fp32 or 64 16-bit output channels
        bn, bh, bw = atom_box(tile)
        out, cols = DTYPE_BYTES[g.out_dtype], epi_cols(g.out_dtype)
        maps["Y_map"] = {"tensor": "Y", "dtype": g.out_dtype, "dims": [g.K, g.OW, g.OH, g.N],
                         "strides": [g.K * out, g.OW * g.K * out, g.OH * g.OW * g.K * out],
                         "box": [cols, bw, bh, bn], "swizzle": SWIZZLE[cols * out]}
    return maps


def pixel_tile(config) -> tuple[int, int, int]:
    """(tile_n, tile_h, tile_w) of a configuration of the tiled producer."""
    BM, TW, TH = int(config["bm"]), int(config["tile_w"]), int(config["tile_h"])
    TN = BM // (TW * TH)
    assert TN * TH * TW == BM, "pixel_tile_divides_bm"
    return TN, TH, TW


def operands(g, config):
    """The tiled producer's plan and hooks: pixel tiles, one 4-D box of X a k block, Y stored
    pixel by pixel (direct epilogues) or atom box by atom box (tma)."""
    from tvm.script import tirx as T

    BM = int(config["bm"])
    pix_tile = TN, TH, TW = pixel_tile(config)
    # the implicit GEMM over whole pixel tiles (rows past the output's edge are computed, never
    # stored), the output channels and the (r, s, c) reduction
    p = hk.Plan(config, int(np.prod(tile_counts(g, pix_tile))) * BM, g.K, g.R * g.S * g.C,
                sm_count=g.sms, in_dtype=g.in_dtype, out_dtype=g.out_dtype)
    BN, BK, atoms, half_n, vec_store = p.BN, p.BK, p.atoms, p.half_n, p.vec_store
    assert g.C % BK == 0, "c_block_within_tap"
    # rows past a ragged edge of the pixel tiling are computed but not stored
    rag_n, rag_h, rag_w = g.N % TN != 0, g.OH % TH != 0, g.OW % TW != 0
    N_, OH, OW, Kout = g.N, g.OH, g.OW, g.K
    pred_k = Kout % BN != 0  # ragged output channels (the GEMM's ragged N)
    pred_k1 = Kout % 2 != 0
    tma_st = "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
    out_dtype = g.out_dtype
    # a 16-bit output: two accumulators rounded into one 4-byte store (fp32: st.global.v2.f32)
    store_pair = hl.store_pair(out_dtype, "global")
    scalar_pair = hl.scalar_pair(out_dtype)  # the scalar epilogue's, rounded as a pair

    def x_coords(kb, tm):  # the pixel tile's BK channels of tap (r, s): one 4-D box of X
        return a_coords(kb, tile_origin(tm, g, pix_tile), g, BK)

    @T.macro
    def store_box(Y_map, smem, tm, row0, a, col0, lt):
        # an atom's 64 rows are the sub-box atom_box(tile) of the pixel tile, stored through Y's
        # 4-D map (clipped at Y's edges)
        p0 = T.meta_var(row_pixel(row0 + a * 64, tile_origin(tm, g, pix_tile), pix_tile))
        # a box wholly past an edge stores nothing: skip it
        if lt == 0 and (not rag_n or p0[0] < N_) and (not rag_h or p0[1] < OH) and (
                not rag_w or p0[2] < OW) and (not pred_k or col0 < Kout):
            T.ptx[tma_st](T.address_of(Y_map), col0, p0[2], p0[1], p0[0], smem)
            T.ptx["cp.async.bulk.commit_group"]()

    @T.macro
    def store_rows(Y, acc, tm, tn, row0, lt):
        # each accumulator row's pixel; rows past a ragged edge are not stored
        origin = T.meta_var(tile_origin(tm, g, pix_tile))
        for a in T.unroll(atoms):
            for h in T.unroll(2):  # rows r and r + 8 of the atom
                px = T.meta_var(row_pixel(row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4 + h * 8,
                                          origin, pix_tile))
                m = T.meta_var(out_row(px, g))
                for jj in T.unroll(BN // 8):
                    col = T.meta_var(tn * BN + jj * 8 + lt % 4 * 2)
                    v = T.meta_var(a * half_n + jj * 4 + h * 2)
                    if (not rag_n or px[0] < N_) and (not rag_h or px[1] < OH) and (
                            not rag_w or px[2] < OW) and (not pred_k or col < Kout):
                        if vec_store and store_pair is None:  # K even (v2_stores_need_even_n)
                            T.ptx["st.global.v2.f32"](T.address_of(Y[m, col]), acc[v], acc[v + 1])
                        elif vec_store:
                            store_pair(T.address_of(Y[m, col]), acc[v], acc[v + 1])
                        elif scalar_pair is not None:  # 16-bit: rounded as a pair
                            scalar_pair(T.address_of(Y[m, col]), T.address_of(Y[m, col + 1]),
                                        acc[v], acc[v + 1], not pred_k1 or col + 1 < Kout)
                        else:
                            Y[m, col] = T.cast(acc[v], out_dtype)
                            if not pred_k1 or col + 1 < Kout:
                                Y[m, col + 1] = T.cast(acc[v + 1], out_dtype)

    return p, hk.Operands(a_coords=x_coords, a_rank=4, store_box=store_box,
                                store_rows=store_rows)
