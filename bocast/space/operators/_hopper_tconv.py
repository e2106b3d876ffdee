"""Space v3 for conv2d_transpose: the Hopper template (``_hopper_kernel``) over the stride x
stride *phases* of the transposed convolution, each a stride-1 convolution of X with a
sub-kernel of the weights (sub-pixel or phase decomposition: no zero insertion, no multiply by
the zeros between input pixels that v2's implicit GEMM performs).

The index map (``_conv.Conv._source``, per spatial dimension; stride s, pad p, dilation 1):
output o reads input i through tap r where i s = o + p - r. Write o = s q + ph, phase ph in
[0, s). Then r must be congruent to ph + p mod s: r = r0 + s t with r0 = (ph + p) mod s, and
i = q + off - t with off = (ph + p) // s (exact: ph + p - r0 is a multiple of s). So the outputs
of phase (ph, pw), Y[n, s qh + ph, s qw + pw, k], are

    sum over (th, tw, c) of  X[n, qh + off_h - th, qw + off_w - tw, c]
                             x W[k, r0_h + s th, r0_w + s tw, c]

a stride-1 correlation with reversed taps; X outside [0, H) x [0, W) reads zero (padding).
:func:`phase_of` gives (r0, off). Phase ph has ceil((R - r0) / s) taps of its own along R: for
4 x 4 stride 2 every phase has 2 x 2, for 3 x 3 stride 2 the phases have 2 x 2, 2 x 1, 1 x 2 and
1 x 1 (and for R < s some have none: their outputs are zero).

Per-phase K extent: the body's units all run KB = Th x Tw x C / BK k blocks, ``Th x Tw =
ceil(R / s) x ceil(S / s)`` (the ring's stage and parity are counted as unit x KB + kb), and a
phase with fewer taps *skips* the k blocks past its own (``Operands.k_count``: its taps first, in
row-major order over its own Th x Tw, then the skipped ones): the producer loads nothing for
them and arrives on the stage's full barrier with no bytes; the consumers' wgmma loop runs the
live k blocks only (a runtime loop bound: a branch around the wgmma made ptxas serialize them,
C7520), then a second loop waits for the skipped stages and releases them. A skipped k block
costs a barrier round trip, not a k block's loads and MMAs; derived column ``tap_fraction`` is
the share of k block slots that are real taps (1.0 for a kernel size a multiple of the stride,
the decoders' 4 x 4 / 2 and 2 x 2 / 2, where nothing is skipped and the kernel has no test;
0.5625 for 3 x 3 / 2). A phase with no
tap of its own runs one, tap 0, whose weights lie past R (or S): TMA's out-of-bounds fill of
W's 4-D map over [K, R, S, C] makes them zero.

The kernel: the conv2d template's tiled producer (``_hopper_conv_tiled``) over the phases'
common grid of ``Qh x Qw = ceil(OH / s) x ceil(OW / s)`` sub-output pixels: a unit of the
persistent walk is (phase, pixel tile), phase outermost as bmm's batch (block row tm is phase
tm // T and pixel tile tm % T, T the pixel tiles a phase) or innermost (knob ``phase_order``:
phase tm % s^2, pixel tile tm // s^2, so the s^2 phases of a tile, which read the same input
pixels, run on neighbouring CTAs at once). For k block (th, tw, c-block)
the producer loads X's 4-D box [BK, tile_w, tile_h, tile_n] at (c, qw0 + off_w - tw, qh0 +
off_h - th, n0) (element strides 1) and W's box [BK, 1, 1, BN] at (c, r0_w + s tw, r0_h + s th,
k0): BN rows of BK channels, the same shared-memory rows the GEMM's 2-D box makes. One launch
covers every phase: s^2 launches would each be a smaller grid (a 16 x 32 x 32 decoder layer's
phase is 1/4 of the work) with its own tail wave and launch overhead, and need a runner that
launches several kernels per workload. The direct epilogues (v2, scalar) store accumulator row
(n, qh, qw) of phase (ph, pw) at Y's row (n OH + s qh + ph) OW + s qw + pw, skipping rows past
a phase's edge (s qh + ph >= OH: the phases of a ragged OH have fewer rows) or past the
pixel tiling's; the tma epilogue is not offered (Y's phase is a strided view that one 4-D map
of the tensor cannot address without a map per phase).

Not covered (refused by :func:`check_workload`, by name): dilation above 1 (a tap set
r d = ph + p mod s is then no longer one residue class of r), and what conv2d's template refuses
(C % 32 != 0, dtypes other than fp16:fp32).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from bocast.space.operators.operator import WorkloadError
from bocast.space.space import Categorical, Constraint, Knob, Space

from . import _hopper_conv as hc
from . import _hopper_conv_tiled as tiled
from . import _hopper_kernel as hk
from . import _hopper_matmul as hm
from ._hopper_layout import DTYPE_BYTES, SHALLOW_STAGES, SWIZZLE, encode_args, target_sms


def phase_of(ph, stride: int, pad: int):
    """(r0, off) of output phase ``ph`` along one dimension: its taps are r0 + stride t, and
    sub-output q reads input q + off - t through tap t (int or TIR expression ``ph``)."""
    return (ph + pad) % stride, (ph + pad) // stride


@dataclass(frozen=True)
class Phases:
    """A transposed conv2d as its stride^2 phase convolutions: X[N, H, W, C], W[K, R, S, C],
    Y[N, OH, OW, K]; ``sub`` is the phases' common stride-1 convolution geometry (output
    Qh x Qw, Th x Tw taps) that the tiled producer's helpers take."""

    N: int
    C: int
    K: int
    H: int
    W: int
    R: int
    S: int
    OH: int
    OW: int
    stride: int
    pad: int
    sms: int
    #: the walk's order (knob ``phase_order``): phase innermost (a pixel tile's phases on
    #: neighbouring units) or outermost (every pixel tile of one phase, then the next)
    phase_inner: bool = False

    @classmethod
    def of(cls, op, config=None) -> Phases:
        """The phases of the transposed conv2d ``op``, walked as ``config`` orders them."""
        (H, W), (R, S), (OH, OW) = op.size, op.ksize, op.out
        inner = config is not None and config.get("phase_order", "outer") == "inner"
        return cls(op.N, op.C, op.K, H, W, R, S, OH, OW, op.stride, op.pad,
                   target_sms(op.matmul), inner)

    @property
    def P(self) -> int:
        return self.stride * self.stride

    @property
    def taps(self) -> tuple[int, int]:
        """(Th, Tw) = (ceil(R / s), ceil(S / s)): the most taps a phase has, the k block slots
        (Th Tw C / BK) every unit runs (a phase with fewer skips the rest)."""
        return -(-self.R // self.stride), -(-self.S // self.stride)

    @property
    def sub(self) -> hc.ConvGeometry:
        s = self.stride
        return hc.ConvGeometry(self.N, self.C, self.K, (self.H, self.W), self.taps,
                               (-(-self.OH // s), -(-self.OW // s)), pad=0, dil=1, stride=1,
                               sms=self.sms)

    @property
    def padded(self) -> bool:
        """Whether some phase runs fewer taps than Th x Tw (then its k blocks past them are
        skipped): a kernel extent of at least s, not a multiple of s (below s every phase runs
        one tap, its own or a zero one)."""
        return any(r >= self.stride and r % self.stride for r in (self.R, self.S))

    @property
    def tap_fraction(self) -> float:
        """The share of the units' k block slots (phases x Th x Tw taps) that are real taps
        (each tap belongs to exactly one phase per dimension): the rest are skipped, or, for a
        phase with no tap of its own (R < s), one runs on zero weights."""
        return self.R * self.S / (self.P * int(np.prod(self.taps)))

    def spec(self, op_spec):
        """The phases' implicit GEMM as one matmul (M = phases x sub-output pixels, N = K, K =
        Th Tw C), for the GEMM template's knobs and constraints."""
        g = self.sub
        return dataclasses.replace(op_spec, M=self.P * g.M, K=g.RSC)

    # ----------------------------------------------- coordinates (ints in tests, TIR in kernel)

    def unit(self, tm, tile):
        """(ph, pw, pixel tile) of block row ``tm`` of the walk (:attr:`phase_inner`)."""
        if self.phase_inner:
            phase, t = tm % self.P, tm // self.P
        else:
            T = int(np.prod(tiled.tile_counts(self.sub, tile)))
            phase, t = tm // T, tm % T
        return phase // self.stride, phase % self.stride, t

    def phase_taps(self, ph, pw):
        """(Th, Tw) of phase (ph, pw): its own taps, at least 1 x 1 (a phase with none, R < s,
        runs one whose weights lie past R: TMA's zero fill makes its outputs zero)."""
        s, p = self.stride, self.pad
        return (_at_least_1((self.R - phase_of(ph, s, p)[0] + s - 1) // s),
                _at_least_1((self.S - phase_of(pw, s, p)[0] + s - 1) // s))

    def k_count(self, tm, tile, bk: int):
        """The k blocks of block row ``tm`` that compute, its phase's own taps' (they come
        first; the rest, up to Th Tw C / BK, are skipped): at least C / BK."""
        ph, pw, _ = self.unit(tm, tile)
        th, tw = self.phase_taps(ph, pw)
        return th * tw * (self.C // bk)

    def tap(self, kb, tm, tile, bk: int):
        """(th, tw, c-block) of k block ``kb`` of block row ``tm``: (tap, c-block) with c-block
        innermost, taps in row-major order over the phase's own Th x Tw."""
        cbs = self.C // bk
        # without padded phases every phase's own Tw is the static one (no runtime division)
        tw_ph = self.phase_taps(*self.unit(tm, tile)[:2])[1] if self.padded else self.taps[1]
        j = kb // cbs
        return j // tw_ph, j % tw_ph, kb % cbs

    def x_coords(self, kb, tm, tile, bk: int):
        """TMA coordinates (c, w, h, n) of X's box for k block ``kb`` = (th, tw, c-block) of
        block row ``tm``: the input each sub-output of the pixel tile reads through that tap."""
        ph, pw, t = self.unit(tm, tile)
        th, tw, cb = self.tap(kb, tm, tile, bk)
        n0, qh0, qw0 = tiled.tile_origin(t, self.sub, tile)
        return (cb * bk, qw0 + phase_of(pw, self.stride, self.pad)[1] - tw,
                qh0 + phase_of(ph, self.stride, self.pad)[1] - th, n0)

    def w_coords(self, kb, tm, tile, bk: int, k0):
        """TMA coordinates (c, s, r, k) of W's box for k block ``kb`` of block row ``tm`` and
        output channels from ``k0``: the phase's tap (r0 + s th, r0 + s tw), zeros past R, S."""
        ph, pw, _ = self.unit(tm, tile)
        th, tw, cb = self.tap(kb, tm, tile, bk)
        s = self.stride
        return (cb * bk, phase_of(pw, s, self.pad)[0] + s * tw,
                phase_of(ph, s, self.pad)[0] + s * th, k0)

    def out_pixel(self, row, tm, tile):
        """(n, oh, ow): the output pixel of accumulator row ``row`` of block row ``tm``."""
        ph, pw, t = self.unit(tm, tile)
        n, qh, qw = tiled.row_pixel(row, tiled.tile_origin(t, self.sub, tile), tile)
        return n, self.stride * qh + ph, self.stride * qw + pw


def _at_least_1(x):
    """max(x, 1) of an int or a TIR expression."""
    if isinstance(x, (int, np.integer)):
        return max(int(x), 1)
    import tvm

    return tvm.tirx.max(x, 1)


def check_workload(op) -> None:
    """What the phase decomposition implements, refused by name otherwise (then conv2d's
    template's own refusals: dtypes, C % 32)."""
    if op.dilation != 1:
        raise WorkloadError(f"{op.name}: space v3 (Hopper, phase decomposition) implements "
                            f"dilation 1 only, got dilation {op.dilation}; use space v2")
    if op.in_dtype != "float16" or op.out_dtype != "float32":
        raise WorkloadError(f"{op.name}: space v3 (Hopper, phase decomposition) implements "
                            "fp16:fp32 only; use space v2")
    if op.C % hc.MIN_BK:
        raise WorkloadError(f"{op.name}: space v3 (Hopper, phase decomposition) needs C % "
                            f"{hc.MIN_BK} == 0 (a k block of BK = 32 or 64 channels stays "
                            f"inside one tap), got C = {op.C}; use space v2")


def knobs(spec) -> list[Knob]:
    fixed = {"cluster": Categorical("cluster", ("1x1",), default="1x1",
                                    doc="no clusters for convs yet"),
             "epilogue": Categorical("epilogue", ("v2", "scalar"),
                                     doc="accumulators to Y as 8-byte vector stores or one "
                                         "float at a time (no tma: a phase is a strided view "
                                         "of Y)")}
    return [*(fixed.get(k.name, k) for k in hm.knobs(spec, SHALLOW_STAGES)),  # as conv2d's
            Categorical("a_load", ("tiled",), default="tiled",
                        doc="A's producer: a 4-D tiled box of a phase's pixel tile"),
            Categorical("phase_order", ("outer", "inner"), default="outer",
                        doc="the walk's units (phase, pixel tile): phase outermost (a wave "
                            "shares one phase's weights), or innermost (a pixel tile's phases "
                            "on neighbouring CTAs share its input from L2)"),
            *tiled.knobs()]


def derive(spec, g: Phases):
    base, sub = hm.derive(spec), g.sub

    def run(c):
        out = base(c)
        tn, pixel_tiles = tiled.tiles(c, sub)
        tiles_m = g.P * pixel_tiles
        tiles = tiles_m * -(-g.K // c["bn"])
        rows = g.N * g.OH * g.OW  # the real output pixels
        out.update(tile_n=tn, tiles_m=tiles_m, tiles=tiles,
                   pixel_fraction=rows / (tiles_m * c["bm"]),
                   tap_fraction=np.full_like(c["bm"], g.tap_fraction, dtype=float),
                   wave_efficiency=hm.wave_efficiency(rows * g.K, tiles, c["bm"], c["bn"],
                                                      g.sms),
                   k_blocks=int(np.prod(sub.ksize)) * -(-g.C // c["bk"]))
        return out

    return run


def constraints(spec, g: Phases) -> list[Constraint]:
    raster_doc = ("raster groups whole block rows: it divides the number of (phase, pixel "
                  "tile) units, stride^2 x ceil(N / tile_n) x ceil(Qh / tile_h) x ceil(Qw / "
                  "tile_w) (raster_major m), or whole block columns: it divides ceil(K / BN) (n)")
    gemm = [dataclasses.replace(c, doc=raster_doc) if c.name == "raster_divides_block_rows"
            else c for c in hm.constraints(spec)]
    return [
        Constraint("c_block_within_tap",
                   f"a k block's BK channels stay inside one tap: C ({g.C}) % BK == 0",
                   lambda c: g.C % c["bk"] == 0),
        *tiled.constraints(g.sub),
        *gemm,
    ]


def space(op) -> Space:
    """conv2d_transpose's v3 space: the GEMM template's knobs and constraints over the phases'
    implicit GEMM, the tiled producer's pixel tile over a phase's sub-output."""
    check_workload(op)
    g = Phases.of(op)
    spec = g.spec(op.matmul)
    return Space(knobs(spec), constraints(spec, g), derive(spec, g))


build_options = hm.build_options


# ------------------------------------------------------------------------------------ kernel


def tensor_maps(g: Phases, BK: int, BN: int, tile) -> dict:
    """X's map (the tiled producer's 4-D box over a pixel tile, element strides 1) and W's 4-D
    map over [K, R, S, C], boxes of BN rows x BK channels at one tap."""
    f16 = DTYPE_BYTES["float16"]
    x_map = tiled.tiled_maps(g.sub, BK, tile, False)["X_map"]
    w_map = {"tensor": "W", "dtype": "float16", "dims": [g.C, g.S, g.R, g.K],
             "strides": [g.C * f16, g.S * g.C * f16, g.R * g.S * g.C * f16],
             "box": [BK, 1, 1, BN], "swizzle": SWIZZLE[BK * f16]}
    return {"X_map": x_map, "W_map": w_map}


def _no_tma_store(*args):
    raise AssertionError("conv2d_transpose's v3 space offers no tma epilogue")


def schedule(op, config) -> hk.TirxKernel:
    return kernel(Phases.of(op, config), config)


def kernel(g: Phases, config) -> hk.TirxKernel:
    from tvm.script import tirx as T

    tile = tiled.pixel_tile(config)
    BM = int(config["bm"])
    sub = g.sub
    # the phases' implicit GEMM over whole pixel tiles, phase outermost
    p = hk.Plan(config, g.P * int(np.prod(tiled.tile_counts(sub, tile))) * BM, g.K, sub.RSC,
                sm_count=g.sms)
    BN, BK, atoms, half_n, vec_store = p.BN, p.BK, p.atoms, p.half_n, p.vec_store
    assert g.C % BK == 0 and not p.tma_store and p.CS == 1
    maps = tensor_maps(g, BK, BN, tile)
    x_tma, w_tma = encode_args(maps["X_map"]), encode_args(maps["W_map"])
    N_, OH, OW, Kout = g.N, g.OH, g.OW, g.K
    pred_k, pred_k1 = Kout % BN != 0, Kout % 2 != 0
    # rows past an edge (a phase's, or the pixel tiling's) exist only where one is ragged
    TN, TH, TW = tile
    rag_n = g.N % TN != 0
    rag_h = OH % g.stride != 0 or sub.OH % TH != 0
    rag_w = OW % g.stride != 0 or sub.OW % TW != 0

    @T.macro
    def store_rows(Y, acc, tm, tn, row0, lt):
        # each accumulator row's output pixel; rows past a phase's edge are not stored
        for a in T.unroll(atoms):
            for h in T.unroll(2):  # rows r and r + 8 of the atom
                px = T.meta_var(g.out_pixel(row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4 + h * 8,
                                            tm, tile))
                m = T.meta_var((px[0] * OH + px[1]) * OW + px[2])
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

    ops = hk.Operands(a_coords=lambda kb, tm: g.x_coords(kb, tm, tile, BK), a_rank=4,
                      store_box=_no_tma_store, store_rows=store_rows,
                      b_coords=lambda kb, tm, k0: g.w_coords(kb, tm, tile, BK, k0), b_rank=4,
                      k_count=(lambda tm: g.k_count(tm, tile, BK)) if g.padded else None)
    body = hk.device_body(p, ops)
    M_out = g.N * OH * OW

    @T.prim_func
    def main(X_ptr: T.handle, W_ptr: T.handle, Y_ptr: T.handle):
        X = T.match_buffer(X_ptr, (g.N, g.H, g.W, g.C), "float16", align=16)
        Wt = T.match_buffer(W_ptr, (Kout, g.R * g.S * g.C), "float16", align=16)
        Y = T.match_buffer(Y_ptr, (M_out, Kout), "float32", align=16)
        X_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", X_map, "float16", 4, X.data, *x_tma)
        W_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", W_map, "float16", 4, Wt.data, *w_tma)
        T.device_entry()
        body(X_map, W_map, Y, None, None, None)

    return p.kernel(main, maps)
