"""Space v3 for conv2d: the Hopper template (``_hopper_kernel``) as an implicit GEMM, with TMA
gathering the im2col operand from a 4-D tensor map over the NHWC input.

The convolution Y[N, OH, OW, K] = X[N, H, W, C] * W[K, R, S, C] (stride 1, any padding and
dilation) is the matmul Y[(n, oh, ow), k] = sum over (r, s, c) of A[(n, oh, ow), (r, s, c)]
W[k, (r, s, c)] (``_conv.py``). The kernel is the GEMM's, one body (``_hopper_kernel.device_body``:
producer warpgroup issuing TMA into a ring of stages, 1-2 consumer warpgroups issuing wgmma,
cooperative or ping-pong, persistent grid with grouped raster, setmaxnreg, the three
epilogues); what differs is where the operands and the output come from, the body's hooks
(``_hopper_kernel.Operands``) that :func:`kernel` makes:

- **B** (the weights seen as [K, R*S*C], K-major) is the GEMM's B: a 2-D tensor map, boxes of
  BN rows x BK columns. With the k blocks in (r, s, c-block) order, c-block innermost, and
  C % BK == 0 (constraint ``c_block_within_tap``), k block kb is simply columns kb*BK.. of it.
- **A** (the im2col of X) never exists in memory. A CTA's BM rows are a *pixel tile*: a box of
  ``tile_n x tile_h x tile_w`` output pixels (tile_n = BM / (tile_h x tile_w) images, rows
  oh0.., columns ow0..). For k block kb = (r, s, cb), one TMA load of X's 4-D tensor map
  (dims innermost first C, W, H, N; box [BK, tile_w, tile_h, tile_n]) at coordinates
  (cb*BK, ow0 + s*dil - pad, oh0 + r*dil - pad, n0) reads, for each pixel of the tile, the BK
  channels its tap (r, s) sees: with stride 1 the pixels of a rectangle read a rectangle of X
  shifted by the tap. TMA writes the box innermost first, so shared-memory row j of the stage
  is pixel (j // (tile_h tile_w), j // tile_w % tile_h, j % tile_w) of the tile, BK channels
  (128 or 64 bytes, swizzled by address exactly as the GEMM's 2-D box: the wgmma descriptors
  are unchanged). Padding is TMA's out-of-bounds zero fill: a coordinate below 0 or past the
  edge (in any of the four dimensions) reads zeros, so the taps over the border cost nothing.
- **Pixel tiles may be ragged**: the output is tiled by ceil(OW / tile_w) x ceil(OH / tile_h)
  x ceil(N / tile_n) tiles; a tile's rows past an edge compute junk (zeros or real pixels of
  the next positions, never stored). ``pixel_fraction`` (derived) is the useful share of the
  rows computed: 14 x 14 images (ResNet stage 4) cannot be cut into rectangles of 64 k pixels,
  so some rows are always wasted there (0.875 at best with 128-row tiles, e.g. 16 images x
  2 rows x 4 columns); 28 x 28 and 56 x 56 tile exactly. TMA's im2col mode (pixels counted
  linearly across rows and images, as CUTLASS's sm90 conv does) would not waste them; TVM has
  no host encoder for it and it is not used here.
- **Y** is C of a [N*OH*OW, K] matrix. The direct epilogues (v2, scalar) compute each
  accumulator row's pixel, skip rows past an edge, and store at row (n*OH + oh)*OW + ow. The
  tma epilogue stores through a 4-D tensor map over Y (dims K, OW, OH, N): a consumer's m64
  atom is 64 consecutive rows of the pixel tile, which (tile_w, tile_h powers of two) is a
  sub-box [32 channels, bw, bh, bn] of it (:func:`atom_box`); TMA clips it at Y's edges.

Not covered (refused by :func:`check_workload`, by name): stride > 1 (the pixels of a tile
would read every stride-th element: TMA's elementStrides or im2col mode, neither used yet),
C not a multiple of 32 (a k block of BK channels must stay inside one tap: BK is 32 or 64 for
the 64- or 128-byte swizzle), dtypes other than fp16:fp32. conv1d, conv3d, the transposed and
the conv2d_dilated operators stay on v1/v2 (conv2d's own dilation field is covered: a tap's
shift is s*dil, the box is unchanged).

This module holds the conv geometry and its coordinate helpers (the kernel's hooks use them, and
the tests' numpy simulation), the space (the GEMM's knobs and constraints over the implicit GEMM,
plus the pixel tile's) and :func:`kernel`, the conv's prim_func (X, the weights, Y and their
tensor maps) around the shared body.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from bocast.operator import WorkloadError
from bocast.space import Categorical, Constraint, Knob, Ordinal, Space

from . import _hopper_kernel as hk
from . import _hopper_matmul as hm
from ._hopper_layout import DTYPE_BYTES, EPI_COLS, SWIZZLE, encode_args, tensor_map

#: pixel-tile extents along OW and OH (powers of two: a 64-row wgmma atom is then a sub-box of
#: the tile, see :func:`atom_box`); tile_n = BM / (tile_h x tile_w) is derived
TILE_CHOICES = (1, 2, 4, 8, 16, 32, 64)
#: the smallest k block (64-byte swizzle): C must be a multiple of it
MIN_BK = 32


@dataclass(frozen=True)
class ConvGeometry:
    """The extents of a stride-1 conv2d: X[N, H, W, C], weights [K, R, S, C], Y[N, OH, OW, K]."""

    N: int
    H: int
    W: int
    C: int
    K: int
    R: int
    S: int
    pad: int
    dil: int
    OH: int
    OW: int

    @classmethod
    def of(cls, op) -> ConvGeometry:
        (H, W), (R, S), (OH, OW) = op.size, op.ksize, op.out
        return cls(op.N, H, W, op.C, op.K, R, S, op.pad, op.dilation, OH, OW)

    @property
    def M(self) -> int:
        return self.N * self.OH * self.OW


def check_workload(op) -> None:
    """What the conv template implements, refused by name otherwise."""
    what = f"{op.name}: space v3 (Hopper TMA + wgmma implicit GEMM)"
    if op.stride != 1:
        raise WorkloadError(f"{what} implements stride 1 only (a tile's pixels would read every "
                            f"stride-th input element: TMA elementStrides or im2col mode, not "
                            f"used yet), got stride {op.stride}; use space v2")
    if op.in_dtype != "float16" or op.out_dtype != "float32":  # fp16:fp16 (bf16: _conv's)
        raise WorkloadError(f"{what} implements fp16:fp32 only; use space v2")
    if op.C % MIN_BK:
        raise WorkloadError(f"{what} needs C % {MIN_BK} == 0 (a k block of BK = 32 or 64 "
                            f"channels stays inside one tap), got C = {op.C}; use space v2")


def knobs(spec) -> list[Knob]:
    # the conv kernel has no thread-block clusters yet: the GEMM's cluster knob keeps one value
    return [Categorical("cluster", ("1x1",), default="1x1", doc="no clusters for conv2d yet")
            if k.name == "cluster" else k for k in hm.knobs(spec)] + [
        Ordinal("tile_w", TILE_CHOICES, doc="pixel tile: output columns (OW) per CTA tile"),
        Ordinal("tile_h", TILE_CHOICES, doc="pixel tile: output rows (OH) per CTA tile; "
                                            "BM / (tile_h x tile_w) images"),
    ]


def derive(spec, g: ConvGeometry):
    base = hm.derive(spec)

    def run(c):
        out = base(c)
        bm, tw, th = c["bm"], c["tile_w"], c["tile_h"]
        whole = bm % (tw * th) == 0
        tn = np.where(whole, bm // np.maximum(tw * th, 1), 1)  # images per tile
        tiles_m = -(-g.N // tn) * -(-g.OH // th) * -(-g.OW // tw)
        tiles = tiles_m * -(-g.K // c["bn"])
        out.update(tile_n=tn, tiles_m=tiles_m, tiles=tiles,
                   pixel_fraction=g.M / (tiles_m * bm),
                   wave_efficiency=hm.wave_efficiency(g.M * g.K, tiles, bm, c["bn"]),
                   k_blocks=g.R * g.S * -(-g.C // c["bk"]))
        return out

    return run


def constraints(spec, g: ConvGeometry) -> list[Constraint]:
    raster_doc = ("raster groups whole block rows: it divides the number of pixel tiles "
                  "(ceil(N / tile_n) x ceil(OH / tile_h) x ceil(OW / tile_w)) (raster_major "
                  "m), or whole block columns: it divides ceil(K / BN) (n)")
    gemm = [dataclasses.replace(c, doc=raster_doc) if c.name == "raster_divides_block_rows"
            else c for c in hm.constraints(spec)]
    return [
        Constraint("c_block_within_tap",
                   f"a k block's BK channels stay inside one tap (r, s): C ({g.C}) % BK == 0, "
                   "so k block kb is (r, s, c-block) and columns kb x BK of the weights",
                   lambda c: g.C % c["bk"] == 0),
        Constraint("pixel_tile_divides_bm",
                   "the pixel tile is whole images' rectangles: tile_h x tile_w divides BM "
                   "(tile_n = BM / (tile_h x tile_w) images)",
                   lambda c: c["bm"] % (c["tile_w"] * c["tile_h"]) == 0),
        Constraint("pixel_tile_within_output",
                   f"no pixel-tile extent is twice the output's or more (tile_w < 2 OW = "
                   f"{2 * g.OW}, tile_h < 2 OH = {2 * g.OH}, tile_n < 2 N = {2 * g.N}; tile_n "
                   "may be more where the tile already holds whole images, tile_w >= OW and "
                   "tile_h >= OH): such a tile's second half would be rows past the edge in "
                   "every tile",
                   lambda c: (c["tile_w"] < 2 * g.OW) & (c["tile_h"] < 2 * g.OH)
                   & ((c["tile_n"] < 2 * g.N)
                      | ((c["tile_w"] >= g.OW) & (c["tile_h"] >= g.OH)))),
        *gemm,
    ]


def space(op) -> Space:
    """conv2d's v3 space: the GEMM template's knobs and constraints over the implicit GEMM
    (M = N*OH*OW, N = K, K = R*S*C), plus the pixel tile's."""
    check_workload(op)
    spec, g = op.matmul, ConvGeometry.of(op)
    return Space(knobs(spec), constraints(spec, g), derive(spec, g))


