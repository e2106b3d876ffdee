"""Space v3's conv2d for every stride, padding and dilation (bocast.space.operators._hopper_conv,
its two producers: TMA's im2col mode, ``_hopper_im2col``, and the tiled box with element strides,
``_hopper_conv_tiled``).

Without a GPU, the index maps are checked against numpy: a model of what TMA's im2col load
reads (from the map's corners and traversal strides and the load's coordinates and offsets,
written from the PTX ISA's description, not from the kernel's helpers) and of a tiled load with
element strides, driven by the kernel's own coordinate helpers over the kernel's tile walk, must
reproduce a direct float64 convolution exactly, every output element written once (zero fill
included: padding, rows past M, images past N). Then: the space's constraints and refusals,
``space auto``'s choice, the runner's and an export's encoding of the im2col map, what reaches
the generated code, and static nvcc builds for sm_90a."""

import ctypes
import itertools

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_conv as hc
from bocast.space.operators import _hopper_conv_tiled as tiled
from bocast.space.operators import _hopper_im2col as im
from bocast.space.operators import _hopper_layout as hl
from bocast.space.operators import conv2d
from bocast.space.operators.operator import WorkloadError, make, make_named

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

#: a stride-2 3x3, a 1x1 stride-2 downsample and a dilated 3x3, shaped like network layers but
#: none of a network (the device script's real shapes stay out of the tests: issue 38 measures
#: shapes that are in no configuration, dataset or test)
S2_3X3 = (8, 40, 40, 128, 128, 3, 3, 2, 1, 1)
S2_1X1 = (8, 40, 40, 256, 512, 1, 1, 2, 0, 1)
DIL2 = (8, 21, 21, 256, 256, 3, 3, 1, 2, 2)
BASE = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2"}
IM2COL = {**BASE, "a_load": "im2col", "tile_w": None, "tile_h": None}
TILED = {**BASE, "a_load": "tiled", "tile_w": 4, "tile_h": 4}


def conv(shape, op="conv2d"):
    return make(op, shape, space="v3")


# ------------------------------------------------------------------------- numpy models


def im2col_load(x, m, coords, offsets):
    """What TMA's im2col load reads from x[N, *spatial, C] (PTX ISA, im2col mode): the map
    ``m`` bounds each spatial dimension's positions to lower, lower + t, ... <= extent - 1 +
    upper (t: its traversal stride; dims, corners, strides and ``offsets`` innermost first);
    the load starts at the position its ``coords`` (c, *positions, n) give (it must be a
    position of the box) and walks ``pixels`` positions innermost dimension fastest, then the
    next, then N, reading channels c .. c + ``channels`` at position + ``offsets``; zeros where
    any coordinate is outside x. Returns [pixels, channels]."""
    C, *extents, N = m["dims"]
    pos = [np.arange(lo, n + up, t) for n, lo, up, t in
           zip(extents, m["lower"], m["upper"], m["element_strides"][1:-1])]
    c0, *starts, n0 = coords
    counts = [len(p) for p in pos]  # innermost first
    start = n0
    for p, x0 in reversed(list(zip(pos, starts))):  # outermost spatial dimension first
        start = start * len(p) + list(p).index(x0)
    out = np.zeros((m["pixels"], m["channels"]))
    chans = np.arange(c0, c0 + m["channels"])
    ok_c = chans < C
    for j in range(m["pixels"]):
        q, at = start + j, []
        for p, cnt, off in zip(pos, counts, offsets):
            at.append(p[q % cnt] + off)
            q //= cnt
        if 0 <= q < N and all(0 <= a < n for a, n in zip(at, extents)):
            out[j, ok_c] = x[(q, *reversed(at))][chans[ok_c]]
    return out


def tiled_load(x, coords, box, elem):
    """TMA's tiled load with element strides: ceil(box[d] / elem[d]) elements from coords[d],
    every elem[d]-th, each dimension innermost first; zeros out of bounds. Rows: every
    dimension but the innermost, row-major."""
    idx = [coords[d] + np.arange(0, box[d], elem[d]) for d in range(x.ndim)]
    out = np.zeros(tuple(len(i) for i in reversed(idx)))
    ok = [(i >= 0) & (i < x.shape[x.ndim - 1 - d]) for d, i in enumerate(idx)]
    out[np.ix_(*[np.flatnonzero(o) for o in reversed(ok)])] = x[np.ix_(
        *[i[o] for i, o in zip(reversed(idx), reversed(ok))])]
    return out.reshape(-1, len(idx[0]))


