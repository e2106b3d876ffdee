"""Narrow N tiles on space v3 (``_hopper_narrow``: bn 48 and 96 for skinny GEMMs and GEMV, wgmma's
N, unswapped): which spaces offer them, the constraints by name, the walk and fragments of a
96- and a 48-column tile against numpy, and static sm_90a builds. Their results and speed are
checked on the GPU (experiments/device/narrow_check.sh)."""

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators._hopper_narrow import NARROW_BN
from bocast.space.operators._hopper_plan import Plan
from bocast.space.operators.operator import make
from tests.builds import check_v3_builds
from tests.spaces.test_hopper_split import check_walk
from tests.spaces.test_hopper_swap import fragment_elements

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

#: cuBLAS's tile at 128x6144x4096 (nvjet 96x64_64x10_1x2): two M tiles of 64 x 96 columns,
#: 128 CTAs, the pair sharing B's tile in a 2x1 cluster, a 10-stage ring
NARROW = {"bm": 64, "bn": 96, "bk": 64, "stages": 10, "consumers": 1,
          "arrangement": "cooperative", "regs": "off", "inflight": 1, "persistent": "off",
          "raster": 1, "raster_major": "m", "epilogue": "scalar", "cluster": "2x1",
          "split_k": 1, "split_reduce": "atomic", "swap_ab": "off"}


def test_skinny_gemms_and_gemv_offer_narrow_tiles_and_the_rest_keep_their_spaces():
    for op, shape in (("gemm", (128, 6144, 4096)), ("gemm", (16, 1000, 1000)),
                      ("gemv", (6144, 4096, 8))):
        assert set(NARROW_BN) <= set(make(op, shape, space="v3").space.knob("bn").choices), op
    for op, shape in (("gemm", (129, 6144, 4096)), ("gemm", (4096, 4096, 4096)),
                      ("bmm", (12, 512, 512, 64)),
                      ("conv2d", (16, 14, 14, 256, 256, 3, 3, 1, 1, 1))):
        assert make(op, shape, space="v3").space.knob("bn").choices == (64, 128, 192, 256), op


@pytest.mark.parametrize("change, violated", [
    ({}, []),
    ({"bm": 128, "bn": 48, "cluster": "1x2", "stages": 8}, []),
    ({"swap_ab": "on", "epilogue": "scalar"}, ["bm_whole_atoms", "narrow_bn_unswapped"]),
    ({"swap_ab": "on", "bm": 16, "consumers": 2, "arrangement": "pingpong"},
     ["narrow_bn_unswapped"]),
    # fp32's 32-column staging boxes: 96 is 3 an atom, so an odd count with one atom; 48 is
    # no whole number of boxes
    ({"epilogue": "tma", "stages": 8}, ["tma_boxes_pair_up"]),
    ({"epilogue": "tma", "stages": 6, "bm": 128, "cluster": "1x1"}, []),
    ({"epilogue": "tma", "stages": 6, "bm": 128, "bn": 48, "cluster": "1x1"},
     ["tma_boxes_pair_up"]),
    ({"epilogue": "v2", "bn": 48, "stages": 16}, []),
    ({"stages": 12}, ["shared_memory_le_227KB"]),  # (64 + 96) x 128 B x 12 = 240 KB
])
def test_narrow_constraints_accept_and_refuse_by_name(change, violated):
    space = make("gemm", (128, 6144, 4096), space="v3").space
    assert sorted(space.validate({**NARROW, **change})) == sorted(violated)


def test_a_16_bit_output_takes_no_narrow_tile_in_the_tma_epilogue():
    space = make("gemm", (128, 6144, 4096), dtype="fp16:fp16", space="v3").space
    config = {**NARROW, "bm": 128, "cluster": "1x1", "epilogue": "tma", "stages": 6}
    assert space.validate(config) == ["tma_boxes_pair_up"]  # 96 is 1.5 boxes of 64 columns
    assert space.validate({**config, "bn": 128}) == []


@pytest.mark.parametrize("M, N, K, change", [
    (128, 960, 1024, {}),                                                # the pair, 10 tiles
    (128, 1000, 1000, {"cluster": "1x1", "bk": 32, "split_k": 2}),      # ragged N and K
    (128, 960, 1024, {"bm": 128, "bn": 48, "cluster": "1x2", "raster_major": "n"}),
    (100, 1000, 1024, {"bm": 128, "bn": 48, "cluster": "1x1", "persistent": "on"}),
])
def test_the_narrow_walk_computes_each_k_block_once_and_sums_to_the_product(M, N, K, change):
    config = {**NARROW, **change}
    assert make("gemm", (M, N, K), space="v3").space.validate(config) == []
    p = Plan(config, M, N, K)
    check_walk(p)
    # the consumers' fragments (m64nBNk16's map) cover the tile once
    assert sorted(fragment_elements(p)) == [(i, j) for i in range(p.BM) for j in range(p.BN)]


#: narrow kernels: cuBLAS's analog (64 x 96, 2x1 cluster, 10 stages), 128 x 96 with the tma
#: epilogue (two atoms: 6 boxes), 128 x 48 in a 1x2 cluster with the v2 epilogue, and 64 x 48
#: with split K, persistent, a 16-stage ring
NARROW_KERNELS = [
    ((128, 6144, 4096), NARROW),
    ((128, 6144, 4096), {**NARROW, "bm": 128, "cluster": "1x1", "epilogue": "tma",
                         "stages": 6, "inflight": 0}),
    ((128, 6144, 4096), {**NARROW, "bm": 128, "bn": 48, "cluster": "1x2", "epilogue": "v2",
                         "stages": 8, "regs": "40/232"}),
    ((64, 6144, 4096), {**NARROW, "bn": 48, "cluster": "1x1", "split_k": 2, "stages": 16,
                        "persistent": "on"}),
]


@needs_nvcc
def test_narrow_kernels_build_for_sm_90a_without_spills_and_wait_before_their_reads():
    """Each built as a tuning run builds it (nvcc for sm_90a, ptxas -v): no spills, stack or
    serialized wgmma, the dynamic shared memory the space counts; the SASS runs the 64 x 96
    (64 x 48) HGMMA and reads no accumulator above its wgmma wait."""
    from bocast.measure.sass import early_accumulator_reads, sass

    results = []
    for shape in dict.fromkeys(s for s, _ in NARROW_KERNELS):
        op = make("gemm", shape, space="v3")
        results += check_v3_builds(op, [c for s, c in NARROW_KERNELS if s == shape])
    for (_, config), res in zip(NARROW_KERNELS, results):
        text = sass(res["cubin"])
        assert f"HGMMA.64x{config['bn']}x16.F32" in text, config
        assert early_accumulator_reads(text) == [], config
