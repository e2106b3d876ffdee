"""Space v3, the Hopper GEMM template (bocast.space.operators._hopper_matmul over _hopper_kernel):
its constraints, what it refuses, what its knobs put into the generated CUDA, and static builds for
sm_90a (TVM's tirx pipeline on the CPU, nvcc's ptxas report). The kernels' correctness is checked on
the GPU (every measured row against torch: experiments/results/hopper/,
bocast/data/gemm_4096_4096_4096_v3)."""

import json

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators.operator import WorkloadError, get_operator, make
from bocast.space.space import Space
from tests.builds import build_configs, check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")

#: The best kernel BO and the CGA found live at GEMM 4096^3 (experiments/results/
#: live_v3_gemm_4096_4096_4096): 128 x 256 tiles of two cooperative consumers, 4 stages.
BEST_4096 = {"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumers": 2,
             "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
             "raster": 16, "epilogue": "v2"}
SMALL = (256, 512, 256)


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


def test_the_best_live_kernel_is_a_configuration_of_the_space():
    op = Gemm(4096, 4096, 4096, space="v3")
    assert op.workload["space"] == "v3"
    assert op.space.validate(BEST_4096) == []
    cols = op.space.columns([BEST_4096])
    assert (cols["threads"][0], cols["acc_regs"][0], cols["smem_bytes"][0]) == \
        (384, 128, 4 * 384 * 64 * 2 + 1024)


@pytest.mark.parametrize("change, violated", [
    ({"stages": 5}, "shared_memory_le_227KB"),               # 5 x 48 KB + barriers > 227 KB
    ({"bn": 192}, None),                                     # 4096 % 192: a ragged column
    ({"bm": 64}, "bm_whole_atoms"),                          # 32 rows a consumer
    ({"arrangement": "pingpong", "bn": 128, "consumers": 1}, "pingpong_needs_two"),
    ({"arrangement": "pingpong"}, "accumulators_fit_registers"),  # 256 accumulators a thread
    ({"regs": "off", "bm": 256, "bn": 128}, None),           # 168 registers: 128 + 40 fit
    ({"regs": "off", "bm": 256, "bn": 128, "consumers": 1}, "accumulators_fit_registers"),
    ({"raster": 16, "bm": 256, "bn": 128, "stages": 3}, None),
    ({"bm": 64, "bn": 128, "consumers": 1, "raster": 16}, None),
])
def test_hand_built_violations(change, violated):
    space = Gemm(4096, 4096, 4096, space="v3").space
    assert space.validate({**BEST_4096, **change}) == ([violated] if violated else [])


def test_raster_must_divide_the_block_rows():
    space = Gemm(1024, 1024, 1024, space="v3").space  # 8 block rows of 128
    assert space.validate({**BEST_4096, "raster": 16}) == ["raster_divides_block_rows"]
    assert space.validate({**BEST_4096, "raster": 8}) == []


def test_raster_counts_the_partial_block_row():
    """Ragged M: the block rows are ceil(M / BM), and raster must divide that count."""
    space = Gemm(1000, 1000, 1000, space="v3").space  # 8 block rows of 128 (the last 104 rows)
    assert space.columns([BEST_4096])["tiles_m"][0] == 8
    assert space.validate({**BEST_4096, "raster": 8}) == []
    assert space.validate({**BEST_4096, "raster": 16}) == ["raster_divides_block_rows"]
    space = Gemm(1100, 1000, 1000, space="v3").space  # 9 block rows
    assert space.columns([BEST_4096])["tiles_m"][0] == 9
    assert space.validate({**BEST_4096, "raster": 2}) == ["raster_divides_block_rows"]
    assert space.validate({**BEST_4096, "raster": 1}) == []


@pytest.mark.parametrize("shape, ragged", [((1000, 1000, 1000), "MNK"), ((4100, 4096, 4104), "MK"),
                                           ((4096, 4096, 4104), "K"), ((1, 8, 8), "MNK")])