def conv_reference(x, w, stride, pad, dil):
    """Direct convolution of any spatial rank, N*C x K*C -> N*K (channels last), float64."""
    sp = x.ndim - 2
    ks = w.shape[1:-1]
    out = [(n + 2 * pad - dil * (k - 1) - 1) // stride + 1 for n, k in zip(x.shape[1:-1], ks)]
    xp = np.pad(x, ((0, 0), *[(pad, pad)] * sp, (0, 0)))
    y = np.zeros((x.shape[0], *out, w.shape[0]))
    for taps in itertools.product(*[range(k) for k in ks]):
        win = xp[(slice(None), *[slice(r * dil, r * dil + stride * (o - 1) + 1, stride)
                                 for r, o in zip(taps, out)])]
        y += np.einsum("...c,kc->...k", win, w[(slice(None), *taps)])
    return y


def simulate(op, config, load=None):
    """The kernel's data movement in numpy: its tile walk, each k block's loads of A (the
    configuration's producer, through ``load`` if given: a stand-in for the im2col model) and
    B, the accumulation, and the stores of every row the kernel stores (im2col: rows below M;
    tiled: pixels inside the output). Returns x, w, Y and the count of writes of each element."""
    g, c = hc.ConvGeometry.of(op), op.space.complete(config)
    BM, BN, BK, G = (int(c[k]) for k in ("bm", "bn", "bk", "raster"))
    use_im2col = c["a_load"] == "im2col"
    tile = None if use_im2col else tiled.pixel_tile(c)
    maps = hc.conv_tensor_maps(g, BM, BN, BK, tile, False)
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (g.N, *g.size, g.C)).astype(np.float64)
    w = rng.integers(-3, 4, (g.K, *g.ksize, g.C)).astype(np.float64)
    y = np.full((g.M, g.K), np.nan)
    written = np.zeros(y.shape, dtype=int)
    tiles_m = -(-g.M // BM) if use_im2col else int(np.prod(hc.tile_counts(g, tile)))
    xm, wm = maps["X_map"], maps["W_map"]
    for t in range(tiles_m * -(-g.K // BN)):
        tm, tn, bn0 = hl.tile_coords(t, M=tiles_m * BM, N=g.K, BM=BM, BN=BN, G=G)
        acc = np.zeros((BM, BN))
        for kb in range(g.RSC // BK):
            if use_im2col:
                a = (load or im2col_load)(x, xm, im.load_coords(kb, tm * BM, g, BK),
                                          im.load_offsets(kb, g, BK))
            else:
                a = tiled_load(x, hc.a_coords(kb, hc.tile_origin(tm, g, tile), g, BK), xm["box"],
                               xm["element_strides"])
            b = tiled_load(w.reshape(g.K, -1), (kb * BK, bn0), wm["box"], (1, 1))
            assert a.shape == (BM, BK) and b.shape == (BN, BK)
            acc += a @ b.T
        for r in range(BM):
            if use_im2col:
                m = tm * BM + r
                if m >= g.M:
                    continue
            else:
                px = hc.row_pixel(r, hc.tile_origin(tm, g, tile), tile)
                if not (px[0] < g.N and px[1] < g.OH and px[2] < g.OW):
                    continue
                m = hc.out_row(px, g)
            cols = np.arange(tn * BN, min(tn * BN + BN, g.K))
            y[m, cols] = acc[r, :len(cols)]
            written[m, cols] += 1
    return x, w, y.reshape(g.N, *g.out, g.K), written


#: (shape N,H,W,C,K,R,S,stride,pad,dilation; configuration): stride 2 and 3, 1x1 downsamples,
#: dilation with and without stride, a 5x1 kernel (W and H corners differ), odd extents, padding
#: wider than the kernel's reach, M ragged, tiles crossing images, more output rows than one image,
#: bk 32, both producers
SIM_CASES = [
    ((2, 9, 9, 64, 64, 3, 3, 2, 1, 1), {**IM2COL, "bm": 64, "bn": 64, "consumers": 1}),
    ((4, 9, 9, 64, 64, 3, 3, 2, 1, 1), {**TILED, "bm": 64, "bn": 64, "consumers": 1}),
    ((3, 10, 7, 64, 96, 1, 1, 2, 0, 1), {**IM2COL, "bn": 64}),
    ((3, 10, 7, 64, 96, 1, 1, 2, 0, 1), {**TILED, "bm": 64, "consumers": 1, "bn": 64}),
    ((2, 9, 9, 64, 128, 3, 3, 1, 2, 2), {**IM2COL, "bm": 64, "consumers": 1, "bk": 32}),
    ((2, 11, 9, 64, 64, 3, 3, 2, 2, 2), {**IM2COL, "bm": 64, "bn": 64, "consumers": 1}),
    ((5, 11, 9, 64, 64, 3, 3, 2, 2, 2), {**TILED, "bm": 64, "bn": 64, "consumers": 1,
                                         "tile_w": 4, "tile_h": 2}),
    ((2, 12, 7, 64, 64, 5, 1, 2, 1, 1), {**IM2COL, "bn": 64}),
    ((1, 13, 13, 64, 64, 3, 3, 3, 3, 1), {**IM2COL, "bm": 64, "bn": 64, "consumers": 1}),
    ((2, 6, 6, 64, 64, 3, 3, 1, 1, 1), {**IM2COL, "bm": 64, "bn": 64, "consumers": 1,
                                        "raster": 2}),
]


#: conv1d and conv3d (im2col their only producer): strided, dilated, ragged, across images
SIM_ND = [
    ("conv1d", (3, 50, 64, 64, 3, 2, 1, 1), {**IM2COL, "bm": 64, "bn": 64, "consumers": 1}),
    ("conv1d", (2, 40, 64, 96, 5, 1, 4, 2), {**IM2COL, "bn": 64}),
    ("conv3d", (2, 5, 7, 6, 64, 64, 3, 3, 3, 1, 1, 1), {**IM2COL, "bm": 64, "bn": 64,
                                                        "consumers": 1}),
    ("conv3d", (2, 6, 9, 7, 64, 64, 3, 1, 3, 2, 2, 2), {**IM2COL, "bn": 64, "bk": 32}),
]


@pytest.mark.parametrize("op_name, shape, config",
                         [("conv2d", s, c) for s, c in SIM_CASES] + SIM_ND)
def test_the_simulated_kernel_computes_the_strided_convolution(op_name, shape, config):
    op = conv(shape, op_name)
    config = {k: v for k, v in config.items() if k in {kn.name for kn in op.space.knobs}}
    assert op.space.validate(config) == [], op.space.validate(config)
    x, w, y, written = simulate(op, config)
    assert (written == 1).all(), f"{(written == 0).sum()} unwritten, {(written > 1).sum()} twice"
    np.testing.assert_array_equal(y, conv_reference(x, w, op.stride, op.pad, op.dilation))


def test_the_im2col_map_is_the_one_checked_on_an_h200():
    """hopper-next.md a.5: NHWC 2x9x9 input, 3x3, stride 2, pad 1, dilation 2 ran on an H200
    with corners {-1, -1} / {-3, -3}, element strides {1, 2, 2, 1}, coordinates (0, -1, -1, 0)
    for the first pixel and offsets (2 s, 2 r): ours are the same."""
    g = hc.ConvGeometry(2, 64, 64, size=(9, 9), ksize=(3, 3), out=(4, 4), pad=1, dil=2, stride=2)
    assert im.corners(g) == ([-1, -1], [-3, -3])
    m = im.tensor_map(g, 64, 64)
    assert m["element_strides"] == [1, 2, 2, 1] and m["pixels"] == 64 and m["channels"] == 64
    assert im.load_coords(0, 0, g, 64) == (0, -1, -1, 0)
    assert [im.load_offsets(kb, g, 64) for kb in range(9)] == [
        (2 * s, 2 * r) for r in range(3) for s in range(3)]


@pytest.mark.parametrize("break_it", ["swap_corners", "swap_offsets", "no_stride"])
def test_the_simulation_catches_a_wrong_im2col_map(break_it):
    """The check has teeth: the W and H corners (a 5x1 kernel: they differ) or offsets
    swapped, or the traversal stride left at 1, and the convolution comes out wrong (or the
    load's start is no position of the box)."""
    op = conv((2, 12, 7, 64, 64, 5, 1, 2, 1, 1))

    def broken(x, m, coords, offsets):
        m = dict(m)
        if break_it == "swap_corners":
            m["lower"], m["upper"] = m["lower"][::-1], m["upper"][::-1]
        elif break_it == "swap_offsets":
            offsets = offsets[::-1]
        else:
            m["element_strides"] = [1, 1, 1, 1]
        return im2col_load(x, m, coords, offsets)

    try:
        x, w, y, _ = simulate(op, {**IM2COL, "bn": 64}, load=broken)
    except ValueError:  # the start is not a position of the (wrong) box
        return
    assert not np.array_equal(y, conv_reference(x, w, op.stride, op.pad, op.dilation))


def test_the_packed_arguments_round_trip():
    m = im.tensor_map(hc.ConvGeometry.of(conv(S2_3X3)), 128, 64)
    assert im.parse_args(4, im.encode_args(m)) == {k: v for k, v in m.items()
                                                   if k not in ("tensor", "dtype")}
    with pytest.raises(ValueError, match="too many"):
        im.parse_args(4, [*im.encode_args(m), 1])


# ------------------------------------------------------------------------- the space


def test_the_strided_space_offers_both_producers():
    space = conv(S2_3X3).space
    assert space.knob("a_load").choices == ("tiled", "im2col")
    sample = space.sample(200, rng=0)
    assert all(space.validate(c) == [] for c in sample)
    assert {c["a_load"] for c in sample} == {"tiled", "im2col"}
    # im2col: the pixel-tile knobs are inactive (None), BM consecutive pixels a tile
    assert all(c["tile_w"] is None and c["tile_h"] is None for c in sample
               if c["a_load"] == "im2col")
    cols = space.columns([IM2COL, {**IM2COL, "bm": 256, "consumers": 2}])
    M = 8 * 20 * 20
    assert list(cols["tiles_m"]) == [-(-M // 128), -(-M // 256)]
    assert cols["pixel_fraction"][1] == pytest.approx(M / (-(-M // 256) * 256))


@pytest.mark.parametrize("shape, config, violated", [
    (S2_3X3, IM2COL, None),
    (S2_3X3, TILED, None),
    (S2_3X3, {**IM2COL, "bk": 32}, None),
    ((2, 16, 512, 64, 64, 3, 3, 8, 1, 1), {**TILED, "tile_w": 64, "tile_h": 2, "bm": 128},
     "tiled_box_within_256"),                                   # 64 x 8 input columns
    ((1, 8, 8, 64, 64, 3, 3, 1, 130, 1), IM2COL, "im2col_within_tma_limits"),  # corner -130
    ((1, 8, 8, 64, 64, 3, 3, 1, 130, 1), {**TILED, "tile_w": 8, "tile_h": 16}, None),
    ((1, 8, 8, 64, 64, 2, 2, 1, 127, 255), IM2COL, "im2col_within_tma_limits"),  # offset 255
    (S2_3X3, {**TILED, "tile_w": 64, "tile_h": 2}, "pixel_tile_within_output"),  # 64 >= 2 x 20
    ((8, 40, 40, 96, 128, 3, 3, 2, 1, 1), IM2COL, "c_block_within_tap"),  # 96 % 64
])
def test_constraints_accept_and_refuse_by_name(shape, config, violated):
    assert conv(shape).space.validate(config) == ([violated] if violated else [])


def test_the_im2col_limits_say_which_is_broken():
    geometry = hc.ConvGeometry.of
    assert "corners" in im.why_not(geometry(conv((1, 8, 8, 64, 64, 3, 3, 1, 130, 1))))
    assert "offset" in im.why_not(geometry(conv((1, 8, 8, 64, 64, 2, 2, 1, 127, 255))))
    assert im.why_not(geometry(conv((1, 8, 8, 64, 64, 2, 2, 1, 127, 254)))) is None


def test_strides_beyond_tma_and_unaligned_channels_are_refused_by_name():
    with pytest.raises(WorkloadError, match="strides up to 8"):
        conv((1, 64, 64, 64, 64, 3, 3, 9, 1, 1))
    with pytest.raises(WorkloadError, match="C % 32 == 0"):
        conv((8, 40, 40, 48, 128, 3, 3, 2, 1, 1))


def test_conv2d_dilated_takes_the_same_space():
    space = conv(DIL2, "conv2d_dilated").space
    assert space.validate(IM2COL) == [] and space.validate(TILED) == []


@pytest.mark.parametrize("op_name, shape", [(n, s) for n, s, _ in SIM_ND])
def test_conv1d_and_conv3d_take_the_im2col_producer_only(op_name, shape):
    space = conv(shape, op_name).space
    assert space.knob("a_load").choices == ("im2col",)
    assert not {"tile_w", "tile_h"} & {k.name for k in space.knobs}
    sample = space.sample(50, rng=0)
    assert len(sample) == 50 and all(space.validate(c) == [] for c in sample)


def test_space_auto_takes_v3_for_each_measured_convolution_and_v2_once_switched_off(monkeypatch):
    """Measured: strided conv2d (conv2d.AUTO_V3_STRIDED), dilated (AUTO_V3_DILATED), conv1d and
    conv3d (their AUTO_V3) on v3; each switch, turned off, gives v2 back."""
    from bocast.space.operators import conv1d, conv3d

    cases = [(conv2d, "AUTO_V3_STRIDED", "conv2d", S2_3X3), (conv2d, "AUTO_V3_STRIDED", "conv2d",
             S2_1X1), (conv2d, "AUTO_V3_DILATED", "conv2d_dilated", DIL2),
             (conv1d, "AUTO_V3", "conv1d", SIM_ND[0][1]), (conv3d, "AUTO_V3", "conv3d",
                                                            SIM_ND[2][1])]
    for _, _, name, shape in cases:
        op = make_named(name, shape)
        assert op.workload["space"] == "v3", (name, op.space_choice)
    assert make_named("conv2d", (16, 14, 14, 256, 256, 3, 3, 1, 1, 1)).workload["space"] == "v3"
    for module, flag, name, shape in cases:
        with monkeypatch.context() as m:
            m.setattr(module, flag, False)
            assert make_named(name, shape).workload["space"] == "v2", (name, flag)


# --------------------------------------------------------- host encoding and the kernel


class _Driver:
    """A stand-in for libcuda's tensor-map encoders (no GPU): records each call's values."""

    def __init__(self):
        self.calls = []

    def cuTensorMapEncodeIm2col(self, tmap, dtype, rank, ptr, dims, strides, lower, upper,
                                channels, pixels, elem, inter, swizzle, l2, oob):
        n = rank.value
        assert ctypes.sizeof(strides) == 8 * (n - 1) and ctypes.sizeof(lower) == 4 * (n - 2)
        self.calls.append({"address": tmap.value, "dtype": dtype.value, "rank": n,
                           "ptr": ptr.value, "dims": list(dims), "strides": list(strides),
                           "lower": list(lower), "upper": list(upper),
                           "channels": channels.value, "pixels": pixels.value,
                           "elem": list(elem), "interleave": inter.value,
                           "swizzle": swizzle.value, "oob": oob.value})
        return 0


def test_the_runner_and_an_export_encode_the_im2col_map_alike(monkeypatch):
    """The runner (gpu_worker.encode_tensor_map) and an exported kernel's packed encoder
    (tensor_maps.im2col_encoder, called with the host code's flat arguments) make the same
    cuTensorMapEncodeIm2col call: rank 4, dims and byte strides innermost first, the corners W
    first, BK channels of BM pixels, element strides (1, stride, stride, 1), zero fill."""
    from bocast.measure import gpu_worker, tensor_maps

    driver = _Driver()
    monkeypatch.setattr(gpu_worker, "_driver", lambda: driver)
    g = hc.ConvGeometry.of(conv(S2_3X3))
    m = hc.conv_tensor_maps(g, 128, 128, 64, None, True)["X_map"]
    assert im.corners(g) == ([-1, -1], [-2, -2])  # last position (20 - 1) x 2 - 1 = 39 - 2
    tmap = gpu_worker.encode_tensor_map(m, 0x10000, "float16")
    runner = driver.calls[-1]
    assert runner == {"address": tmap.address, "dtype": 6, "rank": 4, "ptr": 0x10000,
                      "dims": [128, 40, 40, 8], "strides": [256, 256 * 40, 256 * 40 * 40],
                      "lower": [-1, -1], "upper": [-2, -2], "channels": 64, "pixels": 128,
                      "elem": [1, 2, 2, 1], "interleave": 0, "swizzle": 3, "oob": 0}
    encoder = tensor_maps.im2col_encoder(lambda: driver)
    encoder(ctypes.c_void_p(0x2000), "float16", 4, ctypes.c_void_p(0x10000),
            *im.encode_args(m))
    assert driver.calls[-1] == {**runner, "address": 0x2000}
    # a conv3d's rank-5 map: three corners each, dims and strides innermost first
    g3 = hc.ConvGeometry.of(conv((2, 6, 9, 7, 64, 64, 3, 1, 3, 2, 2, 2), "conv3d"))
    m3 = im.tensor_map(g3, 128, 64)
    gpu_worker.encode_tensor_map(m3, 0x10000, "float16")
    encoder(ctypes.c_void_p(0x2000), "float16", 5, ctypes.c_void_p(0x10000),
            *im.encode_args(m3))
    assert driver.calls[-2]["rank"] == 5 and driver.calls[-1] == {**driver.calls[-2],
                                                                  "address": 0x2000}
    assert driver.calls[-1]["dims"] == [64, 7, 9, 6, 2] and driver.calls[-1]["lower"] == [-2] * 3
    assert driver.calls[-1]["strides"] == [128, 128 * 7, 128 * 7 * 9, 128 * 7 * 9 * 6]
    assert driver.calls[-1]["elem"] == [1, 2, 2, 2, 1]


def test_the_im2col_kernel_loads_im2col_boxes_and_stores_rows():
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    op = conv(S2_3X3)
    for config in (IM2COL, {**IM2COL, "epilogue": "tma"}):
        sch = op.apply(config)
        assert im.ENCODER in sch.mod.script()  # the host code encodes X's map through ours
        low = lower_tirx(sch, target_overrides=op.build_options(config)["target"])
        assert low.tensor_maps["X_map"]["mode"] == "im2col"
        assert ".global.im2col.mbarrier::complete_tx::bytes" in low.source
        assert low.grid == (25, 1, 1) and low.dynamic_smem == 4 * 256 * 64 * 2 + (
            2 * hl.EPI_SMEM_PER_CONSUMER if config["epilogue"] == "tma" else 0)
    # the tma epilogue stores the rows of Y as [N*OH*OW, K] through a 2-D map
    assert low.tensor_maps["Y_map"]["dims"] == [128, 8 * 20 * 20]
    tiled_low = lower_tirx(op.apply(TILED), target_overrides={"arch": "sm_90a"})
    assert tiled_low.tensor_maps["X_map"]["element_strides"] == [1, 2, 2, 1]
    assert tiled_low.tensor_maps["X_map"]["box"] == [64, 8, 8, 8]
    assert ".im2col." not in tiled_low.source


# --------------------------------------------------------------------- static builds


@needs_nvcc
def test_a_sample_of_the_strided_space_builds_for_sm_90a_without_spills():
    """Three random configurations of the stride-2 space (seed 0), a dilated im2col kernel with
    the tma epilogue, a conv1d and a conv3d one: nvcc for sm_90a, no spills, no stack, no
    serialized wgmma, the shared memory the model counts (tests.builds.check_v3_builds)."""
    from tests.builds import check_v3_builds

    check_v3_builds(conv(S2_3X3), conv(S2_3X3).space.sample(3, rng=0))
    check_v3_builds(conv(DIL2, "conv2d_dilated"), [{**IM2COL, "epilogue": "tma", "stages": 5}])
    # conv1d's rank-3 and conv3d's rank-5 im2col loads (one and three offsets)
    one = {k: v for k, v in IM2COL.items() if not k.startswith("tile_")}
    check_v3_builds(conv(SIM_ND[0][1], "conv1d"), [one])
    check_v3_builds(conv(SIM_ND[3][1], "conv3d"), [{**one, "epilogue": "tma"}])


def test_a_conv_on_v3_targets_its_gpus_sm_count():
    """As GEMM's: a 114-SM H100 PCIe gets its own persistent grid and waves (a conv's workload
    names the count only when it is not 132, so every workload recorded before keeps its
    identity), for both producers' kernel plans."""
    layer = (32, 56, 56, 128, 128, 3, 3, 2, 1, 1)  # ResNet-50 layer2.0.conv2: 196+ tiles
    h200 = make("conv2d", layer, space="v3")
    pcie = make("conv2d", layer, space="v3", sm_count=114)
    assert make("conv2d", layer, space="v3", sm_count=132).workload == h200.workload
    assert pcie.workload == {**h200.workload, "sm_count": 114}
    assert (hc.ConvGeometry.of(h200).sms, hc.ConvGeometry.of(pcie).sms) == (132, 114)
    sample = [c for c in pcie.space.sample(200, rng=0) if c["persistent"] == "on"]
    grids_132 = h200.space.columns(sample)["grid"]
    grids_114 = pcie.space.columns(sample)["grid"]
    assert max(grids_114) <= 114 and max(grids_132) > 114  # this layer fills more than 114
    assert (np.asarray(grids_114) == np.minimum(grids_132, 114)).all()
