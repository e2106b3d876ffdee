"""Split K for a persistent walk's last round (``tail_split``, ``_hopper_tail``): the tiles of a
last, partial round cut into k slices whose fp32 sums add into an output slice 0 zeroes first
(a flag a tile in the module's memory). Checked here on the CPU: the constraints by name; the
walk (every (tile, k block) once, the sums against numpy, the ring's count of k blocks, the
order the flags rely on); the generated CUDA; static sm_90a builds. The kernels' results on
the GPU: experiments/device/tail_check.sh."""

from collections import Counter

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_tail as tl
from bocast.space.operators._hopper_matmul import wave_efficiency
from bocast.space.operators._hopper_plan import Plan
from bocast.space.operators.operator import get_operator, make
from tests.builds import check_v3_builds
from tests.spaces.test_hopper_split import lowered

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")
#: the default command's pick at 2048x28672x8192 (H200: 0.999 of cuBLAS; 2,400 tiles, the
#: last of 19 rounds 24 of them), with its last round split 4 ways
P = {"arrangement": "pingpong", "bk": 64, "bm": 128, "bn": 192, "cluster": "1x1",
     "consumers": 2, "epilogue": "v2", "inflight": 1, "persistent": "on", "raster": 8,
     "raster_major": "m", "regs": "40/232", "split_k": 1, "split_reduce": "atomic", "stages": 4,
     "swap_ab": "off", "tail_split": 4}
#: a cooperative 128 x 256 kernel of two consumers (576 tiles at 4096 x 4608: 48 last, 96
#: slices)
L = {**P, "arrangement": "cooperative", "bn": 256, "regs": "24/240", "tail_split": 2}
L_SHAPE = (4096, 4608, 4096)


def test_tail_split_constraints_accept_and_refuse_by_name():
    space = Gemm(2048, 28672, 8192, space="v3").space
    assert space.validate(P) == []
    assert space.validate({**P, "persistent": "off"}) == ["tail_split_needs_persistent"]
    assert space.validate({**P, "cluster": "1x2"}) == ["tail_split_alone"]
    # 24 last-round tiles x 8 = 192 slices: two rounds
    assert space.validate({**P, "tail_split": 8}) == ["tail_split_in_one_round"]
    # 16 x 8 = 128 tiles of 128 x 256 at 2048 x 2048: one round, not full
    small = Gemm(2048, 2048, 8192, space="v3").space
    assert "tail_split_needs_a_partial_round" in small.validate({**P, "bn": 256,
                                                                  "arrangement": "cooperative"})
    # 16 x 33 = 528 tiles of 128 x 128 at 2048 x 4224: four whole rounds of 132
    whole = Gemm(2048, 4224, 4096, space="v3").space
    assert whole.validate({**P, "bn": 128}) == ["tail_split_needs_a_partial_round"]
    # K = 4032: 63 k blocks of 64
    odd = Gemm(2048, 28672, 4032, space="v3").space
    assert odd.validate(P) == ["tail_split_divides_k_blocks"]
    bf16 = Gemm(2048, 28672, 8192, space="v3", dtype="bf16:bf16").space
    assert bf16.validate(P) == ["tail_split_needs_fp32_output"]
    gelu = make("gemm", (2048, 28672, 8192), dtype="bf16:fp32", space="v3", fuse="gelu").space
    assert gelu.validate(P) == ["tail_split_without_fuse"]
    # a configuration recorded before the knob reads as 1: the kernel it timed
    before = {k: v for k, v in P.items() if k != "tail_split"}
    assert space.complete(before)["tail_split"] == 1


