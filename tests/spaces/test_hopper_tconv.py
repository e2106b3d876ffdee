"""Space v3's conv2d_transpose (bocast.space.operators._hopper_tconv): stride x stride phase
convolutions on the Hopper template.

Without a GPU: the phase index map (:func:`phase_of`) rebuilds torch's conv_transpose2d exactly
(every phase, odd and even sizes, output_padding, padding wider than the kernel, R < stride);
a numpy simulation of the kernel's data movement (its walk over (phase, pixel tile) units, its
TMA boxes of X and W through a model of tiled loads with zero fill, its stores) reproduces it
too, every output element written once; then the space, its refusals, ``space auto``, the
generated code, and static nvcc builds for sm_90a."""

import itertools
import re

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_conv_tiled as tiled
from bocast.space.operators import _hopper_layout as hl
from bocast.space.operators import _hopper_tconv as ht
from bocast.space.operators import conv2d_transpose
from bocast.space.operators.operator import WorkloadError, make, make_named
from tests.spaces.test_hopper_conv_strided import tiled_load

torch = pytest.importorskip("torch")
needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

#: 4x4 stride 2 (every phase 2x2 taps) and 3x3 stride 2 output_padding 1 (2x2, 2x1, 1x2, 1x1):
#: shaped like decoder layers but of no network (issue 38 measures shapes in no test)
S2_4X4 = (4, 12, 10, 64, 96, 4, 4, 2, 1, 1, 0)
S2_3X3 = (4, 11, 13, 64, 64, 3, 3, 2, 1, 1, 1)
BASE = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2", "a_load": "tiled", "tile_w": 8, "tile_h": 4}


def tconv(shape, **options):
    return make("conv2d_transpose", shape, space="v3", **options)


def torch_reference(x, w, stride, pad, output_padding):
    """torch's conv_transpose2d in float64 on channels-last arrays (X[N,H,W,C], W[K,R,S,C])."""
    y = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 0, 1, 2),
        stride=stride, padding=pad, output_padding=output_padding)
    return y.permute(0, 2, 3, 1).numpy()


# ------------------------------------------------------------------ the phase index map


