"""Space v3 for conv2d (bocast.space.operators._hopper_conv): the implicit GEMM on the Hopper
template.

The coordinate math is checked without a GPU: a numpy simulation runs the kernel's own helpers
(tile walk, pixel-tile origin, TMA box coordinates, row -> pixel, output rows, the tma
epilogue's store boxes) over a model of TMA's tiled loads and stores (boxes read innermost
first, zeros out of bounds, stores clipped at the edges) and must reproduce a direct numpy
convolution exactly, every output element written once. The rest: the space's constraints,
what it refuses, what reaches the generated CUDA, and static nvcc builds for sm_90a."""


import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_conv as hc
from bocast.space.operators import _hopper_layout as hl
from bocast.space.operators.operator import WorkloadError, make

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

C5 = (16, 14, 14, 256, 256, 3, 3, 1, 1, 1)
C3 = (16, 28, 28, 128, 128, 3, 3, 1, 1, 1)
C1 = (16, 56, 56, 64, 64, 3, 3, 1, 1, 1)
C5_1X1 = (16, 14, 14, 256, 256, 1, 1, 1, 0, 1)
BASE = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2", "tile_w": 4, "tile_h": 2}


def conv(shape):
    return make("conv2d", shape, space="v3")


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


# ------------------------------------------------------------------- numpy simulation


def tma_load(x, coords, box):
    """TMA tiled load of the box at ``coords`` (both innermost dimension first) from ``x``
    (row-major, outermost first): the box's elements in shared-memory order, zero where any
    coordinate is out of bounds (negative or past the extent)."""
    rank = x.ndim
    out = np.zeros(tuple(reversed(box)), dtype=x.dtype)
    src, dst = [], []
    for d in range(rank):  # d: dimension innermost-first
        extent = x.shape[rank - 1 - d]
        idx = coords[d] + np.arange(box[d])
        ok = (idx >= 0) & (idx < extent)
        src.append(idx[ok])
        dst.append(np.flatnonzero(ok))
    out[np.ix_(*reversed(dst))] = x[np.ix_(*reversed(src))]
    return out.reshape(-1, box[0])  # rows: every dimension but the innermost, row-major


def tma_store(y, coords, box, rows, written):
    """TMA tiled store of ``rows`` (the box in shared-memory order) at ``coords``, clipped at
    ``y``'s edges; counts each element written in ``written``."""
    rank = y.ndim
    data = rows.reshape(tuple(reversed(box)))
    src, dst = [], []
    for d in range(rank):
        extent = y.shape[rank - 1 - d]
        idx = coords[d] + np.arange(box[d])
        ok = (idx >= 0) & (idx < extent)
        dst.append(idx[ok])
        src.append(np.flatnonzero(ok))
    y[np.ix_(*reversed(dst))] = data[np.ix_(*reversed(src))]
    written[np.ix_(*reversed(dst))] += 1


def conv_reference(x, w, pad, dil):
    """Direct stride-1 convolution, NHWC x OHWI -> NHWK."""
    n, h, wd, _ = x.shape
    k, r_, s_, _ = w.shape
    oh, ow = h + 2 * pad - dil * (r_ - 1), wd + 2 * pad - dil * (s_ - 1)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    y = np.zeros((n, oh, ow, k))
    for r in range(r_):
        for s in range(s_):
            win = xp[:, r * dil:r * dil + oh, s * dil:s * dil + ow, :]
            y += np.einsum("nhwc,kc->nhwk", win, w[:, r, s, :])
    return y


