"""Swap AB on space v3 (issue 38 item 3; ``_hopper_swap``): the kernel computes C^T = B A^T so
that the weights fill wgmma's M and a skinny GEMM's few rows (or a GEMV's vectors) are its N.
The walk and the transposed index map are checked by simulating the kernel's units against
numpy; the constraints by name; the generated CUDA and static sm_90a builds on the CPU. The
kernels' results are checked on the GPU (experiments/device/skinny_swap.sh)."""

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_swap as sw
from bocast.space.operators._hopper_layout import tile_coords
from bocast.space.operators._hopper_plan import Plan
from bocast.space.operators.operator import get_operator, make, make_named
from tests.builds import check_v3_builds
from tests.spaces.test_hopper_split import SKINNY, check_walk, lowered

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")

#: a decode GEMM's swapped kernel: 16 token rows (wgmma n16) x 128 weight rows
SWAP = {**SKINNY, "bm": 16, "bn": 128, "epilogue": "scalar", "split_k": 1, "swap_ab": "on"}


@pytest.mark.parametrize("M, N, K, change", [
    (16, 4096, 4096, {}),
    (24, 1000, 1008, {"bm": 32, "split_k": 2, "bk": 32}),  # ragged M and N, split K
    (8, 1000, 4096, {"bm": 8, "bn": 64, "consumers": 1, "split_k": 8, "persistent": "off"}),
    (128, 1024, 1024, {"bm": 64, "bn": 64, "consumers": 1, "cluster": "2x1", "split_k": 2}),
    (64, 1000, 1024, {"bm": 64, "cluster": "1x2", "raster": 2, "raster_major": "n"}),
])
def test_the_swapped_walk_transposed_computes_each_k_slice_once_and_sums_to_the_product(
        M, N, K, change):
    """The swapped kernel's Plan is over C^T (its rows BN over N, its columns BM over M):
    every (tile, k block) pair once over all CTAs, and each unit's partial products of its k
    slice sum to B A^T = C^T against numpy (check_walk in the kernel's frame; the transposed
    store of each tile is the next tests')."""
    config = {**SWAP, **change}
    assert Gemm(M, N, K, space="v3").space.validate(config) == []
    p = Plan(sw.kernel_config(config), N, M, K)
    assert (config["bn"], config["bm"]) == (p.BM, p.BN) and (p.M, p.N) == (N, M)
    check_walk(p)


@pytest.mark.parametrize("cluster, major, G", [("1x1", "m", 1), ("1x1", "m", 4),
                                               ("1x1", "n", 2), ("2x1", "m", 2),
                                               ("1x2", "n", 2), ("1x2", "m", 4)])
