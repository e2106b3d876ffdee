"""Split K reduced inside a cluster (``split_reduce`` cluster, ``_hopper_cluster_split``; issue 38
item 3): a tile's k slices are the CTAs of one cluster, each stages its fp32 partial tile in its
shared memory and CTA r sums rows [r BM / S, (r + 1) BM / S) of C's tile from every CTA's
staging. The walk, the fragment -> staging map and the reduce-scatter's partition are checked by
simulating the kernel against numpy (every element once, the sum in rank order); the
constraints by name; the generated CUDA and static sm_90a builds on the CPU. The kernels'
results are checked on the GPU (experiments/device/splitk_cluster_check.sh)."""

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_cluster_split as cs
from bocast.space.operators import _hopper_swap as sw
from bocast.space.operators._hopper_plan import Plan
from bocast.space.operators.operator import get_operator, make
from tests.builds import check_v3_builds
from tests.spaces.test_hopper_split import SKINNY, lowered

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")

#: a skinny GEMM's cluster-mode kernel: one unit a CTA, no multicast, the scalar epilogue name
CLUSTER = {**SKINNY, "epilogue": "scalar", "persistent": "off", "split_reduce": "cluster"}


@pytest.mark.parametrize("S", [2, 4, 8])
@pytest.mark.parametrize("bm", [8, 16, 32, 64, 128, 192, 256])
@pytest.mark.parametrize("bn", [64, 128, 192, 256])
def test_the_reduce_scatter_covers_each_element_of_the_tile_once(S, bm, bn):
    """CTA r's chunks (rows r bm / S .. of C's tile, CHUNK columns each) over every rank: each
    element of the bm x bn tile exactly once, each chunk inside its row."""
    seen = np.zeros((bm, bn), dtype=int)
    for rank in range(S):
        for c in range(cs.chunks(bm, bn, S)):
            row, col = cs.reduce_chunk(rank, c, bm=bm, bn=bn, splits=S)
            assert rank * bm // S <= row < (rank + 1) * bm // S and col + cs.CHUNK <= bn
            seen[row, col:col + cs.CHUNK] += 1
    assert (seen == 1).all()


def consumer_parts(p: Plan):
    """(row0, atoms) of each consumer that computes the tile of a one-unit CTA: cooperative,
    every consumer its WM rows; ping-pong, consumer 0 the whole tile (consumer 1 takes none)."""
    if p.pingpong:
        return [(0, p.atoms)]
    return [(cw * p.WM, p.atoms) for cw in range(p.NC)]


