"""Space v3's deep ring (``_hopper_layout.STAGES``: 8, 10, 12 and 16 stages beside 2-6, GEMM,
bmm and GEMV; the convolutions keep 2-6): which depths each tile may take (the 227 KB
arithmetic, by hand), and static sm_90a builds of deep-ring kernels (cuBLAS's skinny kernels
keep 10-16 k blocks in flight: experiments/results/fresh_skinny_h200) without spills, with the
SASS check of their accumulators. Their results and speed are checked on the GPU
(experiments/device/deep_ring_check.sh)."""

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators._hopper_layout import SHALLOW_STAGES, STAGES
from bocast.space.operators.operator import make
from tests.builds import check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

#: knobs that keep every other constraint out of the way (one CTA a tile, no cluster, no split)
BASE = {"bk": 64, "consumers": 1, "arrangement": "cooperative", "regs": "off", "inflight": 0,
        "persistent": "off", "raster": 1, "raster_major": "m", "epilogue": "scalar",
        "cluster": "1x1", "split_k": 1, "split_reduce": "atomic", "swap_ab": "off"}


def test_gemm_bmm_and_gemv_offer_the_deep_ring_and_the_convolutions_keep_theirs():
    for op, shape in (("gemm", (16, 6144, 4096)), ("bmm", (12, 512, 512, 64)),
                      ("gemv", (6144, 4096, 8))):
        assert make(op, shape, space="v3").space.knob("stages").choices == STAGES, op
    for op, shape in (("conv2d", (16, 14, 14, 256, 256, 3, 3, 1, 1, 1)),
                      ("conv2d_transpose", (16, 14, 14, 256, 128, 4, 4, 2, 1, 1, 0)),
                      ("conv1d", (16, 512, 256, 256, 3, 1, 1, 1))):
        assert make(op, shape, space="v3").space.knob("stages").choices == SHALLOW_STAGES, op
    assert set(SHALLOW_STAGES) < set(STAGES)  # the datasets' rows stay in the GEMM's domain


# (C's bm, bn, swap_ab, bk, epilogue, the deepest ring that fits): 227 KB = 232448 bytes less
# 1024 of mbarriers leave 231424 for the ring, a stage (kernel rows + columns) x BK x 2 bytes,
# and the tma epilogue's 16 KB a consumer
DEEPEST = [
    (16, 64, "on", 64, "scalar", 16),    # cuBLAS's 64x16: 10240 a stage, 22 would fit
    (32, 64, "on", 64, "scalar", 16),    # 12288: 18
    (64, 64, "on", 64, "scalar", 12),    # 16384: 14 fit, 12 the deepest offered
    (16, 128, "on", 64, "scalar", 12),   # 18432: 12
    (64, 128, "off", 64, "scalar", 8),   # 24576: 9
    (64, 128, "off", 64, "tma", 8),      # 24576 x 8 + 16384 = 212992
    (64, 64, "off", 32, "scalar", 16),   # 8192: 28
    (128, 128, "off", 64, "scalar", 6),  # 32768: 7 fit, 6 offered
    (64, 256, "off", 64, "tma", 5),      # 40960 x 5 + 16384 = 221184; 6: 262144
    (128, 256, "off", 64, "tma", 4),     # 49152 x 4 + 2 x 16384 = 229376
    (256, 128, "off", 32, "scalar", 8),  # 24576: 9
]


@pytest.mark.parametrize("bm, bn, swap, bk, epilogue, deepest", DEEPEST)
def test_the_deepest_ring_a_tile_takes_is_the_227_kb_arithmetic(bm, bn, swap, bk, epilogue,
                                                                 deepest):
    space = make("gemm", (128, 6144, 4096), space="v3").space
    rows = bn if swap == "on" else bm  # the kernel's tile rows: two consumers from 128
    config = {**BASE, "bm": bm, "bn": bn, "swap_ab": swap, "bk": bk, "epilogue": epilogue,
              "consumers": 2 if rows >= 128 else 1}
    why = {s: space.validate({**config, "stages": s}) for s in STAGES}
    assert max(s for s in STAGES if why[s] == []) == deepest, why
    assert all(why[s] == ["shared_memory_le_227KB"] for s in STAGES if s > deepest), why
    ring = space.columns([{**config, "stages": deepest}])["smem_bytes"][0]
    assert ring == deepest * (bm + bn) * bk * 2 + (16384 * config["consumers"] if epilogue
                                                   == "tma" else 0) + 1024