@pytest.mark.parametrize("H, W, R, S, stride, pad, op", [
    (5, 6, 4, 4, 2, 1, 0), (5, 6, 3, 3, 2, 1, 1), (7, 4, 3, 5, 2, 2, 1), (4, 5, 5, 3, 3, 1, 2),
    (6, 6, 2, 2, 2, 0, 0), (5, 5, 1, 1, 2, 0, 1), (3, 4, 3, 3, 3, 0, 0), (6, 5, 4, 4, 4, 3, 1),
    (5, 7, 3, 3, 1, 1, 0), (4, 4, 3, 3, 2, 3, 0),
])
def test_the_phases_rebuild_torchs_transposed_convolution(H, W, R, S, stride, pad, op):
    """Y[n, s qh + ph, s qw + pw] = sum over taps (th, tw) of X[n, qh + off_h - th, qw + off_w
    - tw] W[r0_h + s th, r0_w + s tw], (r0, off) = phase_of(ph): numpy from the formula alone,
    each phase's sub-output filled once, against torch (float64, exact on small integers)."""
    rng = np.random.default_rng(0)
    N, C, K = 2, 3, 4
    x = rng.integers(-3, 4, (N, H, W, C)).astype(np.float64)
    w = rng.integers(-3, 4, (K, R, S, C)).astype(np.float64)
    ref = torch_reference(x, w, stride, pad, op)
    OH, OW = ref.shape[1:3]
    y = np.full(ref.shape, np.nan)
    for ph, pw in itertools.product(range(stride), repeat=2):
        (r0h, offh), (r0w, offw) = ht.phase_of(ph, stride, pad), ht.phase_of(pw, stride, pad)
        qh, qw = np.arange(ph, OH, stride) // stride, np.arange(pw, OW, stride) // stride
        sub = np.zeros((N, len(qh), len(qw), K))
        for th, tw in itertools.product(range(-(-R // stride)), range(-(-S // stride))):
            r, s = r0h + stride * th, r0w + stride * tw
            ih, iw = qh + offh - th, qw + offw - tw
            if r >= R or s >= S:
                continue  # a padded tap: zero weights
            okh, okw = (ih >= 0) & (ih < H), (iw >= 0) & (iw < W)
            win = np.zeros((N, len(qh), len(qw), C))
            win[:, np.flatnonzero(okh)[:, None], np.flatnonzero(okw)] = \
                x[:, ih[okh][:, None], iw[okw]]
            sub += win @ w[:, r, s].T
        assert np.isnan(y[:, ph::stride, pw::stride]).all()
        y[:, ph::stride, pw::stride] = sub
    np.testing.assert_array_equal(y, ref)


# -------------------------------------------------------------- the kernel's data movement


def simulate(op, config):
    """The kernel's walk in numpy: (phase, pixel tile) units in the Plan's tile order, each k
    block's boxes of X and W (the kernel's coordinates and maps, a tiled-load model with zero
    fill), the accumulation, and the stores of the rows the kernel stores."""
    c = op.space.complete(config)
    g = ht.Phases.of(op, c)
    BM, BN, BK, G = (int(c[k]) for k in ("bm", "bn", "bk", "raster"))
    tile = tiled.pixel_tile(c)
    maps = ht.tensor_maps(g, BK, BN, tile)
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, (g.N, g.H, g.W, g.C)).astype(np.float64)
    w = rng.integers(-3, 4, (g.K, g.R, g.S, g.C)).astype(np.float64)
    y = np.full((g.N, g.OH, g.OW, g.K), np.nan)
    written = np.zeros(y.shape, dtype=int)
    blocks = {True: 0, False: 0}  # k blocks computed, skipped
    tiles_m = g.P * int(np.prod(tiled.tile_counts(g.sub, tile)))
    xm, wm = maps["X_map"], maps["W_map"]
    assert xm["element_strides"] == [1, 1, 1, 1] and wm["box"] == [BK, 1, 1, BN]
    for t in range(tiles_m * -(-g.K // BN)):
        tm, tn, bn0 = hl.tile_coords(t, M=tiles_m * BM, N=g.K, BM=BM, BN=BN, G=G,
                                     major=c["raster_major"])
        acc = np.zeros((BM, BN))
        for kb in range(g.sub.RSC // BK):
            live = not g.padded or kb < g.k_count(tm, tile, BK)
            assert live or kb > 0, "the first k block computes (wgmma's scale_d 0)"
            blocks[live] += 1
            if not live:  # skipped: no loads, no wgmma
                continue
            a = tiled_load(x, g.x_coords(kb, tm, tile, BK), xm["box"], (1, 1, 1, 1))
            b = tiled_load(w, g.w_coords(kb, tm, tile, BK, bn0), wm["box"], (1, 1, 1, 1))
            assert a.shape == (BM, BK) and b.shape == (BN, BK)
            acc += a @ b.T
        for r in range(BM):
            n, oh, ow = g.out_pixel(r, tm, tile)
            if n < g.N and oh < g.OH and ow < g.OW:
                cols = np.arange(tn * BN, min(tn * BN + BN, g.K))
                y[n, oh, ow, cols] = acc[r, :len(cols)]
                written[n, oh, ow, cols] += 1
    return x, w, y, written, blocks


@pytest.mark.parametrize("shape, config", [
    (S2_4X4, {**BASE, "bn": 64}),
    (S2_3X3, {**BASE, "bm": 64, "bn": 64, "consumers": 1, "tile_w": 4, "tile_h": 4,
              "raster": 2}),
    (S2_3X3, {**BASE, "bm": 64, "bn": 64, "consumers": 1, "phase_order": "inner",
              "raster": 4}),
    (S2_4X4, {**BASE, "phase_order": "inner", "raster_major": "n"}),
    ((3, 7, 6, 64, 64, 3, 3, 2, 1, 1, 0), {**BASE, "bm": 64, "consumers": 1, "bk": 32,
                                           "tile_w": 8, "tile_h": 2, "raster_major": "n"}),
    ((2, 5, 6, 64, 64, 5, 3, 3, 2, 1, 2), {**BASE, "bm": 64, "bn": 64, "consumers": 1,
                                           "tile_w": 8, "tile_h": 8}),
    ((3, 6, 5, 64, 64, 1, 1, 2, 0, 1, 1), {**BASE, "bm": 64, "bn": 64, "consumers": 1,
                                           "tile_w": 4, "tile_h": 4}),  # phases with no tap
])
def test_the_simulated_kernel_computes_the_transposed_convolution(shape, config):
    op = tconv(shape)
    assert op.space.validate(config) == [], op.space.validate(config)
    x, w, y, written, blocks = simulate(op, config)
    assert (written == 1).all(), f"{(written == 0).sum()} unwritten, {(written > 1).sum()} twice"
    np.testing.assert_array_equal(y, torch_reference(x, w, op.stride, op.pad, op.output_padding))
    # the k blocks past a phase's own taps are skipped: the computed share is tap_fraction
    # (a phase with no tap of its own, R < s, runs one: more than R S / (s^2 Th Tw))
    g = ht.Phases.of(op)
    share = blocks[True] / (blocks[True] + blocks[False])
    if op.ksize[0] >= op.stride and op.ksize[1] >= op.stride:
        assert share == pytest.approx(g.tap_fraction)
    assert (blocks[False] > 0) == g.padded


def test_the_simulation_catches_a_wrong_phase_offset(monkeypatch):
    """The check has teeth: the weights' tap taken from the wrong phase (r0 of ph + 1)."""
    op = tconv(S2_3X3)
    good = ht.phase_of
    monkeypatch.setattr(ht, "phase_of", lambda ph, s, p: (good(ph + 1, s, p)[0], good(ph, s, p)[1]))
    x, w, y, *_ = simulate(op, {**BASE, "bm": 64, "bn": 64, "consumers": 1})
    assert not np.array_equal(y, torch_reference(x, w, op.stride, op.pad, op.output_padding))


# ----------------------------------------------------------------------------- the space


def test_the_space_and_its_derived_columns():
    op = tconv(S2_3X3)
    space = op.space
    assert space.knob("epilogue").choices == ("v2", "scalar")  # no tma store of a phase
    assert space.knob("a_load").choices == ("tiled",)
    sample = space.sample(100, rng=0)
    assert len(sample) == 100 and all(space.validate(c) == [] for c in sample)
    cols = space.columns([{**BASE, "bm": 64, "consumers": 1, "tile_w": 4, "tile_h": 4}])
    g = ht.Phases.of(op)
    assert op.out == (22, 26) and g.sub.out == (11, 13) and g.taps == (2, 2)
    # phases x ceil(N / tile_n) x ceil(11 / 4) x ceil(13 / 4), tile_n = 64 / 16 = 4 images
    assert cols["tiles_m"][0] == 4 * 1 * 3 * 4
    assert cols["tap_fraction"][0] == pytest.approx(9 / 16)
    assert cols["k_blocks"][0] == 4 * 64 // 64
    assert cols["pixel_fraction"][0] == pytest.approx(4 * 22 * 26 / (48 * 64))
    assert tconv(S2_4X4).space.columns([BASE])["tap_fraction"][0] == 1.0
    # the walk's order: block row 1 is phase (0, 1)'s first pixel tile, or phase (0, 0)'s second
    tile = (4, 4, 8)
    assert ht.Phases.of(op, {"phase_order": "inner"}).unit(1, tile) == (0, 1, 0)
    assert ht.Phases.of(op, {"phase_order": "outer"}).unit(1, tile) == (0, 0, 1)
    assert ht.Phases.of(op).unit(6, tile) == (0, 1, 0)  # 6 pixel tiles a phase: phase 1


@pytest.mark.parametrize("shape, options, match", [
    ((4, 12, 10, 64, 96, 3, 3, 2, 1, 2, 0), {}, "dilation 1 only"),
    ((4, 12, 10, 48, 96, 4, 4, 2, 1, 1, 0), {}, "C % 32 == 0"),
    (S2_4X4, {"dtype": "fp16:fp16"}, "fp16:fp32"),
])
def test_what_the_phase_decomposition_does_not_take_is_refused_by_name(shape, options, match):
    with pytest.raises(WorkloadError, match=match):
        tconv(shape, **options)


def test_constraints_refuse_by_name():
    space = tconv(S2_3X3).space
    assert space.validate({**BASE, "tile_w": 32, "tile_h": 1}) == ["pixel_tile_within_output"]
    assert space.validate({**BASE, "tile_w": 16, "tile_h": 16}) == ["pixel_tile_divides_bm"]
    assert space.validate({**BASE, "epilogue": "tma"}) != []


def test_space_auto_takes_v3_while_switched_on(monkeypatch):
    assert make_named("conv2d_transpose", S2_4X4).workload["space"] == "v3"  # measured: on
    monkeypatch.setattr(conv2d_transpose, "AUTO_V3_TRANSPOSED", False)
    assert make_named("conv2d_transpose", S2_4X4).workload["space"] == "v2"
    monkeypatch.setattr(conv2d_transpose, "AUTO_V3_TRANSPOSED", True)
    # v3 refuses dilation 2: auto falls back to v2 and says why
    op = make_named("conv2d_transpose", (4, 12, 10, 64, 96, 3, 3, 2, 1, 2, 0))
    assert op.workload["space"] == "v2" and "dilation 1 only" in op.space_choice


def test_the_kernel_loads_4d_boxes_of_x_and_w():
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    op = tconv(S2_3X3)
    low = lower_tirx(op.apply(BASE), target_overrides=op.build_options(BASE)["target"])
    assert low.tensor_maps["W_map"] == {
        "tensor": "W", "dtype": "float16", "dims": [64, 3, 3, 64],
        "strides": [128, 3 * 128, 9 * 128], "box": [64, 1, 1, 128], "swizzle": 3}
    assert low.tensor_maps["X_map"]["box"] == [64, 8, 4, 4]
    assert low.tensor_maps["X_map"]["element_strides"] == [1, 1, 1, 1]
    # one 4-D load helper, defined once and called for X's box and W's; no 2-D load of W
    loads = re.findall(r"tvm_builtin_ptx_cp_async_bulk_tensor\w*\(", low.source)
    assert len(loads) == 3 and all("tensor_4d" in f for f in loads), loads
    assert ".im2col." not in low.source
    # 3x3 stride 2 skips k blocks: a stage completed by a plain arrive on its full barrier;
    # 4x4 stride 2 skips none and has no such branch
    skip = re.compile(r"mbarrier_arrive_nocount\w*\("
                      r"tvm_builtin_cuda_cvta_generic_to_shared\(\(&\(full")
    assert skip.search(low.source)
    op4 = tconv(S2_4X4)
    assert not skip.search(lower_tirx(op4.apply(BASE), target_overrides={"arch": "sm_90a"}).source)
    # the knob phase_order reaches the kernel
    inner = {**BASE, "phase_order": "inner"}
    assert lower_tirx(op.apply(inner), target_overrides={"arch": "sm_90a"}).source != low.source
    # 4 phases x 1 x ceil(11 / 4) x ceil(13 / 8) pixel tiles of 4 images, one block column
    assert low.grid == (24, 1, 1)


@needs_nvcc
def test_a_sample_of_the_space_builds_for_sm_90a_without_spills():
    """Two random configurations of the 3x3 stride-2 space (seed 0) and the 4x4 one's base
    configuration: nvcc for sm_90a, no spills, no stack, no serialized wgmma."""
    from tests.builds import check_v3_builds

    check_v3_builds(tconv(S2_3X3), tconv(S2_3X3).space.sample(2, rng=0))
    check_v3_builds(tconv(S2_4X4), [{**BASE, "epilogue": "scalar", "regs": "24/240"}])