def simulate(op, config, grid_cap=5):
    """The kernel's data movement, in numpy, at configuration ``config``: returns Y [N, OH, OW,
    K] and how many times each element was written."""
    g = hc.ConvGeometry.of(op)
    c = config
    BM, BN, BK, NC, G = (int(c[k]) for k in ("bm", "bn", "bk", "consumers", "raster"))
    TW, TH = int(c["tile_w"]), int(c["tile_h"])
    tile = (BM // (TW * TH), TH, TW)
    maps = hc.conv_tensor_maps(g, BM, BN, BK, tile, c["epilogue"] == "tma")
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (g.N, g.H, g.W, g.C)).astype(np.float64)
    w = rng.integers(-3, 4, (g.K, g.R, g.S, g.C)).astype(np.float64)
    w2 = w.reshape(g.K, -1)  # the weights as W_map sees them
    assert maps["W_map"]["dims"] == [g.R * g.S * g.C, g.K]
    assert maps["X_map"]["dims"] == [g.C, g.W, g.H, g.N]
    y = np.full((g.N, g.OH, g.OW, g.K), np.nan)
    written = np.zeros(y.shape, dtype=int)
    y2, written2 = y.reshape(g.M, g.K), written.reshape(g.M, g.K)  # views: [N*OH*OW, K]
    tiles_m = int(np.prod(hc.tile_counts(g, tile)))
    tiles = tiles_m * -(-g.K // BN)
    grid = min(grid_cap, tiles)
    pingpong = c["arrangement"] == "pingpong"
    WM = BM if pingpong else BM // NC
    KT = g.R * g.S * g.C // BK
    for cta in range(grid):
        for i in range((tiles - cta + grid - 1) // grid):
            tm, tn, bn0 = hl.tile_coords(cta + i * grid, M=tiles_m * BM, N=g.K, BM=BM, BN=BN,
                                         G=G)
            origin = hc.tile_origin(tm, g, tile)
            acc = np.zeros((BM, BN))
            for kb in range(KT):
                a = tma_load(x, hc.a_coords(kb, origin, g, BK), maps["X_map"]["box"])
                b = tma_load(w2, (kb * BK, bn0), maps["W_map"]["box"])
                assert a.shape == (BM, BK) and b.shape == (BN, BK)
                acc += a @ b.T
            # ping-pong: one consumer takes the whole tile; cooperative: each its WM rows
            for cw in range(1 if pingpong else NC):
                row0 = 0 if pingpong else cw * WM
                for at in range(WM // 64):
                    if c["epilogue"] == "tma":
                        p0 = hc.row_pixel(row0 + at * 64, origin, tile)
                        for q in range(BN // hl.EPI_COLS):
                            col0 = tn * BN + q * hl.EPI_COLS
                            rows = acc[row0 + at * 64:row0 + at * 64 + 64,
                                       q * hl.EPI_COLS:(q + 1) * hl.EPI_COLS]
                            tma_store(y, (col0, p0[2], p0[1], p0[0]), maps["Y_map"]["box"],
                                      rows, written)
                        continue
                    for lt in range(128):  # wgmma's fragment: the kernel's row formula
                        for h in range(2):
                            r = row0 + at * 64 + lt // 32 * 16 + lt % 32 // 4 + h * 8
                            n, oh, ow = px = hc.row_pixel(r, origin, tile)
                            if not (n < g.N and oh < g.OH and ow < g.OW):
                                continue
                            m = hc.out_row(px, g)
                            for jj in range(BN // 8):
                                col = tn * BN + jj * 8 + lt % 4 * 2
                                for d in range(2):
                                    if col + d < g.K:
                                        y2[m, col + d] = acc[r, col + d - tn * BN]
                                        written2[m, col + d] += 1
    return x, w, y, written


#: (shape N,H,W,C,K,R,S,stride,pad,dilation; configuration changes): ragged pixel tiles on
#: every axis, 1 and 2 consumers, ping-pong, bk 32 and 64, raster > 1, a 1x1, a 5x1 and a
#: dilated kernel, tiles spanning images, the tma epilogue's three kinds of atom box, a tile of
#: more images than the batch has
SIM_CASES = [
    ((2, 6, 10, 64, 128, 3, 3, 1, 1, 1), dict(bm=64, bn=64, bk=32, consumers=1, tile_w=8,
                                              tile_h=4)),
    ((3, 7, 5, 96, 64, 1, 1, 1, 0, 1), dict(bm=128, bn=64, bk=32, tile_w=8, tile_h=4)),
    ((2, 9, 9, 64, 128, 3, 3, 1, 2, 2), dict(bm=64, bn=128, arrangement="pingpong", tile_w=8,
                                             tile_h=4)),
    ((3, 8, 6, 64, 192, 5, 1, 1, 2, 1), dict(bm=128, bn=64, tile_w=8, tile_h=8, raster=2)),
    ((4, 6, 6, 64, 96, 3, 3, 1, 1, 1), dict(bm=64, bn=64, consumers=1, tile_w=4, tile_h=4,
                                            raster=4)),
    ((2, 6, 10, 64, 128, 3, 3, 1, 1, 1), dict(bm=64, bn=64, consumers=1, tile_w=8, tile_h=4,
                                              epilogue="tma")),
    ((3, 7, 5, 96, 64, 3, 3, 1, 1, 1), dict(bm=128, bn=64, bk=32, tile_w=4, tile_h=8,
                                            epilogue="tma")),
    ((1, 3, 40, 64, 64, 3, 3, 1, 1, 1), dict(bm=128, bn=64, tile_w=64, tile_h=2,
                                             epilogue="tma", arrangement="pingpong")),
    ((2, 9, 9, 64, 128, 3, 3, 1, 2, 2), dict(bm=64, bn=128, arrangement="pingpong", tile_w=8,
                                             tile_h=4, epilogue="tma")),
    ((1, 3, 3, 64, 64, 3, 3, 1, 1, 1), dict(bm=64, bn=64, consumers=1, tile_w=4, tile_h=4)),
    ((1, 3, 3, 64, 64, 3, 3, 1, 1, 1), dict(bm=64, bn=64, consumers=1, tile_w=4, tile_h=4,
                                            epilogue="tma")),
]


@pytest.mark.parametrize("shape, change", SIM_CASES)
def test_the_simulated_kernel_computes_the_convolution(shape, change):
    """The kernel's coordinate helpers over a model of TMA (loads zero-filled out of bounds,
    stores clipped): the implicit GEMM equals a direct convolution exactly (small integers in
    float64), and every element of Y is written exactly once (a row past a ragged edge never)."""
    op = conv(shape)
    config = {**BASE, **change}
    assert op.space.validate(config) == [], op.space.validate(config)
    x, w, y, written = simulate(op, config)
    assert (written == 1).all(), f"{(written == 0).sum()} unwritten, {(written > 1).sum()} twice"
    np.testing.assert_array_equal(y, conv_reference(x, w, op.pad, op.dilation))


def test_the_simulation_catches_a_wrong_tap_shift():
    """The check has teeth: the same walk with the tap's shift off by one column fails."""
    op = conv((2, 6, 10, 64, 128, 3, 3, 1, 1, 1))
    config = {**BASE, **SIM_CASES[0][1]}
    real = hc.a_coords
    try:
        hc.a_coords = lambda kb, origin, g, bk: (lambda c: (c[0], c[1] + 1, c[2], c[3]))(
            real(kb, origin, g, bk))
        x, w, y, _ = simulate(op, config)
    finally:
        hc.a_coords = real
    assert not np.array_equal(y, conv_reference(x, w, op.pad, op.dilation))


def test_pixel_tiles_cover_the_output_once():
    """The pixel tiles' origins are distinct and cover N x OH x OW (ceil division: the last tile
    along an axis may reach past the edge)."""
    g = hc.ConvGeometry.of(conv(C5))
    tile = (16, 2, 4)
    counts = hc.tile_counts(g, tile)
    assert counts == (1, 7, 4)
    cover = np.zeros((g.N, g.OH, g.OW), dtype=int)
    for tm in range(int(np.prod(counts))):
        for r in range(128):
            n, oh, ow = hc.row_pixel(r, hc.tile_origin(tm, g, tile), tile)
            if n < g.N and oh < g.OH and ow < g.OW:
                cover[n, oh, ow] += 1
    assert (cover == 1).all()


@pytest.mark.parametrize("tile, box", [((2, 8, 8), (1, 8, 8)), ((1, 8, 16), (1, 4, 16)),
                                       ((16, 2, 4), (8, 2, 4)), ((4, 1, 64), (1, 1, 64)),
                                       ((3, 8, 8), (1, 8, 8)), ((12, 4, 4), (4, 4, 4))])
def test_an_atom_is_a_sub_box_of_the_pixel_tile(tile, box):
    """64 consecutive rows of the tile from a multiple of 64 are the box atom_box gives, in the
    box's own row-major order (what the tma epilogue's staging box holds)."""
    assert hc.atom_box(tile) == box
    bn, bh, bw = box
    for start in range(0, int(np.prod(tile)), 64):
        p0 = hc.row_pixel(start, (0, 0, 0), tile)
        for j in range(64):
            expect = (p0[0] + j // (bh * bw), p0[1] + j // bw % bh, p0[2] + j % bw)
            assert hc.row_pixel(start + j, (0, 0, 0), tile) == expect


# ------------------------------------------------------------------------- the space


def test_conv2d_v3_space_and_derived_columns():
    op = conv(C5)
    assert op.workload["space"] == "v3"
    assert {"tile_w", "tile_h"} <= {k.name for k in op.space.knobs}
    assert op.space.validate(BASE) == []
    cols = op.space.columns([BASE, {**BASE, "bm": 64, "consumers": 1, "tile_w": 2}])
    # 16 images x 2 rows x 4 columns: 1 x 7 x 4 pixel tiles, 2 column blocks; 196 of 224 rows
    assert list(cols["tile_n"]) == [16, 16] and list(cols["tiles_m"]) == [28, 49]
    assert list(cols["tiles"]) == [56, 98] and list(cols["k_blocks"]) == [36, 36]
    assert cols["pixel_fraction"][0] == pytest.approx(3136 / (28 * 128))
    assert cols["pixel_fraction"][1] == 1.0
    # one wave of 132 SMs either way: output elements over the slots' 56 or 98 tiles' worth
    out = 3136 * 256
    assert cols["wave_efficiency"][0] == pytest.approx(out / (132 * 128 * 128))
    assert cols["wave_efficiency"][1] == pytest.approx(out / (132 * 64 * 128))


@pytest.mark.parametrize("shape, change, violated", [
    (C5, {}, None),
    ((16, 14, 14, 96, 256, 3, 3, 1, 1, 1), {}, "c_block_within_tap"),       # 96 % 64
    ((16, 14, 14, 96, 256, 3, 3, 1, 1, 1), {"bk": 32}, None),
    (C5, {"bm": 192, "consumers": 1, "bn": 64, "tile_w": 8, "tile_h": 16},
     "pixel_tile_divides_bm"),                                               # 192 % 128
    (C5, {"bm": 192, "consumers": 1, "bn": 64, "tile_w": 4, "tile_h": 4}, None),  # 12 images
    (C5, {"tile_w": 32, "tile_h": 1}, "pixel_tile_within_output"),          # 32 >= 28
    (C5, {"tile_w": 1, "tile_h": 1, "bm": 64, "consumers": 1}, "pixel_tile_within_output"),
    (C5, {"raster": 4}, None),                                               # 28 pixel tiles
    (C5, {"raster": 8}, "raster_divides_block_rows"),                        # 28 % 8
    (C5, {"stages": 6, "bn": 256}, "shared_memory_le_227KB"),
])
def test_constraints_accept_and_refuse_by_name(shape, change, violated):
    space = conv(shape).space
    assert space.validate({**BASE, **change}) == ([violated] if violated else [])


@pytest.mark.parametrize("op_name, shape, options, message", [
    ("conv2d", (16, 14, 14, 256, 256, 1, 1, 9, 0, 1), {}, "strides up to 8"),
    ("conv2d", C5, {"dtype": "e4m3:bf16"}, "not supported"),  # fp8: GEMM's only
    ("conv2d", (16, 14, 14, 48, 256, 3, 3, 1, 1, 1), {}, "C % 32 == 0"),
    ("conv3d", (2, 8, 8, 8, 64, 64, 3, 3, 3, 1, 20, 1), {}, "im2col mode only"),  # corner
    ("conv2d_transpose", (16, 14, 14, 256, 256, 3, 3, 2, 1, 2, 1), {}, "dilation 1 only"),
])
def test_workloads_outside_the_conv_template_are_refused_by_name(op_name, shape, options,
                                                                 message):
    with pytest.raises(WorkloadError, match=message):
        make(op_name, shape, space="v3", **options)


def test_tiny_outputs_keep_a_feasible_space():
    """A 3 x 3 output of one image: no 64-row tile fits it without rows past the edge; tiles of
    whole images (tile_w >= OW, tile_h >= OH) may then take more images than there are."""
    space = conv((1, 3, 3, 64, 64, 3, 3, 1, 1, 1)).space
    one = {**BASE, "bm": 64, "bn": 64, "consumers": 1, "tile_w": 4, "tile_h": 4}
    assert space.validate(one) == []  # 4 images of 4 x 4, 9 of the 64 rows useful
    assert space.columns([one])["pixel_fraction"][0] == 9 / 64
    assert space.validate({**one, "tile_w": 2}) == ["pixel_tile_within_output"]
    assert all(space.validate(c) == [] for c in space.sample(20, rng=0))


def test_a_sample_is_feasible():
    space = conv(C3).space
    sample = space.sample(100, rng=0)
    assert all(space.validate(c) == [] for c in sample)
    assert {c["epilogue"] for c in sample} == {"v2", "scalar", "tma"}


def test_the_kernel_loads_4d_boxes_of_x_and_stores_through_a_4d_map_of_y():
    op = conv(C5)
    low = lowered(op, BASE)
    assert low.args == ("W_map", "X_map", "Y") and low.arch == "sm_90a"
    assert low.tensor_maps["X_map"] == {
        "tensor": "X", "dtype": "float16", "dims": [256, 14, 14, 16],
        "strides": [512, 14 * 512, 14 * 14 * 512], "box": [64, 4, 2, 16],
        "element_strides": [1, 1, 1, 1], "swizzle": 3}
    assert low.tensor_maps["W_map"] == {"tensor": "W", "dtype": "float16",
                                        "dims": [2304, 256], "strides": [4608],
                                        "box": [64, 128], "swizzle": 3}
    assert (low.grid, low.block, low.dynamic_smem) == ((56, 1, 1), (384, 1, 1),
                                                       4 * 256 * 64 * 2)
    src = low.source
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in src
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in src
    assert "st.global.v2.f32" in src and "wgmma.mma_async.sync.aligned.m64n128k16" in src
    tma = lowered(op, {**BASE, "epilogue": "tma"})
    assert tma.args == ("W_map", "X_map", "Y_map")
    assert tma.tensor_maps["Y_map"] == {
        "tensor": "Y", "dtype": "float32", "dims": [256, 14, 14, 16],
        "strides": [1024, 14 * 1024, 14 * 14 * 1024], "box": [32, 4, 2, 8], "swizzle": 3}
    assert "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group" in tma.source
    assert "st.global" not in tma.source


def test_the_runner_encodes_the_4d_maps_as_described(monkeypatch):
    """The runner's encoder (gpu_worker.encode_tensor_map) takes any rank: checked here against
    a stand-in for the driver's cuTensorMapEncodeTiled (no GPU): rank 4, the dims, the rank - 1
    byte strides (multiples of 16), the box (at most 256, its inner extent the swizzle's width),
    element strides 1, zero fill."""
    import ctypes

    from bocast.measure import gpu_worker

    calls = []

    class Driver:
        @staticmethod
        def cuTensorMapEncodeTiled(tmap, dtype, rank, ptr, dims, strides, box, elem, inter,
                                   swizzle, l2, oob):
            n = rank.value
            calls.append({"dtype": dtype.value, "rank": n, "ptr": ptr.value,
                          "dims": list(dims), "strides": list(strides)[:n - 1],
                          "box": list(box), "elem": list(elem), "swizzle": swizzle.value,
                          "oob": oob.value})
            assert ctypes.sizeof(strides) == 8 * (n - 1)
            return 0

    monkeypatch.setattr(gpu_worker, "_driver", lambda: Driver)
    maps = hc.conv_tensor_maps(hc.ConvGeometry.of(conv(C3)), 128, 128, 64, (8, 4, 4), True)
    for name, m in maps.items():
        gpu_worker.encode_tensor_map(m, 0x10000, m["dtype"])
        got = calls[-1]
        rank = len(m["dims"])
        assert (got["rank"], got["dims"], got["strides"], got["box"], got["swizzle"]) == \
            (rank, m["dims"], m["strides"], m["box"], m["swizzle"]), name
        assert got["elem"] == [1] * rank and got["oob"] == 0 and got["ptr"] == 0x10000
        assert all(s % 16 == 0 for s in m["strides"]) and max(m["box"]) <= 256
        assert m["box"][0] * hl.DTYPE_BYTES[m["dtype"]] == 128  # the 128-byte swizzle
    assert [c["rank"] for c in calls] == [4, 2, 4]


# --------------------------------------------------------------------- static builds

#: per ResNet-like shape, configurations the ladder times (bocast/tools/hopper_ladder.py)
BUILDS = {
    C5: [BASE, {**BASE, "bm": 64, "consumers": 1, "tile_w": 2, "stages": 6},
         {**BASE, "epilogue": "tma"}],
    C3: [{**BASE, "tile_w": 4, "tile_h": 4}, {**BASE, "bm": 64, "consumers": 1, "tile_w": 4,
                                               "tile_h": 4, "stages": 6}],
    C1: [{**BASE, "bn": 64, "tile_w": 8, "tile_h": 8, "stages": 6},
         {**BASE, "bm": 256, "bn": 64, "tile_w": 8, "tile_h": 8, "epilogue": "tma"}],
    C5_1X1: [{**BASE, "bm": 64, "consumers": 1, "tile_w": 2, "stages": 4}],
}


@needs_nvcc
@pytest.mark.parametrize("shape", list(BUILDS))
def test_conv_kernels_build_for_sm_90a_without_spills(shape):
    from tests.builds import build_configs

    op = conv(shape)
    for config in BUILDS[shape]:
        assert op.space.validate(config) == [], config
    for config, res in zip(BUILDS[shape], build_configs(op, BUILDS[shape])):
        assert res["status"] == "ok", (config, res["error"])
        f = res["features"]
        assert f["registers"] <= 255 and f.get("spill_stores", 0) == 0, (config, f)
        assert f.get("stack_bytes", 0) == 0 and not f.get("wgmma_serialized"), (config, f)
        assert f["dynamic_smem_bytes"] == op.space.columns([config])["dynamic_smem_bytes"][0]