def test_the_swapped_kernel_walks_cs_tiles_in_the_same_order(cluster, major, G):
    """kernel_config transposes the cluster and the raster walk, so the knobs keep naming C's
    walk: step t of the kernel's walk over C^T is step t of the unswapped walk over C,
    transposed, for every cluster rank."""
    M, N, bm, bn = 64, 2048, 16, 128
    c = sw.kernel_config({"bm": bm, "bn": bn, "cluster": cluster, "raster_major": major})
    cm, cn = {"1x1": (1, 1), "2x1": (2, 1), "1x2": (1, 2)}[cluster]
    M = M * cm  # whole cluster rows
    tiles = -(-M // bm) * -(-N // bn) // (cm * cn)
    for t in range(tiles):
        for rank in range(cm * cn):
            tm, tn, _ = tile_coords(t, M=M, N=N, BM=bm, BN=bn, G=G, cluster=(cm, cn), rank=rank,
                                    major=major)
            km, kn, _ = tile_coords(t, M=N, N=M, BM=c["bm"], BN=c["bn"], G=G,
                                    cluster={"1x1": (1, 1), "2x1": (2, 1),
                                             "1x2": (1, 2)}[c["cluster"]],
                                    rank=rank, major=c["raster_major"])
            assert (km, kn) == (tn, tm)


def fragment_elements(p):
    """Every (kernel row, column) consumer thread lt of consumer cw stores, by the wgmma f32
    fragment's map that ``transposed_stores`` follows (row lt/32*16 + lt%32/4 (+8), column
    8 jj + 2 (lt % 4) (+1) of each m64 atom)."""
    out = []
    for cw in range(p.NC):
        row0 = 0 if p.pingpong else cw * p.WM
        for lt in range(128):
            for a in range(p.atoms):
                for jj in range(p.BN // 8):
                    for h in range(2):
                        for e in range(2):
                            out.append((row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4 + 8 * h,
                                        jj * 8 + lt % 4 * 2 + e))
    return out


@pytest.mark.parametrize("change", [{}, {"bm": 8, "bn": 64, "consumers": 1},
                                    {"bm": 32, "bn": 256, "arrangement": "cooperative"}])
def test_the_transposed_store_covers_the_tile_once(change):
    """The consumers' fragments cover the kernel's BM x BN tile exactly once (cooperative:
    each consumer its rows), so each element of C's BN x BM tile is stored once."""
    p = Plan(sw.kernel_config({**SWAP, **change}), 4096, 16, 4096)
    elements = fragment_elements(p)
    assert sorted(elements) == [(r, q) for r in range(p.BM) for q in range(p.BN)]


@pytest.mark.parametrize("shape, change, violated", [
    ((16, 4096, 4096), {}, []),
    ((16, 4096, 4096), {"swap_ab": "off"}, ["bm_whole_atoms", "small_bm_needs_swap"]),
    ((16, 4096, 4096), {"epilogue": "v2"}, ["swap_ab_scalar_epilogue"]),
    ((16, 4096, 4096), {"epilogue": "tma"}, ["swap_ab_scalar_epilogue"]),
    ((256, 4096, 4096), {"bm": 64}, ["swap_ab_only_when_skinny"]),
    ((16, 4096, 4096), {"bm": 8, "cluster": "1x2"}, ["swap_ab_multicast_half_whole"]),
    ((16, 4096, 4096), {"bm": 16, "cluster": "1x2"}, []),
    # the kernel's rows are bn: whole m64 atoms a consumer (cooperative, 2 consumers: 128)
    ((16, 4096, 4096), {"bn": 64}, ["bm_whole_atoms"]),
    ((16, 4096, 4096), {"bn": 64, "consumers": 1}, []),
    # accumulators are atoms x BM / 2 under swap: 2 atoms x 256 / 2 = 256 registers
    ((128, 4096, 4096), {"bm": 256, "bn": 128, "consumers": 1, "stages": 2},
     ["accumulators_fit_registers"]),
    ((16, 4096, 4096), {"split_k": 4}, []),  # 32 tiles x 4 / 2 < 132
])
def test_swap_constraints_accept_and_refuse_by_name(shape, change, violated):
    space = Gemm(*shape, space="v3").space
    assert sorted(space.validate({**SWAP, **change})) == sorted(violated)


def test_swap_refuses_a_fused_epilogue_and_bmm_has_no_knob():
    space = make("gemm", (16, 4096, 4096), dtype="bf16:fp32", space="v3", fuse="relu").space
    assert space.validate(SWAP) == ["swap_ab_without_fuse"]
    bmm = make("bmm", (4, 128, 128, 64), space="v3").space
    assert "swap_ab" not in [k.name for k in bmm.knobs] and 8 not in bmm.knob("bm").choices


def test_the_swap_knob_leaves_configurations_recorded_before_it_as_they_were():
    """Configurations without swap_ab read as off (the kernel of before), and the spaces of
    GEMMs of M > 128 keep their feasible set (no sample swaps or takes a small bm)."""
    space = Gemm(4096, 4096, 4096, space="v3").space
    config = {k: v for k, v in SKINNY.items() if k != "split_k"}
    assert space.knob("swap_ab").default == "off"
    assert space.from_json(config)["swap_ab"] == "off"
    sample = space.sample(64, rng=0)
    assert {c["swap_ab"] for c in sample} == {"off"} and min(c["bm"] for c in sample) >= 64
    skinny = Gemm(16, 4096, 4096, space="v3").space.sample(64, rng=0)
    assert {c["swap_ab"] for c in skinny} == {"off", "on"}


def test_swap_reaches_the_generated_cuda_and_the_tensor_maps():
    """Swapped: the kernel's first operand is B (its box of bn rows), A's box is bm rows, the
    wgmma's N is bm, and C is stored (or with split K added) one element at a time."""
    op = Gemm(24, 1000, 1008, space="v3")
    low = lowered(op, {**SWAP, "bm": 32, "split_k": 1})
    assert low.tensor_maps["A_map"]["box"] == [64, 32]
    assert low.tensor_maps["B_map"]["box"] == [64, 128]
    assert "m64n32k16.f32.f16.f16" in low.source and "st.global.v2" not in low.source
    split = lowered(op, {**SWAP, "bm": 32, "split_k": 2, "bk": 32})
    assert split.zeroed == ("C",) and "red.global.add.f32" in split.source
    # fp8 e5m2 x e4m3: the kernel's first operand is B, e4m3 (both K-major, as fp8 needs)
    fp8 = make("gemm", (16, 4096, 4096), dtype="e5m2xe4m3:bf16", space="v3")
    low = lowered(fp8, SWAP)
    assert "m64n16k32.f32.e4m3.e5m2" in low.source
    assert low.tensor_maps["A_map"]["dtype"] == "float8_e5m2"


def test_gemv_runs_on_v3_with_its_tensors_named():
    """A GEMV on v3 is the GEMM of M = B vectors, N = the matrix's rows: the kernel's
    parameters are the GEMV's X, A, Y."""
    g = make("gemv", (4096, 14336, 8), space="v3")
    low = lowered(g, {**SWAP, "bm": 8, "split_k": 4})
    assert set(low.args) == {"A_map", "B_map", "Y"} and low.zeroed == ("Y",)
    assert {m["tensor"] for m in low.tensor_maps.values()} == {"X", "A"}
    assert "m64n8k16" in low.source


@needs_nvcc
def test_swapped_kernels_build_for_sm_90a_without_spills():
    """A sample of swapped configurations (n8 to n64, split K, a cluster, a GEMV) through the
    builder's own path: nvcc for sm_90a, ptxas's report (-Xptxas -v) without spills, stack or
    serialized wgmma."""
    op = Gemm(16, 4096, 4096, space="v3")
    check_v3_builds(op, [SWAP, {**SWAP, "split_k": 4, "cluster": "1x2", "raster": 2,
                                "raster_major": "n"}])
    gemv = make("gemv", (4096, 14336, 8), space="v3")
    (res,) = check_v3_builds(gemv, [{**SWAP, "bm": 8, "bn": 64, "consumers": 1,
                                     "split_k": 2, "stages": 6}])
    assert res["zeroed"] == ("Y",)


def test_space_auto_takes_v3_for_a_gemv_only_when_switched_on(monkeypatch):
    from bocast.space.operators import gemv

    op = make_named("gemv", (4096, 14336, 8))  # measured: switched on
    assert op.workload["space"] == "v3" and "AUTO_V3_GEMV" in op.space_choice
    monkeypatch.setattr(gemv, "AUTO_V3_GEMV", False)
    assert make_named("gemv", (4096, 14336, 8)).workload["space"] == "v2"
    monkeypatch.setattr(gemv, "AUTO_V3_GEMV", True)
    op = make_named("gemv", (4096, 14336, 8))
    assert op.workload["space"] == "v3" and "AUTO_V3_GEMV" in op.space_choice
    assert make_named("gemv", (32, 4096, 8)).workload["space"] == "v2"  # M < 64