def test_ragged_gemm_extents_are_in_the_space(shape, ragged):
    """A GEMM's M, N and K need not be multiples of the tile (K % 8 == 0 stays, for TMA's row
    strides): partial tiles are counted by ceil-division, k blocks too."""
    op = Gemm(*shape, space="v3")
    config = {**BEST_4096, "raster": 1}
    assert op.space.validate(config) == []
    cols = op.space.columns([config])
    M, N, K = shape
    assert cols["tiles"][0] == -(-M // 128) * -(-N // 256)
    assert cols["k_blocks"][0] == -(-K // 64)
    assert set(ragged) == {x for x, e, t in zip("MNK", shape, (128, 256, 64)) if e % t}


def test_wave_efficiency_counts_the_tile_slots_doing_real_work():
    """One tile per SM and wave (132 SMs): a 128 x 256 tile is 32 tiles at 1024^3 (a quarter
    of one wave) and 512 at 4096^3 (4 waves, the last 116 of 132); ragged edges count too."""
    cols = {s: Gemm(*s, space="v3").space.columns([BEST_4096])["wave_efficiency"][0]
            for s in ((1024, 1024, 1024), (4096, 4096, 4096), (1000, 1000, 1000))}
    assert cols[(1024, 1024, 1024)] == pytest.approx(32 / 132)
    assert cols[(4096, 4096, 4096)] == pytest.approx(512 / (4 * 132))
    assert cols[(1000, 1000, 1000)] == pytest.approx(1000 * 1000 / (132 * 128 * 256))


def test_v2_stores_need_an_even_n():
    """The 8-byte stores write columns (2j, 2j + 1): with N odd a pair would straddle the edge
    and be misaligned; the scalar stores test each column."""
    space = Gemm(1000, 1001, 1000, space="v3").space
    assert space.validate({**BEST_4096, "raster": 8}) == ["v2_stores_need_even_n"]
    assert space.validate({**BEST_4096, "raster": 8, "epilogue": "scalar"}) == []
    assert Gemm(1000, 1002, 1000, space="v3").space.validate({**BEST_4096, "raster": 8}) == []


def test_a_bmm_tile_stays_inside_its_batch_element():
    """bmm reads [b x M, K]: BM must divide M and BN divide N (a tile may not cross an element),
    while K may be ragged; a bmm whose M or N no BM / BN divides is refused outright."""
    Bmm = get_operator("bmm")
    config = {**BEST_4096, "bn": 128, "raster": 2, "stages": 2}
    assert Bmm(12, 512, 512, 64, space="v3").space.validate({**config, "bn": 192}) == \
        ["bmm_tiles_within_batch"]
    assert Bmm(12, 576, 512, 64, space="v3").space.validate({**config, "raster": 1}) == \
        ["bmm_tiles_within_batch"]  # 576 % 128
    assert Bmm(12, 576, 512, 64, space="v3").space.validate(
        {**config, "bm": 192, "raster": 1}) == ["bm_whole_atoms"]  # 96 rows a consumer
    assert Bmm(12, 576, 512, 64, space="v3").space.validate(
        {**config, "bm": 64, "consumers": 1, "raster": 1}) == []
    assert Bmm(12, 512, 512, 72, space="v3").space.validate(config) == []  # ragged K
    assert "bmm_tiles_within_batch" not in {c.name for c in Gemm(1000, 1000, 1000,
                                                                  space="v3").space.constraints}
    with pytest.raises(WorkloadError, match="multiples of 64"):
        make("bmm", (4, 100, 256, 64), space="v3")


def test_a_uniform_sample_is_feasible_and_the_space_is_large():
    space = Gemm(4096, 4096, 4096, space="v3").space
    sample = space.sample(200, rng=0)
    assert len(sample) == 200 and all(space.validate(c) == [] for c in sample)
    assert {c["arrangement"] for c in sample} == {"cooperative", "pingpong"}
    assert {c["epilogue"] for c in sample} == {"v2", "scalar", "tma"}


@pytest.mark.parametrize("op, shape, options, message", [
    ("gemm", (256, 256, 256), {"layout": "NN"}, "needs layout NT"),
    ("gemm", (256, 256, 256), {"dtype": "bf16:fp16"}, "not supported; use one of"),
    ("gemm", (256, 256, 100), {}, "K % 8 == 0"),
    ("bmm", (4, 256, 256, 64), {"layout": "NN"}, "needs layout NT"),
    ("conv2d", (16, 14, 14, 256, 256, 1, 1, 9, 0, 1), {}, "strides up to 8"),
    ("conv2d_transpose", (16, 14, 14, 256, 256, 3, 3, 2, 1, 2, 1), {}, "dilation 1 only"),
    ("gemv", (256, 100), {}, "K % 8 == 0"),  # gemv runs on v3 (swap_ab), its K as GEMM's
    ("gemm", (256, 256, 256), {"space": "v4"}, "not known"),
])
def test_workloads_outside_the_template_are_refused_by_name(op, shape, options, message):
    options = {"space": "v3", **options}
    with pytest.raises(WorkloadError, match=message):
        make(op, shape, **options)


def test_a_bmm_reads_its_batch_as_one_matrix_of_batch_x_rows():
    """bmm on the template: no batch_bind knob (the tile loop walks batch x tiles), the tensor
    maps over [b x M, K] and [b x N, K], the tile count and grid over the whole batch, and the
    block rows/columns of tile t taken inside its batch element."""
    Bmm = get_operator("bmm")
    op = Bmm(12, 512, 512, 64, space="v3")
    assert "batch_bind" not in {k.name for k in op.space.knobs}
    config = {**BEST_4096, "bn": 128, "raster": 2, "stages": 2}
    assert op.space.validate(config) == []
    assert op.space.columns([config])["tiles"][0] == 12 * 4 * 4
    low = lowered(op, config)
    assert low.tensor_maps["A_map"]["dims"] == [64, 12 * 512]
    assert low.tensor_maps["B_map"]["dims"] == [64, 12 * 512]
    assert low.grid == (132, 1, 1) and low.args == ("A_map", "B_map", "C")
    assert lowered(op, {**config, "persistent": "off"}).grid == (12 * 16, 1, 1)
    tma = lowered(op, {**config, "epilogue": "tma"})
    assert tma.tensor_maps["C_map"]["dims"] == [512, 12 * 512] and tma.args[-1] == "C_map"


def test_a_bmm_tile_order_covers_every_tile_of_every_batch_element_once():
    """The kernel's tile -> (A/C row block, C column block, B row) map, evaluated in Python on
    the same formulas: a bijection onto the batch's tiles, B's rows in the same batch element as
    A's."""
    from bocast.space.operators import _hopper_layout as hl

    B, M, N, BM, BN, G = 3, 512, 384, 128, 128, 2
    seen = set()
    for t in range(B * (M // BM) * (N // BN)):
        tm, tn, brow = hl.tile_coords(t, M=M, N=N, BM=BM, BN=BN, G=G)
        b = tm * BM // M
        assert brow // N == b and brow % N == tn * BN
        seen.add((tm, tn))
    assert seen == {(b * (M // BM) + i, j) for b in range(B) for i in range(M // BM)
                    for j in range(N // BN)}


# (M, N, BM, BN, G, raster_major) where G divides the block rows (m) or columns (n), as
# raster_divides_block_rows asks
RAGGED_WALKS = [(M, N, BM, BN, G, major)
                for M, N, BM, BN, G in [(1000, 1000, 128, 256, 8), (1000, 1000, 128, 256, 2),
                                        (4100, 4096, 128, 256, 1), (65, 8, 64, 64, 2),
                                        (300, 700, 192, 128, 2), (1000, 1000, 256, 128, 4)]
                for major in ("m", "n")
                if -(-(N if major == "n" else M) // (BN if major == "n" else BM)) % G == 0]


@pytest.mark.parametrize("M, N, BM, BN, G, major", RAGGED_WALKS)
def test_a_ragged_gemm_tile_walk_covers_every_tile_once(M, N, BM, BN, G, major):
    """ceil-division tile counts: the walk's tiles are a bijection onto the ceil(M / BM) x
    ceil(N / BN) grid, every tile starts inside C, and the tiles cover each element of C once."""
    from bocast.space.operators import _hopper_layout as hl

    tm_n, tn_n = -(-M // BM), -(-N // BN)
    tiles = [hl.tile_coords(t, M=M, N=N, BM=BM, BN=BN, G=G, major=major)
             for t in range(tm_n * tn_n)]
    assert sorted((tm, tn) for tm, tn, _ in tiles) == [(i, j) for i in range(tm_n)
                                                      for j in range(tn_n)]
    assert all(tm * BM < M and tn * BN < N and brow == tn * BN for tm, tn, brow in tiles)
    cover = [0] * (M * N)
    for tm, tn, _ in tiles:
        for r in range(tm * BM, min(M, tm * BM + BM)):
            for c in range(tn * BN, min(N, tn * BN + BN)):
                cover[r * N + c] += 1
    assert set(cover) == {1}  # every element of C exactly once


def test_ragged_edges_put_predicates_on_the_direct_stores_only_where_needed():
    """A ragged M or N tests each store's row / column against the extent; divisible extents
    keep the predicate-free epilogue (the same kernel as before ragged extents)."""
    config = {**BEST_4096, "bn": 128, "raster": 1}
    even = lowered(Gemm(*SMALL, space="v3"), config).source
    assert " < 256)" not in even and " < 512)" not in even
    for shape in ((1000, 1000, 1000), (1000, 1024, 1000), (1024, 1000, 1024)):
        src = lowered(Gemm(*shape, space="v3"), config).source
        body = src[src.index("setmaxnreg_inc"):]
        assert body.count("if (") > even[even.index("setmaxnreg_inc"):].count("if ("), shape
    scalar = lowered(Gemm(1000, 1001, 1000, space="v3"), {**config, "epilogue": "scalar"}).source
    assert scalar.count("if (") > lowered(Gemm(1000, 1002, 1000, space="v3"),
                                          {**config, "epilogue": "scalar"}).source.count("if (")


def test_the_tma_epilogue_counts_its_staging_boxes_in_shared_memory():
    """Two 8 KB boxes a consumer after the ring: the live best's 4 stages of 128 x 256 x 64 still
    fit with them (230400 bytes of 232448), 5 stages or a ping-pong 64 x 256 of 5 stages not."""
    space = Gemm(4096, 4096, 4096, space="v3").space
    tma = {**BEST_4096, "epilogue": "tma"}
    assert space.validate(tma) == []
    assert space.columns([tma])["smem_bytes"][0] == 4 * 384 * 64 * 2 + 2 * 2 * 8192 + 1024
    assert space.columns([tma])["dynamic_smem_bytes"][0] == 4 * 384 * 64 * 2 + 2 * 2 * 8192
    assert space.columns([{**tma, "consumers": 1, "bm": 64, "bn": 128}])["smem_bytes"][0] == \
        4 * 192 * 64 * 2 + 2 * 8192 + 1024
    ping = {**tma, "arrangement": "pingpong", "bm": 64, "stages": 5}
    assert space.validate(ping) == ["shared_memory_le_227KB"]
    assert space.validate({**ping, "epilogue": "v2"}) == []
    assert space.validate({**tma, "stages": 5}) == ["shared_memory_le_227KB"]


def test_the_tma_epilogue_needs_16_byte_rows_of_c():
    """C's tensor map: its row stride (4 N bytes) must be a multiple of 16."""
    tma = {**BEST_4096, "epilogue": "tma", "raster": 8}
    assert Gemm(1000, 1002, 1000, space="v3").space.validate(tma) == \
        ["tma_store_needs_n_multiple_of_4"]
    assert Gemm(1000, 1002, 1000, space="v3").space.validate({**tma, "epilogue": "v2"}) == []
    assert Gemm(1000, 1000, 1000, space="v3").space.validate(tma) == []


def test_the_staging_box_layout_is_tmas_128_byte_swizzle():
    """Every accumulator pair of a 64 x 32 box lands once, at the address TMA's 128-byte swizzle
    reads for its (row, column) (chunk c of row r at c ^ (r % 8)); the cost measured on the
    bank model: 2 wavefronts a half-warp's 8-byte store, against 4 unswizzled."""
    import collections

    from bocast.space.operators._hopper_layout import EPI_BOX_BYTES, staging_offset

    seen = {}
    for lt in range(128):
        for jj in range(4):
            for h in range(2):
                off = staging_offset(lt, jj, h)
                r = off // 128
                col = (((off % 128) // 16) ^ (r % 8)) * 4 + off % 16 // 4
                assert (r, col) == (lt // 32 * 16 + lt % 32 // 4 + 8 * h, 8 * jj + 2 * (lt % 4))
                assert off % 8 == 0 and off not in seen
                seen[off] = (lt, jj, h)
    assert sorted(seen) == list(range(0, EPI_BOX_BYTES, 8))

    def wavefronts(offsets):
        banks = collections.defaultdict(set)
        for o in offsets:
            for word in (o // 4, o // 4 + 1):
                banks[word % 32].add(word)
        return max(len(w) for w in banks.values())

    def worst(offset):
        return max(wavefronts([offset(w * 32 + half * 16 + lane, jj, h) for lane in range(16)])
                   for w in range(4) for half in range(2) for jj in range(4) for h in range(2))

    assert worst(staging_offset) == 2
    assert worst(lambda lt, jj, h: staging_offset(lt, jj, h) // 128 * 128 + jj * 32
                 + lt % 4 * 8) == 4  # the same rows unswizzled


def test_the_tma_epilogue_reaches_the_generated_cuda():
    """C becomes a third tensor map (fp32, 32 x 64 boxes, 128-byte swizzle); the consumers
    write the box to shared memory, fence it for the async proxy, meet at their named barrier,
    and one thread stores it with TMA and commits; the buffer's reuse waits for the previous
    store's reads, and the kernel waits for its last stores. No direct store is left."""
    op = Gemm(1000, 1000, 1000, space="v3")
    config = {**BEST_4096, "bn": 128, "raster": 8, "epilogue": "tma"}
    low = lowered(op, config)
    assert low.args == ("A_map", "B_map", "C_map")
    assert low.tensor_maps["C_map"] == {"tensor": "C", "dtype": "float32", "dims": [1000, 1000],
                                        "strides": [4000], "box": [32, 64], "swizzle": 3}
    assert low.dynamic_smem == 4 * 256 * 64 * 2 + 2 * 2 * 8192
    src = low.source
    for ptx in ("st.shared.v2.f32", "fence.proxy.async.shared::cta", "bar.sync %0, %1",
                "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
                "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0",
                "cp.async.bulk.wait_group 0"):
        assert ptx in src, ptx
    assert "st.global" not in src and "C_ptr[" not in src
    body = src[src.index("setmaxnreg_inc"):]
    # a consumer's one m64 atom in 32-column boxes: 8 shared stores, then one TMA store, each
    assert body.count("tvm_builtin_ptx_st_vec_shared_v2_f32(") == 128 // 32 * 8
    assert body.count("bulk_tensor_s2g") == 128 // 32
    even = lowered(Gemm(*SMALL, space="v3"), config).source
    # ragged M: the thread issuing a store also tests that its box starts above row M
    assert "% 128) == 0) && (" in src and "% 128) == 0) && (" not in even


def test_knobs_reach_the_generated_cuda():
    """TMA loads, wgmma m64nBNk16 with its shape and count, setmaxnreg only when asked, the
    ring's barriers, the ping-pong turn and the 8-byte stores."""
    op = Gemm(*SMALL, space="v3")
    coop = {**BEST_4096, "bn": 128, "raster": 2, "regs": "24/240", "epilogue": "scalar"}
    low = lowered(op, coop)
    assert low.args == ("A_map", "B_map", "C") and low.arch == "sm_90a"
    assert low.tensor_maps["A_map"] == {"tensor": "A", "dtype": "float16", "dims": [256, 256],
                                        "strides": [512], "box": [64, 128], "swizzle": 3}
    assert low.tensor_maps["B_map"]["box"] == [64, 128]
    src = low.source
    assert "cp.async.bulk.tensor.2d" in src and "wgmma.mma_async.sync.aligned.m64n128k16" in src
    assert "setmaxnreg.dec.sync.aligned.u32 24" in src and "setmaxnreg.inc" in src
    assert "st.global.v2.f32" not in src
    assert (low.grid, low.block, low.dynamic_smem) == ((2 * 4, 1, 1), (384, 1, 1),
                                                       4 * 256 * 64 * 2)
    plain = lowered(op, {**coop, "regs": "off", "epilogue": "v2", "persistent": "off",
                         "bk": 32})
    assert "setmaxnreg" not in plain.source and "st.global.v2.f32" in plain.source
    assert plain.tensor_maps["A_map"]["swizzle"] == 2  # 64-byte rows: the 64-byte swizzle
    ping = {**coop, "arrangement": "pingpong", "bm": 64}
    assert op.space.validate(ping) == []
    assert "turn" in lowered(op, ping).source


def test_a_v3_kernel_task_carries_its_tensor_maps():
    from bocast.measure.builder import BuildResult
    from bocast.measure.runner import kernel_task
    from bocast.records.status import Status

    op = Gemm(*SMALL, space="v3")
    maps = {"A_map": {"tensor": "A", "dims": [256, 256], "strides": [512], "box": [64, 128],
                      "swizzle": 3}}
    b = BuildResult(key="k", status=Status.OK, kernel="main_kernel", args=("A_map", "B", "C"),
                    tensor_maps=maps, cubin=b"x")
    task = kernel_task(op, b, seed=0, repeats=1, warmup_ms=1)
    assert task["tensor_maps"] == maps and task["args"] == ("A_map", "B", "C")


@needs_nvcc
def test_sampled_kernels_build_for_sm_90a_without_spills():
    """A few sampled configurations through the builder's own path (apply, tirx lowering, nvcc
    for sm_90a): each builds, within the 255-register limit, no spills, no stack frame."""
    op = Gemm(*SMALL, space="v3")
    configs = [BEST_4096 | {"bn": 128, "raster": 1}, *op.space.sample(3, rng=1)]
    for config, res in zip(configs, build_configs(op, configs)):
        assert res["status"] == "ok", (config, res["error"])
        f = res["features"]
        assert f["registers"] <= 255 and f.get("spill_stores", 0) == 0, (config, f)
        assert f.get("stack_bytes", 0) == 0, (config, f)
        assert set(res["tensor_maps"]) == {"A_map", "B_map"} | (
            {"C_map"} if config["epilogue"] == "tma" else set())


@needs_nvcc
@pytest.mark.parametrize("shape", [(1000, 1000, 1000), (4100, 4096, 4104)])
def test_ragged_gemm_kernels_build_for_sm_90a_without_spills(shape):
    """Ragged extents through the builder (TMA boxes past the edges, predicated stores): the
    live best's layout with both direct epilogues and a sampled configuration build for
    sm_90a within the registers, without spills or a stack frame."""
    op = Gemm(*shape, space="v3")
    configs = [BEST_4096 | {"raster": 1}, BEST_4096 | {"raster": 1, "epilogue": "scalar"},
               *op.space.sample(1, rng=3)]
    for config in configs:
        assert op.space.validate(config) == []
    for config, res in zip(configs, build_configs(op, configs)):
        assert res["status"] == "ok", (config, res["error"])
        f = res["features"]
        assert f["registers"] <= 255 and f.get("spill_stores", 0) == 0, (config, f)
        assert f.get("stack_bytes", 0) == 0 and not f.get("wgmma_serialized"), (config, f)


#: the tma epilogue at the configurations the GPU ladder times (bocast/tools/hopper_ladder.py)
TMA_CONFIGS = [BEST_4096 | {"epilogue": "tma"},
               BEST_4096 | {"epilogue": "tma", "bn": 128, "stages": 6, "inflight": 1},
               BEST_4096 | {"epilogue": "tma", "arrangement": "pingpong", "bn": 128,
                            "stages": 6, "raster": 1},
               BEST_4096 | {"epilogue": "tma", "bm": 64, "bn": 128, "consumers": 1,
                            "stages": 6, "raster": 1}]


@needs_nvcc
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 1000, 1000), (4100, 4096, 4104)])
def test_tma_epilogue_kernels_build_for_sm_90a_without_spills(shape):
    """The tma epilogue through the builder: each builds for sm_90a without spills, a stack
    frame or serialized wgmma, with the dynamic shared memory the space's model counts."""
    op = Gemm(*shape, space="v3")
    configs = [{**c, "raster": 1 if shape[0] % 1024 else c["raster"]} for c in TMA_CONFIGS]
    for res in check_v3_builds(op, configs):
        assert set(res["tensor_maps"]) == {"A_map", "B_map", "C_map"}


@needs_nvcc
@pytest.mark.parametrize("change, barriers", [({"consumers": 1}, 2),
                                              ({"arrangement": "pingpong"}, 3)])
def test_the_tma_epilogue_names_its_barriers_by_immediate(change, barriers):
    """bar.sync with a register id makes ptxas reserve all 16 named barriers (one CTA per SM
    even for a small tile); the consumers' barriers are immediates: 0 and 1 + consumer."""
    import re

    from bocast.measure.nvcc import compile_cubin

    op = Gemm(*SMALL, space="v3")
    config = {**BEST_4096, "bm": 64, "bn": 64, "stages": 2, "regs": "off", "persistent": "off",
              "raster": 1, "epilogue": "tma", **change}
    assert op.space.validate(config) == []
    low = lowered(op, config)
    res = compile_cubin(low.source, arch=low.arch)
    assert res.ok, res.log
    assert re.search(r"used (\d+) barriers", res.log).group(1) == str(barriers), res.log


@needs_nvcc
def test_sampled_bmm_kernels_build_for_sm_90a_without_spills():
    op = get_operator("bmm")(12, 512, 512, 64, space="v3")
    configs = op.space.sample(3, rng=2)
    for config, res in zip(configs, build_configs(op, configs)):
        assert res["status"] == "ok", (config, res["error"])
        f = res["features"]
        assert f["registers"] <= 255 and f.get("spill_stores", 0) == 0, (config, f)


@needs_nvcc
def test_serialized_wgmma_is_a_feature_and_the_spill_filter_rejects_it():
    """A configuration outside the register constraint (one consumer holding 128 x 256 fp32
    accumulators at the launch's 255-register cap), built anyway: ptxas serializes its wgmma
    (C7511) and spills; the build says so, and ``reject_spills`` records it build_rejected."""
    from bocast.measure.builder import BuildResult, build_task, rejected
    from bocast.records.status import Status

    op = Gemm(*SMALL, space="v3")
    config = {**BEST_4096, "consumers": 1, "regs": "off", "stages": 2, "raster": 1}
    assert op.space.validate(config) == ["accumulators_fit_registers"]
    res = build_task({"workload": op.workload, "config": config})
    assert res["status"] == "ok" and res["features"]["wgmma_serialized"] == 1.0
    b = BuildResult(key="k", status=Status.OK, features=dict(res["features"]), cubin=b"x")
    out = rejected(b)
    assert out.status is Status.BUILD_REJECTED and out.cubin is None
    assert "wgmma.mma_async instructions serialized" in out.error
    assert "wgmma_serialized" not in build_task(
        {"workload": op.workload, "config": BEST_4096 | {"bn": 128, "raster": 1}})["features"]


@needs_nvcc
def test_the_best_live_kernel_builds_as_it_ran():
    from bocast.measure.builder import build_task

    op = Gemm(4096, 4096, 4096, space="v3")
    res = build_task({"workload": op.workload, "config": json.loads(Space.key(BEST_4096))})
    assert res["status"] == "ok", res["error"]
    assert res["grid"] == [132, 1, 1] or tuple(res["grid"]) == (132, 1, 1)
    assert res["features"]["registers"] == 168  # 65536 / 384 threads, as ptxas caps it
    assert res["features"]["dynamic_smem_bytes"] == 4 * 384 * 64 * 2


def test_the_v3_dataset_replays():
    """The uniform v3 sample measured on the H100 opens as a replay table: 300 rows, every one
    ok (every kernel correct against torch), its best above 0.85 of the cuBLAS reading stored
    with it."""
    from bocast.measure.replay import ReplayDataset

    op = Gemm(4096, 4096, 4096, space="v3")
    ds = ReplayDataset("gemm_4096_4096_4096_v3", op)
    assert len(ds.rows) == 300 and {r["status"] for r in ds.rows} == {"ok"}
    assert ds.best_tflops / ds.reference["tflops"] > 0.85


@needs_nvcc
def test_a_v3_record_exports_with_its_sm_90a_cubin(tmp_path):
    """Export rebuilds a v3 record as the builder built it: the same cubin bytes (nvcc for
    sm_90a, the arch recorded in kernel.json), the TIRx module as schedule.py, and the host
    library whose entry encodes the tensor maps (TVM's runtime.cuTensorMapEncodeTiled)."""
    import bocast
    from bocast.measure.builder import build_task

    workload = {"op": "gemm", "shape": list(SMALL), "space": "v3"}
    config = {**BEST_4096, "bn": 128, "raster": 1}
    path = str(tmp_path / "s.db")
    with bocast.create_study(workload=workload, strategy="random", store=path) as study:
        study.tell(config, tflops=10.0, latency_ms=0.0067, repeats=10)
    kernel = bocast.export(path, out=tmp_path / "k")
    meta = kernel.meta
    assert "-arch=sm_90a" in meta["build"]["nvcc_flags"]
    assert meta["build"]["target"]["arch"] == "sm_90a"
    assert meta["kernel"]["kernel_args"] == ["A_map", "B_map", "C"]
    op = make("gemm", SMALL, space="v3")
    built = build_task({"workload": op.workload, "config": json.loads(Space.key(config))})
    assert (tmp_path / "k" / "kernel.cubin").read_bytes() == built["cubin"]
    assert "wgmma" in (tmp_path / "k" / "kernel.cu").read_text()
    assert "cuTensorMapEncodeTiled" in (tmp_path / "k" / "schedule.py").read_text()


def test_launch_parameters_point_at_each_value():
    """cuLaunchKernel reads parameter i through params[i]: a pointer's 8 bytes, or a tensor
    map's 128 bytes at a 64-byte aligned address (no GPU needed to check the marshalling)."""
    import ctypes

    from bocast.measure.gpu_worker import TensorMap, launch_params

    tmap = TensorMap()
    ctypes.memset(tmap.address, 7, 128)
    values, params = launch_params([0xABC0, tmap, 0x1230])
    assert ctypes.c_void_p.from_address(params[0]).value == 0xABC0
    assert ctypes.c_void_p.from_address(params[2]).value == 0x1230
    assert params[1] == tmap.address and tmap.address % 64 == 0
    assert ctypes.string_at(params[1], 128) == b"\x07" * 128


def test_every_ladder_row_is_a_configuration_of_its_space():
    """bocast/tools/hopper_ladder.py's rows (what the GPU run times and checks against torch) are
    inside their spaces, the TMA-store rows, the ragged-extent rows and the conv2d rows included
    (its build refuses a row outside the space only after minutes of building the rows before
    it)."""
    from bocast.tools import hopper_ladder as ladder
    epilogues, ragged = set(), set()
    for (name_op, shape, space), variants in ladder.SHAPES.items():
        if space != "v3":
            continue
        op = make(name_op, shape, space=space)
        for name, change in variants:
            config = {**ladder.BASE, **change}
            assert op.space.validate(config) == [], (name, shape)
            epilogues.add(config["epilogue"])
            if name_op != "conv2d" and any(
                    e % t for e, t in zip(shape[-3:], (config["bm"], config["bn"], config["bk"]))):
                ragged.add((name_op, tuple(shape), config["epilogue"]))
    assert epilogues == {"v2", "scalar", "tma"}
    assert {e for op, _, e in ragged if op == "gemm"} == {"v2", "scalar", "tma"}
    assert ("gemm", (1000, 1000, 1000), "tma") in ragged
    assert ("bmm", (12, 512, 512, 72), "tma") in ragged
    convs = {shape for op, shape, space in ladder.SHAPES if op == "conv2d" and space == "v3"}
    assert {(16, 14, 14, 256, 256, 3, 3, 1, 1, 1), (16, 28, 28, 128, 128, 3, 3, 1, 1, 1),
            (16, 56, 56, 64, 64, 3, 3, 1, 1, 1)} <= convs


# ------------------------------------------------------------------------ clusters (issue 24)

#: the live best with a 2x1 cluster: two CTAs of adjacent block rows share B's 256 x 64 tile
CLUSTER_2X1 = BEST_4096 | {"cluster": "2x1"}


def test_the_cluster_knob_defaults_to_1x1_for_configurations_recorded_before_it():
    """The v3 datasets and stores were recorded before the cluster knob: a configuration without
    it reads as 1x1 (Space.complete), validates, and builds the same kernel; a configuration
    naming another knob the space lacks is still refused."""
    from bocast.space.space import SpaceError

    space = Gemm(4096, 4096, 4096, space="v3").space
    assert space.knob("cluster").default == "1x1"
    assert "cluster" not in BEST_4096 and space.validate(BEST_4096) == []
    assert space.from_json(BEST_4096)["cluster"] == "1x1"
    assert space.columns([BEST_4096])["cluster_size"][0] == 1
    with pytest.raises(SpaceError, match="unknown knob"):
        space.validate({**BEST_4096, "clusters": "2x1"})
    with pytest.raises(SpaceError, match="missing knob"):
        space.validate({k: v for k, v in BEST_4096.items() if k != "bm"})


@pytest.mark.parametrize("shape, change, violated", [
    ((4096, 4096, 4096), {}, []),
    ((4096, 4096, 4096), {"cluster": "1x2"}, []),
    ((4096, 4096, 4096), {"persistent": "off"}, []),
    ((4096, 4096, 4096), {"arrangement": "pingpong", "bm": 64}, []),  # allowed: see kernel()
    ((3968, 4096, 4096), {"raster": 1}, ["cluster_pairs_whole_tiles"]),      # 31 block rows
    ((3968, 4096, 4096), {"raster": 1, "cluster": "1x2"}, []),               # 16 block columns
    ((4096, 3840, 4096), {"cluster": "1x2"}, ["cluster_pairs_whole_tiles"]),  # 15 block columns
    ((1000, 1000, 1000), {"raster": 1}, ["cluster_shared_operand_whole"]),   # ragged N
    ((1000, 1024, 1000), {"raster": 1}, []),                                 # ragged M and K
    ((1000, 1024, 1000), {"raster": 1, "cluster": "1x2"},
     ["cluster_shared_operand_whole"]),                                      # ragged M, A shared
])
def test_cluster_constraints_accept_and_refuse_by_name(shape, change, violated):
    """Pairing (the paired block rows or columns even), the shared operand's rows whole (each
    CTA loads half of its box), the grid whole clusters; ping-pong is allowed with a cluster."""
    space = Gemm(*shape, space="v3").space
    assert space.validate({**CLUSTER_2X1, **change}) == violated


def test_cluster_divides_grid_is_a_named_constraint():
    """The grid (one CTA a tile, or 132 persistent CTAs) is whole clusters; pairing already
    implies it here (even tile counts, 132 even), so the constraint is checked on its own."""
    space = Gemm(4096, 4096, 4096, space="v3").space
    (check,) = [c for c in space.constraints if c.name == "cluster_divides_grid"]
    cols = space.columns([CLUSTER_2X1, BEST_4096])
    assert list(cols["grid"]) == [132, 132] and list(cols["cluster_size"]) == [2, 1]
    cols["grid"] = cols["grid"] - 1  # 131 CTAs: not whole 2-CTA clusters
    assert list(check.ok(cols)) == [False, True]


@pytest.mark.parametrize("M, N, BM, BN, G, cluster, batch", [
    (4096, 4096, 128, 256, 16, (2, 1), 1), (4096, 4096, 128, 256, 1, (2, 1), 1),
    (2048, 8192, 128, 256, 8, (2, 1), 1), (1000, 1024, 128, 256, 2, (2, 1), 1),
    (4096, 4096, 128, 256, 8, (1, 2), 1), (1024, 1000, 128, 128, 4, (1, 2), 1),
    (512, 512, 128, 128, 2, (2, 1), 3), (512, 512, 128, 128, 4, (1, 2), 3),
])
@pytest.mark.parametrize("persistent, major", [(True, "m"), (False, "m"), (True, "n")])
def test_a_cluster_tile_walk_pairs_its_ctas_tiles(M, N, BM, BN, G, cluster, batch, persistent,
                                                  major):
    """The kernel's walk (tile_coords over the cluster's blocks, rank in the cluster): both CTAs
    of a cluster walk the same number of tiles, at every step hold paired tiles (2x1: the same
    block column, block rows 2p and 2p + 1; 1x2: the same block row, columns 2q and 2q + 1, so
    the B (A) rows each half-loads are the tile's), and all CTAs together cover every tile
    once."""
    from bocast.space.operators import _hopper_layout as hl

    cm, cn = cluster
    tiles_m, tiles_n = -(-M // BM), -(-N // BN)
    tiles = batch * tiles_m * tiles_n
    grid = min(hl.DEFAULT_SM_COUNT, tiles) if persistent else tiles
    clusters, seen = grid // 2, []
    for cl in range(clusters):
        walks = []
        for rank in range(2):  # the kernel's n_tiles and tile(cl + i * clusters, rank)
            n = (tiles // 2 - cl + clusters - 1) // clusters
            walks.append([hl.tile_coords(cl + i * clusters, M=M, N=N, BM=BM, BN=BN, G=G,
                                         cluster=cluster, rank=rank, major=major)
                          for i in range(n)])
        assert len(walks[0]) == len(walks[1])
        for (tm0, tn0, b0), (tm1, tn1, b1) in zip(*walks):
            if cm == 2:
                assert (tn0, b0) == (tn1, b1) and tm0 % 2 == 0 and tm1 == tm0 + 1
            else:
                assert tm0 == tm1 and tn0 % 2 == 0 and tn1 == tn0 + 1 and b1 == b0 + BN
            assert b0 // N == tm0 // tiles_m  # B's rows in the batch element of A's
        seen += walks[0] + walks[1]
    assert sorted((tm, tn) for tm, tn, _ in seen) == [(i, j) for i in range(batch * tiles_m)
                                                     for j in range(tiles_n)]


@pytest.mark.parametrize("M, N, BM, BN, G, batch", [(4096, 4096, 128, 256, 8, 1),
                                                    (2048, 8192, 128, 256, 4, 1),
                                                    (1000, 3000, 64, 128, 2, 1),
                                                    (512, 1024, 128, 64, 4, 3)])
def test_the_n_major_walk_is_the_m_major_walk_of_c_transposed(M, N, BM, BN, G, batch):
    """raster_major n groups G block columns and walks them row by row: tile t is the m-major
    walk's tile t of the transposed problem (N x M, tiles BN x BM) with row and column swapped,
    in every batch element; and the two orders differ (else the knob would do nothing)."""
    from bocast.space.operators import _hopper_layout as hl

    tiles = batch * -(-M // BM) * -(-N // BN)
    n_major = [hl.tile_coords(t, M=M, N=N, BM=BM, BN=BN, G=G, major="n") for t in range(tiles)]
    swapped = [hl.tile_coords(t, M=N, N=M, BM=BN, BN=BM, G=G) for t in range(tiles)]
    per_m, per_n = -(-M // BM), -(-N // BN)
    for (tm, tn, brow), (sm, sn, _) in zip(n_major, swapped):
        b = sm // per_n  # the transposed walk's block rows count N's blocks per element
        assert (tm, tn) == (b * per_m + sn, sm % per_n) and brow == b * N + tn * BN
    assert n_major != [hl.tile_coords(t, M=M, N=N, BM=BM, BN=BN, G=G) for t in range(tiles)]


def test_a_1x1_cluster_walks_the_tiles_as_before():
    """cluster (1, 1), rank 0: tile_coords is the walk of the kernels measured before clusters
    (the grouped order, G block rows a group)."""
    from bocast.space.operators import _hopper_layout as hl

    for t in range(32 * 16):
        G = 8
        r = t % (G * 16)
        assert hl.tile_coords(t, M=4096, N=4096, BM=128, BN=256, G=G) == \
            (t // (G * 16) * G + r % G, r // G, r // G * 256)


def test_a_cluster_kernel_multicasts_the_shared_half_and_releases_both_ctas_stages():
    """2x1: B's tensor map moves half-tiles (128 of 256 rows), the producer multicasts its half
    (CTA mask 0b11) after waiting on a stage both CTAs' consumers release, A stays a plain
    load; the empty barriers count 2 consumers x 2 CTAs; each release arrives on both CTAs'
    barriers through mapa'd shared::cluster addresses, CTA-scoped (the wait too: cluster-scoped
    they cost 20-26%, RESULTS.md); the barrier inits are fenced
    for the cluster and a cluster barrier follows them and ends the kernel. The launch carries
    cluster dims (2, 1, 1), as TVM's host code launches it."""
    op = Gemm(4096, 4096, 4096, space="v3")
    low = lowered(op, CLUSTER_2X1)
    assert low.cluster == (2, 1, 1) and low.grid == (132, 1, 1)
    assert low.tensor_maps["B_map"]["box"] == [64, 128]
    assert low.tensor_maps["A_map"]["box"] == [64, 128]
    src = low.source
    body = src[src.index('extern "C" __global__ void __launch_bounds__(384) main_kernel('):]
    assert body.count("_multicast__cluster(") == 1 and "(ushort)3)" in body
    assert body.count("bulk_tensor_2d_shared__cluster_global_mbarrier__complete_tx__bytes(") == 1
    assert "acquire_cluster" not in body and "release_cluster_shared" not in body
    assert "(&(empty_ptr[0]))), (uint)4)" in body  # 2 consumers x 2 CTAs
    assert "mapa_u32_shared__cluster_u32(" in body
    assert "mbarrier_arrive_nocount_arrive_shared__cluster_b64(" in body
    assert "fence_mbarrier_init_mbarrier_init_release_cluster()" in body
    assert body.count("tvm_builtin_cuda_cluster_sync()") == 2
    assert body.rstrip().endswith("tvm_builtin_cuda_cluster_sync();\n}")
    a12 = lowered(op, {**CLUSTER_2X1, "cluster": "1x2"})
    assert a12.tensor_maps["A_map"]["box"] == [64, 64] and a12.tensor_maps["B_map"]["box"] == \
        [64, 256]
    plain = lowered(op, BEST_4096)
    body = plain.source.split("main_kernel(")[-1]
    assert plain.cluster == (1, 1, 1) and "multicast" not in body and "mapa" not in body
    assert "cluster_sync" not in body and "acquire_cluster" not in body


def test_the_cluster_launch_reaches_the_runner_task():
    """The builder's result carries the cluster dims to the worker's task (and a result built
    before clusters reads as (1, 1, 1))."""
    from bocast.measure.builder import BuildResult, from_dict
    from bocast.measure.runner import kernel_task
    from bocast.records.status import Status

    op = Gemm(*SMALL, space="v3")
    b = BuildResult(key="k", status=Status.OK, kernel="main_kernel", grid=(8, 1, 1),
                    args=("A_map", "B_map", "C"), cluster=(2, 1, 1), cubin=b"x")
    assert kernel_task(op, b, seed=0, repeats=1, warmup_ms=1)["cluster"] == (2, 1, 1)
    assert from_dict(b.to_dict()).cluster == (2, 1, 1)
    old = b.to_dict()
    del old["cluster"]
    assert from_dict(old).cluster == (1, 1, 1)


def test_a_cluster_launch_config_is_cuLaunchKernelEx_s():
    """cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute as cuda.h lays them out (56 and
    72 bytes; the stream at 32, the attributes at 40, their count at 48; the value at 8), with
    one CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (4) attribute holding the cluster dims."""
    import ctypes

    from bocast.measure.gpu_worker import LaunchAttribute, LaunchConfig, launch_config

    assert ctypes.sizeof(LaunchConfig) == 56 and ctypes.sizeof(LaunchAttribute) == 72
    assert (LaunchConfig.hStream.offset, LaunchConfig.attrs.offset,
            LaunchConfig.numAttrs.offset) == (32, 40, 48)
    assert LaunchAttribute.value.offset == 8
    config, attrs = launch_config((132, 1, 1), (384, 1, 1), 196608, 0xBEEF, (2, 1, 1))
    assert (config.gridDimX, config.blockDimX, config.sharedMemBytes) == (132, 384, 196608)
    assert config.hStream == 0xBEEF and config.numAttrs == 1
    assert ctypes.addressof(config.attrs.contents) == ctypes.addressof(attrs)
    raw = ctypes.string_at(ctypes.addressof(attrs), 20)
    assert raw[:4] == (4).to_bytes(4, "little")
    assert raw[8:20] == b"".join(x.to_bytes(4, "little") for x in (2, 1, 1))


def test_a_cluster_kernel_launches_with_cuLaunchKernelEx(monkeypatch):
    """Kernel.launch (no GPU: a stand-in driver records the calls): a kernel with cluster dims
    goes through cuLaunchKernelEx with one cluster attribute and the parameters cuLaunchKernel
    would get; a kernel without through cuLaunchKernel, as before."""
    import ctypes

    from bocast.measure import gpu_worker
    from bocast.measure.gpu_worker import Kernel, LaunchConfig

    calls = []

    class Driver:
        def cuLaunchKernelEx(self, config, func, params, extra):
            cfg = ctypes.cast(config, ctypes.POINTER(LaunchConfig)).contents
            attr = cfg.attrs[0]
            calls.append(("ex", (cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes, cfg.hStream,
                                 cfg.numAttrs, attr.id, attr.value.clusterDim.x,
                                 attr.value.clusterDim.y, attr.value.clusterDim.z),
                          ctypes.c_void_p.from_address(params[0]).value))
            return 0

        def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            calls.append(("plain", (gx.value, bx.value, smem.value), None))
            return 0

    monkeypatch.setattr(gpu_worker, "_CU", Driver())
    kernel = Kernel.__new__(Kernel)
    kernel.func, kernel.grid, kernel.block, kernel.dynamic_smem = None, (8, 1, 1), (384, 1, 1), 4096
    kernel.cluster = (2, 1, 1)
    kernel.launch([0xABC0], 0x77)
    assert calls == [("ex", (8, 384, 4096, 0x77, 1, 4, 2, 1, 1), 0xABC0)]
    kernel.cluster = (1, 1, 1)
    kernel.launch([0xABC0], 0x77)
    assert calls[1] == ("plain", (8, 384, 4096), None)


#: cluster kernels the GPU ladder times (bocast/tools/hopper_ladder.py rows 10*)
CLUSTER_CONFIGS = [CLUSTER_2X1, CLUSTER_2X1 | {"epilogue": "tma"},
                   CLUSTER_2X1 | {"persistent": "off"}, CLUSTER_2X1 | {"cluster": "1x2"},
                   CLUSTER_2X1 | {"bn": 128, "stages": 6, "inflight": 1},
                   CLUSTER_2X1 | {"arrangement": "pingpong", "bn": 128, "stages": 6,
                                  "raster": 8}]


@needs_nvcc
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 1024, 1000)])
def test_cluster_kernels_build_for_sm_90a_without_spills(shape):
    """Cluster kernels through the builder (TVM's launch checked against the template's, the
    cluster dims in the result): each builds for sm_90a within the registers, without spills,
    a stack frame or serialized wgmma."""
    op = Gemm(*shape, space="v3")
    configs = []
    for config in CLUSTER_CONFIGS:
        config = {**config, "raster": 1 if shape[0] % 1024 else config["raster"]}
        if op.space.validate(config):
            assert shape[0] % 1024 and config["cluster"] == "1x2", config  # ragged M, A shared
            continue
        configs.append(config)
    for config, res in zip(configs, build_configs(op, configs)):
        assert res["status"] == "ok", (config, res["error"])
        f = res["features"]
        assert f["registers"] <= 255 and f.get("spill_stores", 0) == 0, (config, f)
        assert f.get("stack_bytes", 0) == 0 and not f.get("wgmma_serialized"), (config, f)
        assert tuple(res["cluster"]) == (2, 1, 1)


def test_the_cluster_ladder_rows_are_what_match_selects():
    """MATCH='^8 |^9 |^10|cluster' (a regex searched in each row's name, as the ladder's build
    does) selects every cluster row of the ladder and, for comparison, rows 8 and 9 and the
    1x1 kernels named beside the cluster rows at the other shapes: issue 24's three large
    GEMM shapes with a 2x1 cluster, persistent and not, and a ragged GEMM and a bmm."""
    import re

    from bocast.tools import hopper_ladder as ladder
    match = re.compile("^8 |^9 |^10|cluster")
    picked, clustered = [], set()
    for (name_op, shape, _space), variants in ladder.SHAPES.items():
        for name, change in variants:
            config = {**ladder.BASE, **change}
            if config.get("cluster", "1x1") != "1x1":
                clustered.add((name_op, tuple(shape), name))
            if match.search(name):
                picked.append((name_op, tuple(shape), name, config))
    assert clustered <= {(op, shape, name) for op, shape, name, _ in picked}
    one = [(op, shape, name) for op, shape, name, c in picked if c.get("cluster", "1x1") == "1x1"]
    assert {name.split()[0] for op, shape, name in one if shape == (4096, 4096, 4096)} == \
        {"8", "9"}
    for shape in ((4096, 4096, 4096), (2048, 8192, 1024), (4096, 4096, 14336)):
        mine = [c for op, s, _, c in picked if s == shape]
        assert {c.get("cluster", "1x1") for c in mine} >= {"1x1", "2x1", "1x2"}
        assert {c["persistent"] for c in mine if c.get("cluster") == "2x1"} == {"on", "off"}
    assert any(op == "bmm" for op, *_ in clustered)
    assert ("gemm", (1000, 1024, 1000)) in {(op, shape) for op, shape, _ in clustered}
    assert len(picked) <= 36  # a small file (each row holds its cubin)


def test_the_lowering_refuses_a_launch_tvm_would_not_make():
    """lower_tirx checks the template's launch (grid, block, cluster, dynamic shared memory: what
    the runner launches) against TVM's host code (what an export's kernel.so launches): a
    cluster kernel whose TirxKernel forgot its cluster is refused, naming both."""
    import dataclasses

    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    op = Gemm(*SMALL, space="v3")
    config = CLUSTER_2X1 | {"bn": 128, "raster": 1}
    kernel = op.apply(config)
    assert kernel.cluster == (2, 1, 1)
    with pytest.raises(RuntimeError, match=r"'cluster': \(1, 1, 1\).*'cluster': \(2, 1, 1\)"):
        lower_tirx(dataclasses.replace(kernel, cluster=(1, 1, 1)),
                   target_overrides=op.build_options(config)["target"])


@needs_nvcc
def test_a_cluster_record_exports_with_its_cluster_launch(tmp_path):
    """Export of a cluster kernel: kernel.json says the cluster dims the runner launched it
    with (kernel.so's TVM host code launches it with the same, lower_tirx checked)."""
    import bocast

    workload = {"op": "gemm", "shape": list(SMALL), "space": "v3"}
    config = CLUSTER_2X1 | {"bn": 128, "raster": 1}
    path = str(tmp_path / "s.db")
    with bocast.create_study(workload=workload, strategy="random", store=path) as study:
        study.tell(config, tflops=10.0, latency_ms=0.0067, repeats=10)
    kernel = bocast.export(path, out=tmp_path / "k")
    assert kernel.meta["kernel"]["cluster"] == [2, 1, 1]
    assert kernel.meta["kernel"]["grid"] == [8, 1, 1]
    assert "multicast::cluster" in (tmp_path / "k" / "kernel.cu").read_text()