#: deep-ring kernels: cuBLAS's no-split 64x16 at M = 16 (swap, 16 stages), the same in a cluster
#: (the producer's k loop rolled), a swapped 64x64 of 12 stages with split K, persistent and a
#: wgmma group in flight, and an unswapped 64x128 of 8 with the tma epilogue
DEEP = [
    ((16, 6144, 4096), {**BASE, "bm": 16, "bn": 64, "swap_ab": "on", "stages": 16}),
    ((16, 6144, 4096), {**BASE, "bm": 16, "bn": 64, "swap_ab": "on", "stages": 16,
                        "cluster": "1x2", "raster_major": "n", "regs": "40/232"}),
    ((64, 6144, 4096), {**BASE, "bm": 64, "bn": 64, "swap_ab": "on", "stages": 12,
                        "split_k": 2, "persistent": "on", "inflight": 1, "regs": "24/240"}),
    ((128, 6144, 4096), {**BASE, "bm": 64, "bn": 128, "stages": 8, "epilogue": "tma",
                         "persistent": "on", "inflight": 1, "raster": 2}),
]


@needs_nvcc
def test_deep_ring_kernels_build_for_sm_90a_without_spills_and_wait_before_their_reads():
    """Each built as a tuning run builds it (nvcc for sm_90a, ptxas -v): no spills, stack or
    serialized wgmma, the dynamic shared memory the space counts; and the SASS check
    (bocast.measure.sass) finds no accumulator read above its wgmma wait, the inflight 1
    kernels keeping their one group in flight."""
    from bocast.measure.sass import early_accumulator_reads, sass

    results = []
    for shape in dict.fromkeys(s for s, _ in DEEP):
        op = make("gemm", shape, space="v3")
        results += check_v3_builds(op, [c for s, c in DEEP if s == shape])
    for (_, config), res in zip(DEEP, results):
        text = sass(res["cubin"])
        assert early_accumulator_reads(text) == [], config
        assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in text) == (config["inflight"] == 1), config


def cuda(op, config) -> str:
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"]).source


def test_a_ring_of_other_than_a_power_of_two_walks_a_running_position():
    """_hopper_ring: at 10 and 12 stages the producer's and the cooperative consumer's k loops
    take the stage and phase from a running pair (advanced at S - 1 -> 0, the phase flipped),
    no division by S; ping-pong's consumers skip the other's tiles and keep the division; at 8
    and 16 stages both index by the k block's count, a mask (``& (S - 1)``)."""
    op = make("gemm", (128, 6144, 4096), space="v3")
    tile = {**BASE, "bm": 64, "bn": 48, "epilogue": "v2", "persistent": "on", "inflight": 1}
    for S in (10, 12):
        src = cuda(op, {**tile, "stages": S})
        assert f"% {S})" not in src and f"/ {S})" not in src, S
        for pos in ("pos", "cpos"):  # the producer's, the consumer's
            assert f"({pos}_ptr[0] == {S - 1})" in src, (S, pos)
            assert f"{pos}_ptr[1] = ({pos}_ptr[1] ^ 1);" in src, (S, pos)
        pingpong = cuda(op, {**tile, "stages": S, "consumers": 2, "arrangement": "pingpong"})
        assert f"(pos_ptr[0] == {S - 1})" in pingpong, S
        assert f"(cpos_ptr[0] == {S - 1})" not in pingpong and f"% {S})" in pingpong, S
    for S in (8, 16):
        src = cuda(op, {**tile, "stages": S})
        assert f"_ptr[0] == {S - 1})" not in src and f"& {S - 1})" in src, S
