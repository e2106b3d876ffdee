"""Space v3 for the direct convolutions (conv2d, conv2d_dilated, conv1d, conv3d): the Hopper
template (``_hopper_kernel``) as an implicit GEMM, with TMA gathering the im2col operand from
the channels-last input, for any stride, padding and dilation.

The convolution Y[N, OH, OW, K] = X[N, H, W, C] * W[K, R, S, C] is the matmul Y[(n, oh, ow), k] =
sum over (r, s, c) of A[(n, oh, ow), (r, s, c)] W[k, (r, s, c)] (``_conv.py``). The kernel is the
GEMM's, one body (``_hopper_kernel.device_body``: producer warpgroup issuing TMA into a ring of
stages, 1-2 consumer warpgroups issuing wgmma, cooperative or ping-pong, persistent grid with
grouped raster, setmaxnreg, the three epilogues); what differs is where the operands and the
output come from, the body's hooks (``_hopper_kernel.Operands``) that :func:`kernel` makes:

- **B** (the weights seen as [K, R*S*C], K-major) is the GEMM's B: a 2-D tensor map, boxes of
  BN rows x BK columns. With the k blocks in (r, s, c-block) order, c-block innermost, and
  C % BK == 0 (constraint ``c_block_within_tap``), k block kb is simply columns kb*BK.. of it.
- **A** (the im2col of X) never exists in memory. Two producers (knob ``a_load``) load its
  boxes, both one TMA instruction per k block into the same ring, in the same 128- or 64-byte
  swizzled rows of BK channels (the wgmma descriptors are unchanged):

  - ``im2col``: TMA's im2col mode (``_hopper_im2col``, which says how it works and why it is
    the likely faster one): a CTA's BM rows are BM consecutive output pixels (n, oh, ow), M
    counted linearly across rows and images; the load starts at the first row's pixel and
    its offsets pick the tap; stride, padding and dilation live in the map. Y is then the
    GEMM's C, a row-major [N*OH*OW, K] (``_hopper_stores.row_major_stores``).
  - ``tiled``: a 4-D tiled map (dims innermost first C, W, H, N), a CTA's rows a *pixel tile*
    of ``tile_n x tile_h x tile_w`` output pixels (tile_n = BM / (tile_h x tile_w) images, rows
    oh0.., columns ow0..). For k block kb = (r, s, cb), one box [BK, tile_w * stride, tile_h *
    stride, tile_n] at (cb*BK, ow0*stride + s*dil - pad, oh0*stride + r*dil - pad, n0) with
    element strides (1, stride, stride, 1) reads every stride-th input pixel: for each output
    pixel of the tile, the BK channels its tap (r, s) sees. TMA writes the box innermost first,
    so shared-memory row j is pixel (j // (tile_h tile_w), j // tile_w % tile_h, j % tile_w) of
    the tile. The output is tiled by ceil(OW / tile_w) x ceil(OH / tile_h) x ceil(N / tile_n)
    tiles; a tile's rows past an edge compute junk (never stored): ``pixel_fraction`` (derived)
    is the useful share (14 x 14 outputs cannot be cut into rectangles of 64 k pixels: 0.875 at
    best with 128-row tiles). The direct epilogues compute each accumulator row's pixel, skip
    rows past an edge and store at row (n*OH + oh)*OW + ow; the tma epilogue stores through a
    4-D map over Y (dims K, OW, OH, N): an m64 atom of the tile is a sub-box of it
    (:func:`atom_box`), which TMA clips at Y's edges.

  Either way padding is TMA's out-of-bounds zero fill: a coordinate below 0 or past an edge
  reads zeros, so the taps over the border cost nothing.

conv1d and conv3d are the same kernel with the im2col producer only (a rank-3 or rank-5 map,
one or three offsets; ``ConvGeometry`` is of any spatial rank); conv2d_dilated is conv2d's space.

Not covered (refused by :func:`check_workload`, by name): a stride above 8 (TMA's traversal
stride), C not a multiple of 32 (a k block of BK channels must stay inside one tap: BK is 32 or
64 for the 64- or 128-byte swizzle), a conv1d or conv3d that TMA's im2col mode cannot take (its
corner and offset limits). The transposed convolution has its own decomposition on the same
body (``_hopper_tconv``, fp16:fp32 only).

Dtypes (:data:`DTYPES`): fp16 or bf16 operands (X, the weights; wgmma ``.f16``/``.bf16``
m64nNk16, X's and the weights' maps in that type, the 16-bit element size every box and swizzle
already assumed), fp32 accumulators, an fp32 output or one in the operands' type, each pair of
accumulators rounded once into a 4-byte store, or staged as 64-column boxes of 128-byte rows
for the tma epilogue (Y's map in the output's type), as GEMM's 16-bit epilogues are. fp8 is
GEMM's only (per-tensor scales, K-major rules); the workload refuses it (``_conv``).

This module holds the conv geometry and the tiled producer's coordinate helpers (the kernel's
hooks use them, and the tests' numpy simulation), the space (the GEMM's knobs and constraints
over the implicit GEMM, plus the producer's) and :func:`kernel`, the conv's prim_func (X, the
weights, Y and their tensor maps) around the shared body.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from bocast.space.operators.operator import WorkloadError
from bocast.space.space import Categorical, Constraint, Knob, Space

from . import _hopper_conv_tiled as tiled
from . import _hopper_im2col as im2col
from . import _hopper_kernel as hk
from . import _hopper_matmul as hm
from . import _matmul as mm
from ._hopper_conv_tiled import a_coords, atom_box, out_row, row_pixel, tile_counts, tile_origin
from ._hopper_layout import (
    DEFAULT_SM_COUNT,
    EPI_ROWS,
    SHALLOW_STAGES,
    encode_args,
    epi_cols,
    target_sms,
    tensor_map,
)
from ._hopper_stores import row_major_stores

#: the tiled producer's coordinate helpers, here for the tests' simulation (one definition, in
#: ``_hopper_conv_tiled``)
__all__ = ["a_coords", "atom_box", "out_row", "row_pixel", "tile_counts", "tile_origin"]

#: the smallest k block (64-byte swizzle): C must be a multiple of it
MIN_BK = 32
#: the workload dtypes the conv template implements: 16-bit operands (wgmma k16, .f16 or
#: .bf16), fp32 accumulators, an fp32 output or one in the operands' type, rounded once at the
#: store (GEMM's 16-bit epilogues); fp8 is GEMM's only (its per-tensor scales, K-major rules)
DTYPES = {d: mm.DTYPE_PAIRS[d] for d in ("fp16:fp32", "fp16:fp16", "bf16:fp32", "bf16:bf16")}


@dataclass(frozen=True)
class ConvGeometry:
    """The extents of a convolution of 1-3 spatial dimensions: X[N, *size, C], weights
    [K, *ksize, C], Y[N, *out, K] (spatial extents outermost first: D, H, W). A conv2d's
    are also named H, W, R, S, OH, OW (the tiled producer's)."""

    N: int
    C: int
    K: int
    size: tuple[int, ...]
    ksize: tuple[int, ...]
    out: tuple[int, ...]
    pad: int
    dil: int
    stride: int = 1
    sms: int = DEFAULT_SM_COUNT  # the target GPU's SMs (the workload's sm_count)
    in_dtype: str = "float16"  # X's and the weights' type (fp16 or bf16: :data:`DTYPES`)
    out_dtype: str = "float32"  # Y's (fp32, or the inputs' 16-bit type)

    @classmethod
    def of(cls, op) -> ConvGeometry:
        return cls(op.N, op.C, op.K, tuple(op.size), tuple(op.ksize), tuple(op.out), op.pad,
                   op.dilation, op.stride, target_sms(op.matmul), op.in_dtype, op.out_dtype)

    @property
    def M(self) -> int:
        return self.N * int(np.prod(self.out))

    @property
    def RSC(self) -> int:
        """The implicit GEMM's K: every tap's C channels."""
        return int(np.prod(self.ksize)) * self.C

    # a conv2d's extents by name (the tiled producer's; IndexError for conv1d)
    @property
    def H(self) -> int:
        return self.size[-2]

    @property
    def W(self) -> int:
        return self.size[-1]

    @property
    def R(self) -> int:
        return self.ksize[-2]

    @property
    def S(self) -> int:
        return self.ksize[-1]

    @property
    def OH(self) -> int:
        return self.out[-2]

    @property
    def OW(self) -> int:
        return self.out[-1]


def check_workload(op) -> None:
    """What the conv template implements, refused by name otherwise."""
    what = f"{op.name}: space v3 (Hopper TMA + wgmma implicit GEMM)"
    if op.stride > im2col.MAX_TRAVERSAL_STRIDE:
        raise WorkloadError(f"{what} takes strides up to {im2col.MAX_TRAVERSAL_STRIDE} (TMA's "
                            f"traversal stride, both of its producers), got stride {op.stride}; "
                            "use space v2")
    # the workload checked its dtype against v3's (_conv: mm.dtype_pair, fp8 left out); one
    # v3 takes that this template does not is refused here, by name
    if (op.in_dtype, op.out_dtype) not in DTYPES.values():
        raise WorkloadError(f"{what} implements the dtypes {list(DTYPES)}, got "
                            f"{op.workload['dtype']}")
    if op.C % MIN_BK:
        raise WorkloadError(f"{what} needs C % {MIN_BK} == 0 (a k block of BK = 32 or 64 "
                            f"channels stays inside one tap), got C = {op.C}; use space v2")
    no = im2col.why_not(ConvGeometry.of(op))
    if len(op.size) != 2 and no:  # conv1d, conv3d: im2col is their only producer
        raise WorkloadError(f"{what} loads it by TMA's im2col mode only, which cannot take it: "
                            f"{no}; use space v2")


def knobs(spec, g: ConvGeometry) -> list[Knob]:
    # the conv kernel has no thread-block clusters yet: the GEMM's cluster knob keeps one value.
    # The ring stays 2-6 deep (SHALLOW_STAGES): the deep ring is for a skinny GEMM's weight
    # stream through small tiles; a convolution's implicit GEMM has thousands of rows (pixels)
    # and its best measured tiles are 128 x 128 and up (32 KB a stage at BK 64: 7 fit at most),
    # and the v3 conv datasets and exhaustive table were measured over 2-6. Extend it once the
    # GEMM's measurements show the deep ring pays
    gemm = [Categorical("cluster", ("1x1",), default="1x1", doc="no clusters for convs yet")
            if k.name == "cluster" else k for k in hm.knobs(spec, SHALLOW_STAGES)]
    if len(g.size) != 2:  # the tiled producer's pixel tiles are a conv2d's
        return [*gemm, Categorical("a_load", ("im2col",), default="im2col",
                                   doc="A's producer: TMA's im2col mode over BM consecutive "
                                       "output pixels")]
    # a_load came after the stride-1 datasets and stores were recorded: theirs read as tiled
    return [*gemm, Categorical("a_load", ("tiled", "im2col"), default="tiled",
                               doc="A's producer: a 4-D tiled box of a pixel tile (tile_w, "
                                   "tile_h), or TMA's im2col mode over BM consecutive output "
                                   "pixels"),
            *tiled.knobs()]


def derive(spec, g: ConvGeometry):
    base = hm.derive(spec)

    def run(c):
        out = base(c)
        bm = c["bm"]
        # im2col: BM consecutive output pixels a tile, only the last one ragged
        tiles_m = -(-g.M // bm)
        if len(g.size) == 2:
            tn, pixel_tiles = tiled.tiles(c, g)
            tiles_m = np.where(c["a_load"] == "im2col", tiles_m, pixel_tiles)
            out["tile_n"] = tn
        tiles = tiles_m * -(-g.K // c["bn"])
        out.update(tiles_m=tiles_m, tiles=tiles, pixel_fraction=g.M / (tiles_m * bm),
                   wave_efficiency=hm.wave_efficiency(g.M * g.K, tiles, bm, c["bn"], g.sms),
                   k_blocks=int(np.prod(g.ksize)) * -(-g.C // c["bk"]))
        return out

    return run


def constraints(spec, g: ConvGeometry) -> list[Constraint]:
    raster_doc = ("raster groups whole block rows: it divides the number of pixel tiles "
                  "(ceil(N / tile_n) x ceil(OH / tile_h) x ceil(OW / tile_w); im2col: "
                  "ceil(M / BM), M = N x output pixels) (raster_major m), or whole block "
                  "columns: it divides ceil(K / BN) (n)")
    gemm = [dataclasses.replace(c, doc=raster_doc) if c.name == "raster_divides_block_rows"
            else c for c in hm.constraints(spec)]
    sp, im2col_no = len(g.size), im2col.why_not(g)
    return [
        Constraint("c_block_within_tap",
                   f"a k block's BK channels stay inside one tap: C ({g.C}) % BK == 0, so k "
                   "block kb is (*taps, c-block) and columns kb x BK of the weights",
                   lambda c: g.C % c["bk"] == 0),
        Constraint("im2col_within_tma_limits",
                   "TMA's im2col mode takes the convolution: bounding-box corners within "
                   f"{list(im2col.CORNER_RANGE[sp])} (rank {sp + 2}), stride <= "
                   f"{im2col.MAX_TRAVERSAL_STRIDE}, tap offsets (R - 1) x dilation <= "
                   f"{im2col.MAX_OFFSET[sp]}" + (f" (here not: {im2col_no})" if im2col_no else ""),
                   lambda c: (c["a_load"] == "tiled") | (im2col_no is None)),
        *(tiled.constraints(g) if sp == 2 else []),
        *gemm,
    ]


def space(op) -> Space:
    """A convolution's v3 space: the GEMM template's knobs and constraints over the implicit
    GEMM (M = N x output pixels, N = K, K = taps x C), plus the producer's (``a_load``, and for
    conv2d the tiled producer's pixel tile)."""
    check_workload(op)
    spec, g = op.matmul, ConvGeometry.of(op)
    return Space(knobs(spec, g), constraints(spec, g), derive(spec, g))


build_options = hm.build_options


# --------------------------------------------------------------------------- tensor maps


def conv_tensor_maps(g: ConvGeometry, BM: int, BN: int, BK: int, tile, tma_store: bool) -> dict:
    """The kernel's tensor maps (the runner encodes each from its tensor's pointer): X's map
    (``tile`` None: the im2col producer's; else the tiled producer's 4-D box over the pixel
    tile, ``_hopper_conv_tiled.tiled_maps``), the weights' 2-D [K, R*S*C] boxes, and for the
    tma epilogue Y's store box of one atom (2-D over [N*OH*OW, K] rows for im2col, else 4-D)."""
    W_map = tensor_map("W", g.K, g.RSC, BN, BK, g.in_dtype)
    if tile is not None:
        maps = tiled.tiled_maps(g, BK, tile, tma_store)
        return {"X_map": maps.pop("X_map"), "W_map": W_map, **maps}
    maps = {"X_map": im2col.tensor_map(g, BM, BK), "W_map": W_map}
    if tma_store:
        maps["Y_map"] = tensor_map("Y", g.M, g.K, EPI_ROWS, epi_cols(g.out_dtype), g.out_dtype)
    return maps


# ------------------------------------------------------------------------------------ kernel


def schedule(op, config) -> hk.TirxKernel:
    return kernel(ConvGeometry.of(op), config)


def kernel(g: ConvGeometry, config) -> hk.TirxKernel:
    from tvm.script import tirx as T

    use_im2col = config.get("a_load", "tiled") == "im2col"  # before the knob: tiled
    p, ops = _im2col_operands(g, config) if use_im2col else tiled.operands(g, config)
    maps = conv_tensor_maps(g, p.BM, p.BN, p.BK, None if use_im2col else tiled.pixel_tile(config),
                            p.tma_store)
    if use_im2col:
        x_encoder, y_rank, x_tma = im2col.ENCODER, 2, im2col.encode_args(maps["X_map"])
    else:
        x_encoder, y_rank = "runtime.cuTensorMapEncodeTiled", 4
        x_tma = encode_args(maps["X_map"])
    w_tma = encode_args(maps["W_map"])
    y_tma = encode_args(maps["Y_map"]) if p.tma_store else []
    body = hk.device_body(p, ops)
    Kout, x_shape, x_rank = g.K, (g.N, *g.size, g.C), len(g.size) + 2
    ins, out = g.in_dtype, g.out_dtype

    @T.prim_func
    def main(X_ptr: T.handle, W_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, x_shape, ins, align=16)
        Wt = T.match_buffer(W_ptr, (Kout, g.RSC), ins, align=16)
        Y = T.match_buffer(Y_ptr, (g.M, Kout), out, align=16)
        X_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed(x_encoder, X_map, ins, x_rank, X.data, *x_tma)
        W_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", W_map, ins, 2, Wt.data, *w_tma)
        if p.tma_store:
            Y_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.call_packed("runtime.cuTensorMapEncodeTiled", Y_map, out, y_rank, Y.data,
                          *y_tma)
        T.device_entry()
        body(X_map, W_map, Y, Y_map if p.tma_store else None, None, None)

    return p.kernel(main, maps)


def _im2col_operands(g: ConvGeometry, config):
    """The im2col producer's plan and hooks: BM consecutive output pixels a tile (the implicit
    GEMM's rows, M ragged at the end only), one im2col load a k block, Y stored as the GEMM's
    C."""
    from tvm.script import tirx as T

    p = hk.Plan(config, g.M, g.K, g.RSC, sm_count=g.sms, in_dtype=g.in_dtype,
                out_dtype=g.out_dtype)
    assert g.C % p.BK == 0, "c_block_within_tap"
    assert im2col.why_not(g) is None, "im2col_within_tma_limits"
    store_box, store_rows = row_major_stores(p, g.M, g.K, g.out_dtype)

    def offsets(kb):  # the load's u16 offsets: the tap's shift
        return tuple(T.uint16(o) for o in im2col.load_offsets(kb, g, p.BK))

    return p, hk.Operands(
        a_coords=lambda kb, tm: im2col.load_coords(kb, tm * p.BM, g, p.BK),
        a_rank=len(g.size) + 2,
        store_box=store_box, store_rows=store_rows, a_offsets=offsets)

def describe_config(g: ConvGeometry, config: Any) -> str:
    """One line on a configuration's pixel tiling (for logs and the ladder)."""
    if config.get("a_load", "tiled") == "im2col":
        tiles = -(-g.M // int(config["bm"]))
        return (f"im2col, {tiles} tiles of {config['bm']} pixels, "
                f"{g.M / (tiles * int(config['bm'])):.3f} of the rows useful")
    tw, th = int(config["tile_w"]), int(config["tile_h"])
    tn = int(config["bm"]) // (tw * th)
    counts = tile_counts(g, (tn, th, tw))
    used = g.M / (int(np.prod(counts)) * int(config["bm"]))
    return (f"pixel tile {tn}x{th}x{tw} (n x h x w), {counts[0]}x{counts[1]}x{counts[2]} tiles, "
            f"{used:.3f} of the rows useful")