def stage(p: Plan, part, *, swap: bool):
    """The staging array (fp32, C's tile rows x stride) that the kernel's consumers write from
    their accumulators of the kernel tile ``part`` [p.BM, p.BN], by staging_index."""
    bm, bn = (p.BN, p.BM) if swap else (p.BM, p.BN)
    stride = bn + cs.row_pad(swap)
    staging = np.full(bm * stride, np.nan)
    for row0, atoms in consumer_parts(p):
        for lt in range(128):
            for a in range(atoms):
                for jj in range(p.BN // 8):
                    for h in range(2):
                        for e in range(2):
                            r = row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4 + h * 8
                            q = jj * 8 + lt % 4 * 2 + e
                            i = cs.staging_index(lt, a, jj, h, e, row0=row0, stride=stride,
                                                 swap=swap)
                            assert np.isnan(staging[i]), "two accumulators, one element"
                            staging[i] = part[r, q]
    return staging.reshape(bm, stride)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("tile, consumers, arrangement", [
    ((64, 64), 1, "cooperative"), ((64, 192), 1, "cooperative"), ((128, 128), 2, "cooperative"),
    ((64, 256), 2, "pingpong"), ((256, 128), 2, "cooperative"), ((128, 64), 2, "pingpong")])
def test_the_fragments_fill_the_staging_tile_once_in_cs_frame(swap, tile, consumers,
                                                              arrangement):
    """Every accumulator of the kernel tile to one staging element: the staging holds C's tile
    (the kernel's, or swapped its transpose) in its first bn columns, the padding untouched."""
    BM, BN = tile
    config = {**CLUSTER, "bm": BM, "bn": BN, "consumers": consumers,
              "arrangement": arrangement, "split_k": 2}
    p = Plan(sw.kernel_config(config) if swap else config, 4096, 4096, 4096)
    part = np.random.default_rng(0).standard_normal((p.BM, p.BN))
    staging = stage(p, part, swap=swap)
    assert Gemm(128, 4096, 4096, space="v3").space.validate(config) == []
    bn = config["bn"]  # C's columns: the kernel's, or its rows under swap
    assert staging.shape[1] == bn + cs.row_pad(swap)
    np.testing.assert_array_equal(staging[:, :bn], part.T if swap else part)
    assert np.isnan(staging[:, bn:]).all()


@pytest.mark.parametrize("M, N, K, change", [
    (128, 1024, 4096, {"split_k": 4}),
    ((3, 128, 256, 1024), None, None, {"bm": 64, "bn": 128, "consumers": 1, "split_k": 2,
                                       "raster": 2}),  # a bmm of 3: its tiles' walk
    (24, 1000, 1008, {"bm": 32, "bn": 64, "bk": 32, "consumers": 1, "split_k": 2,
                      "swap_ab": "on"}),  # ragged M and N (32 k blocks of 32)
    (16, 1024, 2048, {"bm": 16, "bn": 128, "consumers": 2, "arrangement": "pingpong",
                      "split_k": 8, "swap_ab": "on"}),
    (100, 200, 512, {"bm": 64, "bn": 64, "consumers": 1, "split_k": 2}),  # ragged, unswapped
])
def test_the_cluster_walk_staging_and_reduce_scatter_compute_the_product(M, N, K, change):
    """The whole kernel simulated: cluster k of the one-unit-a-CTA grid holds one tile, its CTA
    rank r runs k slice r; each CTA's partial product (the kernel's tile, TMA's zero fill past
    every edge) staged; CTA r sums its rows from every rank's staging in rank order and stores
    the ones inside C. Against numpy's A B^T, and every element of C stored once (a bmm: its
    [b x M, K] and [b x N, K] operands, C [b x M, N], B's rows from the walk's first row)."""
    config = {**CLUSTER, **change}
    swap = config.get("swap_ab") == "on"
    batch = 1
    if N is None:  # a bmm (batch, M, N, K)
        batch, M, N, K = M
        assert make("bmm", (batch, M, N, K), space="v3").space.validate(config) == []
    else:
        assert Gemm(M, N, K, space="v3").space.validate(config) == []
    p = Plan(sw.kernel_config(config) if swap else config, *((N, M) if swap else (M, N)), K,
             batch)
    S, bm, bn = p.splits, config["bm"], config["bn"]
    assert p.cluster_reduce and p.grid == p.units == p.tiles * S and p.launch_cluster == S
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((batch * M, K)), rng.standard_normal((batch * N, K))
    X, W = (B, A) if swap else (A, B)  # the kernel's operands
    Xp = np.zeros((batch * p.tiles_m * p.BM, p.KT * p.BK))  # zero fill past the edges (TMA)
    Wp = np.zeros((batch * p.tiles_n * p.BN, p.KT * p.BK))
    Xp[:X.shape[0], :K], Wp[:W.shape[0], :K] = X, W
    C = np.full((batch * M, N), np.nan)
    for cl in range(p.grid // S):
        stagings, tiles = [], set()
        for rank in range(S):
            cta = cl * S + rank
            tm, tn, b0 = p.tile(cta, 0)  # b0: B's first row
            k0 = p.k0(cta)
            assert k0 == rank * p.KB  # rank r: k slice r
            tiles.add((tm, tn))
            k = slice(k0 * p.BK, (k0 + p.KB) * p.BK)
            part = Xp[tm * p.BM:(tm + 1) * p.BM, k] @ Wp[b0:b0 + p.BN, k].T
            stagings.append(stage(p, part, swap=swap))
        assert len(tiles) == 1  # the cluster's CTAs hold one tile
        tcm, tcn = (tn, tm) if swap else (tm, tn)  # C's block row and column
        for rank in range(S):
            for c in range(cs.chunks(bm, bn, S)):
                row, col = cs.reduce_chunk(rank, c, bm=bm, bn=bn, splits=S)
                total = stagings[0][row, col:col + cs.CHUNK].copy()
                for r in range(1, S):  # rank order
                    total += stagings[r][row, col:col + cs.CHUNK]
                for e in range(cs.CHUNK):
                    gr, gc = tcm * bm + row, tcn * bn + col + e
                    if gr < batch * M and gc < N:
                        assert np.isnan(C[gr, gc]), "stored twice"
                        C[gr, gc] = total[e]
    want = np.concatenate([A[i * M:(i + 1) * M] @ B[i * N:(i + 1) * N].T for i in range(batch)])
    np.testing.assert_allclose(C, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape, dtype, change, violated", [
    ((16, 6144, 4096), "fp16:fp32", {"bm": 32, "bn": 192, "consumers": 1, "split_k": 4,
                                       "swap_ab": "on"}, []),
    ((16, 6144, 4096), "fp16:fp16", {"bm": 32, "bn": 192, "consumers": 1, "split_k": 4,
                                       "swap_ab": "on"}, []),
    ((128, 4096, 4096), "bf16:bf16", {"split_k": 2}, []),
    ((128, 4096, 4096), "bf16:bf16", {"split_reduce": "atomic", "split_k": 2},
     ["split_k_needs_fp32_output"]),
    ((128, 4096, 4096), "fp16:fp32", {"split_k": 1}, ["split_reduce_cluster_needs_split"]),
    ((128, 4096, 4096), "fp16:fp32", {"persistent": "on"},
     ["split_reduce_cluster_one_unit_a_cta"]),
    ((256, 4096, 4096), "fp16:fp32", {"cluster": "2x1", "split_k": 2},
     ["split_reduce_cluster_without_multicast"]),
    ((128, 4096, 4096), "fp16:fp32", {"epilogue": "v2"}, ["split_reduce_cluster_own_stores"]),
    ((128, 4096, 4096), "fp16:fp32", {"epilogue": "tma"}, ["split_reduce_cluster_own_stores"]),
    # C's 128 x 256 fp32 staging (plus its padding) over a ring of 2 stages: 135 KB
    ((128, 4096, 4096), "fp16:fp32", {"bn": 256, "stages": 2, "split_k": 2}, []),
])
def test_cluster_constraints_accept_and_refuse_by_name(shape, dtype, change, violated):
    space = Gemm(*shape, space="v3", dtype=dtype).space
    assert space.validate({**CLUSTER, **change}) == violated


def test_the_portable_cluster_bounds_split_k():
    """split_k's values stop at 8 today; the constraint keeps a larger one out of the cluster
    mode should the knob grow."""
    (portable,) = [c for c in Gemm(128, 4096, 4096, space="v3").space.constraints
                   if c.name == "split_reduce_cluster_portable"]
    cols = {"split_reduce": np.array(["cluster", "cluster", "atomic"]),
            "split_k": np.array([8, 16, 16])}
    assert np.asarray(portable.ok(cols)).tolist() == [True, False, True]


def test_the_model_columns_count_the_staging_and_the_units():
    """The cluster mode's shared memory is the larger of the ring and C's fp32 staging tile;
    its grid is its units (one a CTA), its wave efficiency the atomic twin's (the same units)."""
    op = Gemm(128, 4096, 4096, space="v3")
    config = {**CLUSTER, "bn": 256, "stages": 2, "split_k": 2}
    twin = {**config, "split_reduce": "atomic"}
    cl, at = op.space.columns([config]), op.space.columns([twin])
    ring = 2 * (128 + 256) * 64 * 2
    staging = 128 * (256 + 8) * 4
    assert staging > ring and cl["dynamic_smem_bytes"][0] == staging
    assert at["dynamic_smem_bytes"][0] == ring
    assert cl["grid"][0] == cl["units"][0] == 16 * 2 == at["grid"][0]
    assert cl["wave_efficiency"][0] == at["wave_efficiency"][0]
    swapped = op.space.columns([{**CLUSTER, "bm": 32, "bn": 128, "split_k": 4,
                                 "swap_ab": "on", "consumers": 1}])
    assert swapped["dynamic_smem_bytes"][0] == 4 * (32 + 128) * 64 * 2  # the ring: larger


def test_the_atomic_default_keeps_the_recorded_kernels():
    """Configurations recorded before the knob read as atomic: today's kernel, C zeroed."""
    space = Gemm(128, 4096, 4096, space="v3").space
    old = dict(SKINNY)
    assert space.knob("split_reduce").default == "atomic"
    assert space.from_json(old)["split_reduce"] == "atomic"


def test_the_cluster_mode_reaches_the_generated_cuda_and_the_launch():
    """Cluster launch of split_k CTAs, nothing zeroed, no atomics: the DSMEM ops (mapa,
    ld.shared::cluster.v4.f32), the cluster barriers; a 16-bit output's rounded pairs."""
    op = Gemm(16, 6144, 4096, space="v3", dtype="fp16:fp16")
    k = lowered(op, {**CLUSTER, "bm": 32, "bn": 192, "consumers": 2,
                     "arrangement": "pingpong", "split_k": 4, "swap_ab": "on"})
    assert k.zeroed == () and k.grid == (32 * 4, 1, 1) and k.cluster == (4, 1, 1)
    src = k.source
    for op_text in ("mapa.shared::cluster.u32", "ld.shared::cluster.v4.f32",
                    "barrier.cluster.arrive.release.aligned",
                    "barrier.cluster.wait.acquire.aligned", "__floats2half2_rn"):
        assert op_text in src, op_text
    assert "red.global" not in src and "cp.reduce" not in src


def test_the_cluster_mode_fuses_the_epilogue_on_the_sum():
    """bias and activation apply to the whole sum: the atomic mode refuses them with split K,
    the cluster mode applies them once an element, after the k slices' sum (the activation
    CHUNK times in the source: the reduce's chunk, never a consumer's partial tile)."""
    op = make("gemm", (64, 1000, 1024), dtype="bf16:bf16", space="v3", fuse="bias+gelu")
    config = {**CLUSTER, "bm": 64, "bn": 128, "consumers": 1, "split_k": 4}
    assert op.space.validate(config) == []
    assert op.space.validate({**config, "split_reduce": "atomic", "persistent": "on"}) == [
        "split_k_needs_fp32_output", "split_k_without_fuse"]
    src = lowered(op, config).source
    assert src.count("bocast_gelu(") == 1 + cs.CHUNK  # its definition, then the reduce's calls
    assert "bias_ptr[min(" in src  # ragged N: the last column's bias past it, never stored


@needs_nvcc
def test_cluster_kernels_build_for_sm_90a_without_spills():
    """A few cluster-mode kernels through the builder's path: nvcc for sm_90a, ptxas's report
    without spills or a stack, the dynamic shared memory the model counts (within 227 KB by
    the space's constraint), the cluster dims in the build, nothing zeroed."""
    builds = [
        (Gemm(16, 6144, 4096, space="v3", dtype="fp16:fp16"),
         {**CLUSTER, "bm": 32, "bn": 192, "consumers": 2, "arrangement": "pingpong",
          "split_k": 4, "swap_ab": "on", "regs": "24/240"}),
        (Gemm(64, 6144, 4096, space="v3"),
         {**CLUSTER, "bm": 64, "bn": 192, "consumers": 1, "split_k": 8, "stages": 5}),
        # 128 accumulators a consumer thread: the producer's k loop rolled, as a multicast
        # cluster's (unrolled, it spilled 16 bytes)
        (Gemm(128, 6144, 4096, space="v3"),
         {**CLUSTER, "bm": 128, "bn": 256, "split_k": 2, "stages": 4}),
        (make("gemm", (64, 1000, 1024), dtype="bf16:bf16", space="v3", fuse="bias+gelu"),
         {**CLUSTER, "bm": 64, "bn": 128, "consumers": 1, "split_k": 4}),
        (Gemm(24, 1001, 1008, space="v3", dtype="bf16:bf16"),  # N % 4 != 0: one at a time
         {**CLUSTER, "bm": 32, "bn": 64, "bk": 32, "consumers": 1, "split_k": 2,
          "swap_ab": "on"}),
    ]
    for op, config in builds:
        (res,) = check_v3_builds(op, [config])
        assert tuple(res["cluster"]) == (config["split_k"], 1, 1) and res["zeroed"] == ()
        f = res["features"]
        assert f["dynamic_smem_bytes"] + f["smem_bytes"] <= 227 * 1024, (config, f)