build_options = hm.build_options


# --------------------------------------------------------------- coordinates (kernel and tests)
# Each helper takes TIR expressions in the kernel and ints in the tests (the numpy simulation in
# tests/spaces/test_hopper_conv.py runs them against a direct convolution).


def tile_counts(g: ConvGeometry, tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """Pixel tiles along N, OH, OW for a (tile_n, tile_h, tile_w) tile (ceil: ragged edges)."""
    tn, th, tw = tile
    return -(-g.N // tn), -(-g.OH // th), -(-g.OW // tw)


def tile_origin(tm, g: ConvGeometry, tile: tuple[int, int, int]):
    """(n0, oh0, ow0): the first output pixel of pixel tile ``tm`` (images outermost, then
    rows, then columns; the raster walks tm like the GEMM's block rows)."""
    tn, th, tw = tile
    _, tiles_h, tiles_w = tile_counts(g, tile)
    return tm // (tiles_h * tiles_w) * tn, tm // tiles_w % tiles_h * th, tm % tiles_w * tw


def a_coords(kb, origin, g: ConvGeometry, bk: int):
    """TMA coordinates (c, w, h, n) of X's box for k block ``kb`` = (r, s, c-block) of the pixel
    tile at ``origin``: the tile's pixels shifted by the tap (negative or past the edge: TMA's
    zero fill is the padding)."""
    cbs = g.C // bk
    r, s, cb = kb // (g.S * cbs), kb // cbs % g.S, kb % cbs
    n0, oh0, ow0 = origin
    return cb * bk, ow0 + s * g.dil - g.pad, oh0 + r * g.dil - g.pad, n0


def row_pixel(row, origin, tile: tuple[int, int, int]):
    """(n, oh, ow): the output pixel of row ``row`` of the tile (its row in shared memory, where
    TMA put the box's elements innermost first)."""
    _, th, tw = tile
    n0, oh0, ow0 = origin
    return n0 + row // (th * tw), oh0 + row // tw % th, ow0 + row % tw


def out_row(pixel, g: ConvGeometry):
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


def conv_tensor_maps(g: ConvGeometry, BM: int, BN: int, BK: int, tile, tma_store: bool) -> dict:
    """The kernel's tensor maps (the runner encodes each from its tensor's pointer): X's 4-D
    box over the pixel tile, the weights' 2-D [K, R*S*C] boxes, and for the tma epilogue Y's
    4-D store box of one atom."""
    tn, th, tw = tile
    f16 = DTYPE_BYTES["float16"]
    maps = {"X_map": {"tensor": "X", "dtype": "float16", "dims": [g.C, g.W, g.H, g.N],
                      "strides": [g.C * f16, g.W * g.C * f16, g.H * g.W * g.C * f16],
                      "box": [BK, tw, th, tn], "swizzle": SWIZZLE[BK * f16]},
            "W_map": tensor_map("W", g.K, g.R * g.S * g.C, BN, BK)}
    if tma_store:
        bn, bh, bw = atom_box(tile)
        f32 = DTYPE_BYTES["float32"]
        maps["Y_map"] = {"tensor": "Y", "dtype": "float32", "dims": [g.K, g.OW, g.OH, g.N],
                         "strides": [g.K * f32, g.OW * g.K * f32, g.OH * g.OW * g.K * f32],
                         "box": [EPI_COLS, bw, bh, bn],
                         "swizzle": SWIZZLE[EPI_COLS * f32]}
    return maps


# ------------------------------------------------------------------------------------ kernel


def schedule(op, config) -> hk.TirxKernel:
    return kernel(ConvGeometry.of(op), config)


def kernel(g: ConvGeometry, config) -> hk.TirxKernel:
    from tvm.script import tirx as T

    BM, TW, TH = int(config["bm"]), int(config["tile_w"]), int(config["tile_h"])
    TN = BM // (TW * TH)
    assert TN * TH * TW == BM, "pixel_tile_divides_bm"
    pix_tile = (TN, TH, TW)
    # the implicit GEMM over whole pixel tiles (rows past the output's edge are computed, never
    # stored), the output channels and the (r, s, c) reduction
    p = hk.Plan(config, int(np.prod(tile_counts(g, pix_tile))) * BM, g.K, g.R * g.S * g.C)
    BN, BK, atoms, half_n, vec_store = p.BN, p.BK, p.atoms, p.half_n, p.vec_store
    assert g.C % BK == 0, "c_block_within_tap"
    # rows past a ragged edge of the pixel tiling are computed but not stored
    rag_n, rag_h, rag_w = g.N % TN != 0, g.OH % TH != 0, g.OW % TW != 0
    N_, OH, OW, Kout = g.N, g.OH, g.OW, g.K
    pred_k = Kout % BN != 0  # ragged output channels (the GEMM's ragged N)
    pred_k1 = Kout % 2 != 0
    tma_st = "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
    maps = conv_tensor_maps(g, BM, BN, BK, pix_tile, p.tma_store)
    x_tma, w_tma = encode_args(maps["X_map"]), encode_args(maps["W_map"])
    y_tma = encode_args(maps["Y_map"]) if p.tma_store else []

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
                        if vec_store:  # K even (v2_stores_need_even_n)
                            T.ptx["st.global.v2.f32"](T.address_of(Y[m, col]), acc[v], acc[v + 1])
                        else:
                            Y[m, col] = acc[v]
                            if not pred_k1 or col + 1 < Kout:
                                Y[m, col + 1] = acc[v + 1]

    body = hk.device_body(p, hk.Operands(a_coords=x_coords, a_rank=4, store_box=store_box,
                                         store_rows=store_rows))

    @T.prim_func
    def main(X_ptr: T.handle, W_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, (g.N, g.H, g.W, g.C), "float16", align=16)
        Wt = T.match_buffer(W_ptr, (Kout, g.R * g.S * g.C), "float16", align=16)
        Y = T.match_buffer(Y_ptr, (g.M, Kout), "float32", align=16)
        X_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", X_map, "float16", 4, X.data, *x_tma)
        W_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", W_map, "float16", 2, Wt.data, *w_tma)
        if p.tma_store:
            Y_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.call_packed("runtime.cuTensorMapEncodeTiled", Y_map, "float32", 4, Y.data,
                          *y_tma)
        T.device_entry()
        body(X_map, W_map, Y, Y_map if p.tma_store else None, None, None)

    return p.kernel(main, maps)


def describe_config(g: ConvGeometry, config: Any) -> str:
    """One line on a configuration's pixel tiling (for logs and the ladder)."""
    tw, th = int(config["tile_w"]), int(config["tile_h"])
    tn = int(config["bm"]) // (tw * th)
    counts = tile_counts(g, (tn, th, tw))
    used = g.M / (int(np.prod(counts)) * int(config["bm"]))
    return (f"pixel tile {tn}x{th}x{tw} (n x h x w), {counts[0]}x{counts[1]}x{counts[2]} tiles, "
            f"{used:.3f} of the rows useful")