def walk(p: Plan):
    """Every CTA's units as the kernel walks them: (cta, i, unit, block row, block column,
    first k block, k blocks)."""
    out = []
    for cta in range(p.grid):
        for i in range((p.units - cta + p.grid - 1) // p.grid):
            u = cta + i * p.grid
            tm, tn, _ = p.tile(u, 0)
            out.append((cta, i, u, tm, tn, p.k0(u), p.unit_k(u)))
    return out


@pytest.mark.parametrize("M, N, K, config, sm_count", [
    (2048, 28672, 8192, P, 132),
    (*L_SHAPE, L, 132),
    (1000, 3000, 512, {**L, "bn": 128, "tail_split": 2}, 132),  # ragged M, N
    (2048, 28672, 8192, {**P, "tail_split": 2}, 114),  # an H100 PCIe's SMs
    (512, 768, 1024, {**P, "bn": 64, "bk": 32, "raster": 4}, 40),
])
def test_each_k_block_of_each_tile_is_computed_once_and_the_slices_sum_to_the_product(
        M, N, K, config, sm_count):
    """Whole tiles first, then each last-round tile's k slices: every (tile, k block) pair
    exactly once; the units' partial products summed (the adds) give X Y^T against numpy; the
    ring's count before a CTA's i-th unit (it0) is the k blocks of its earlier units. The
    product is checked at the small shapes (numpy's float64 at 2048 x 28672 x 8192: minutes)."""
    assert Gemm(M, N, K, space="v3", sm_count=sm_count).space.validate(config) == []
    p = Plan(config, M, N, K, sm_count=sm_count)
    last = p.tiles % p.grid
    assert p.tail > 1 and last and p.dp == p.tiles - last and p.rounds == p.tiles // p.grid
    assert p.units == p.dp + last * p.tail and p.grid == sm_count
    units = walk(p)
    seen = sorted((tm, tn, k0 + kb) for *_, tm, tn, k0, n in units for kb in range(n))
    assert seen == [(i, j, kb) for i in range(p.tiles_m) for j in range(p.tiles_n)
                    for kb in range(p.KT)]
    done = Counter()
    for cta, i, _, *_, n in units:
        assert p.it0(i) == done[cta]
        done[cta] += n
    if M * N * K > 2**31:
        return
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((M, K)), rng.standard_normal((N, K))
    C = np.zeros((M, N))
    for *_, tm, tn, k0, n in units:
        r, q = slice(tm * p.BM, (tm + 1) * p.BM), slice(tn * p.BN, (tn + 1) * p.BN)
        k = slice(k0 * p.BK, (k0 + n) * p.BK)
        C[r, q] += X[r, k] @ Y[q, k].T
    np.testing.assert_allclose(C, X @ Y.T, rtol=1e-10, atol=1e-10)


def test_a_tiles_slices_are_consecutive_units_slice_0_first_and_the_flags_count_back_to_zero():
    """The order the flags rely on: a last-round tile's slices are consecutive units, slice 0
    (which zeroes) the lowest, so every unit waits only for a lower one; each flag is one tile
    and counts tail x its zeroing consumers (the last arrival resets it)."""
    for config, shape in ((P, (2048, 28672, 8192)), (L, L_SHAPE)):
        p = Plan(config, *shape, sm_count=132)
        zeroing = tl.zeroing_consumers(p)
        arrivals, first = Counter(), {}
        for u in range(p.dp, p.units):
            flag, ks = (u - p.dp) // p.tail, (u - p.dp) % p.tail
            first.setdefault(flag, u)
            assert ks == u - first[flag] and p.tile(u, 0) == p.tile(first[flag], 0)
            arrivals[flag] += zeroing
        assert sorted(arrivals) == list(range(p.tiles - p.dp))
        assert set(arrivals.values()) == {p.tail * zeroing}


def test_the_last_round_counts_as_its_share_in_the_wave_efficiency():
    """2,400 tiles on 132 SMs: 19 rounds whole, 18 + 1/4 with the last split 4 ways (96 slices
    in one round of a quarter's length)."""
    one = wave_efficiency(2400, 2400, 1, 1, 132)
    assert one == pytest.approx(2400 / (19 * 132))
    assert wave_efficiency(2400, 2400, 1, 1, 132, 4) == pytest.approx(2400 / (18.25 * 132))
    # 8 ways: 192 slices, two rounds of an eighth
    assert wave_efficiency(2400, 2400, 1, 1, 132, 8) == pytest.approx(2400 / (18.25 * 132))


def body(source: str) -> str:
    return source[source.rindex("__global__"):]


def test_the_source_declares_the_flags_zeroes_before_the_first_wgmma_and_adds_after_waiting():
    """The flags (one a last-round tile) and their functions in the CUDA source; in the
    kernel, slice 0's zeroing (plain stores, the fence, the arrival) before the unit's first
    wgmma, the later slices' wait after the last wgmma and before the adds; both epilogues (a
    whole tile's stores, a slice's adds); nothing zeroed by the launch. tail_split 1 is the
    kernel of before the knob."""
    op = Gemm(2048, 28672, 8192, space="v3")
    for epilogue, store, adds in (("v2", "st_vec_global_v2", "global_add_v2"),
                                  ("tma", "cp_async_bulk_tensor", "cp_reduce_async_bulk")):
        k = lowered(op, {**P, "epilogue": epilogue})
        assert k.zeroed == ()
        assert f'extern "C" __device__ unsigned int {tl.FLAGS}[24];' in k.source
        b = body(k.source)
        mma, wait = b.index("mma_async"), b.index("bocast_flag_wait(")
        assert b.index("fence_acq_rel_gpu") < b.index("bocast_flag_arrive(") < mma, epilogue
        assert b.rindex("mma_async") < wait < b.index(adds), epilogue
        assert b.count("bocast_flag_wait(") == 1 and store in b, epilogue
    no_tail = lowered(op, {**P, "tail_split": 1}).source
    assert tl.FLAGS not in no_tail
    assert no_tail == lowered(op, {k: v for k, v in P.items() if k != "tail_split"}).source


@needs_nvcc
def test_tail_split_kernels_build_for_sm_90a_without_spills():
    """P (ping-pong) with the v2 and the tma epilogue, and L (cooperative, 128 x 256, the
    register-heaviest tile), built as a tuning run builds them."""
    check_v3_builds(Gemm(2048, 28672, 8192, space="v3"), [P, {**P, "epilogue": "tma"}])
    check_v3_builds(Gemm(*L_SHAPE, space="v3"), [L])
