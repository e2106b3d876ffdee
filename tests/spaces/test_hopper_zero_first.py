"""Split K without the zeroing launch (``split_reduce`` zero_first, ``_hopper_zero_first``): slice
0 of a tile zeroes the tile's output at its unit's start and arrives on the tile's flag; every
slice adds its partial sums as the atomic mode does, a later slice once the flag says the
zeroing is done. Checked here on the CPU: the constraint by name; the walk's order (no unit
waits for a unit that could be waiting itself, the flags' counts return to 0) over sampled
configurations of many shapes; the generated CUDA (the flags declared, the zeroing before the
unit's first wgmma, no zeroed output); static sm_90a builds without spills whose SASS reads no
accumulator while its wgmma may run. The kernels' results and times: on the GPU
(experiments/device/zero_first_check.sh)."""

import json
import pathlib
from collections import Counter

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.measure.sass import early_accumulator_reads, sass
from bocast.space.operators import _hopper_swap as sw
from bocast.space.operators import _hopper_zero_first as zf
from bocast.space.operators._hopper_layout import target_sms
from bocast.space.operators._hopper_plan import Plan
from bocast.space.operators.operator import get_operator, make
from tests.builds import check_v3_builds
from tests.spaces.test_hopper_split import SKINNY, lowered

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")
ZF = {"split_reduce": "zero_first"}
#: the atomic bests of the last H200 tunes at N,K = 6144,4096, whose zero_first twins
#: zero_first_check.sh times: swap_ab with the scalar epilogue (M 16), the tma epilogue (M 64),
#: v2 with a 2x1 cluster and one unit a CTA (M 128), all ping-pong
BESTS = pathlib.Path(__file__).parents[2] / "experiments/results/skinny_tconv_h200x4/summaries.json"
TWIN_MS = (16, 64, 128)
#: a ragged GEMM's (M, N, K = 100, 1000, 4040): two cooperative consumers a tile, persistent,
#: the tma epilogue (TMA clips its reduce-adds at the edges; the zeroing's stores test theirs)
RAGGED = {**SKINNY, "bm": 128, "consumers": 2, "split_k": 2, **ZF}


def test_zero_first_needs_split_k_and_an_fp32_output_and_no_fuse():
    space = Gemm(128, 4096, 4096, space="v3").space
    assert space.validate({**SKINNY, **ZF}) == []
    assert space.validate({**SKINNY, **ZF, "split_k": 1}) == ["split_reduce_zero_first_needs_split"]
    bf16 = Gemm(128, 4096, 4096, space="v3", dtype="bf16:bf16").space
    assert bf16.validate({**SKINNY, **ZF}) == ["split_k_needs_fp32_output"]
    gelu = make("gemm", (128, 4096, 4096), dtype="bf16:fp32", space="v3", fuse="gelu").space
    assert gelu.validate({**SKINNY, **ZF}) == ["split_k_without_fuse"]
    assert "zero_first" in space.knob("split_reduce").choices


def kernel_plan(op, config) -> Plan:
    """The Plan ``_hopper_matmul.kernel`` makes of ``config`` (swapped: over C^T)."""
    s = op.matmul
    if config.get("swap_ab") == "on":
        return Plan(sw.kernel_config(config), s.N, s.M, s.K, max(s.batch, 1),
                    sm_count=target_sms(s))
    return Plan(config, s.M, s.N, s.K, max(s.batch, 1), sm_count=target_sms(s))


def check_walk(p: Plan):
    """The kernel's walk of ``p`` (the consumers' loop of device_body): per CTA, its units in
    order and the consumers that run each; checks the order zero_first relies on."""
    arrivals: Counter = Counter()
    zeroings: Counter = Counter()
    tile_of: dict[int, tuple] = {}
    zeroing = zf.zeroing_consumers(p)
    for cta in range(p.grid):
        cl, rank = cta // p.CS, cta % p.CS
        n_tiles = (p.units // p.CS - cl + p.clusters - 1) // p.clusters
        for i in range(n_tiles):
            t = cl + i * p.clusters
            ks, flag = p.slice_and_flag(t, rank)
            tm, tn, _ = p.tile(t, rank)
            assert tile_of.setdefault(flag, (tm, tn)) == (tm, tn), "a flag is one tile"
            consumers = [i % p.NC] if p.pingpong else list(range(p.NC))
            assert len(consumers) == zeroing
            if ks == 0:
                # a slice-0 unit comes before anything of its CTA that could wait: the first
                # unit of the CTA's walk (ping-pong: consumer 0's, which waits for no turn),
                # and with one unit a CTA a block index below every waiting unit's
                assert i == 0, (cta, i)
                assert cta < p.tiles, cta
                zeroings[flag] += len(consumers)
            else:
                assert cta >= p.tiles or p.grid < p.units, cta
            arrivals[flag] += len(consumers)
    assert sorted(tile_of) == list(range(p.tiles))
    # every tile zeroed by its zeroing consumers once, and its count complete (back to 0)
    assert set(zeroings.values()) == {zeroing} and len(zeroings) == p.tiles
    assert set(arrivals.values()) == {p.splits * zeroing}


SHAPES = [(16, 6144, 4096), (32, 6144, 4096), (64, 6144, 4096), (128, 6144, 4096),
          (100, 1000, 4040), (24, 1001, 1008), (16, 14336, 4096), (128, 1024, 1024),
          (8, 4096, 14336), (256, 1024, 2048)]


@pytest.mark.parametrize("shape, sm_count", [(s, 132) for s in SHAPES]
                         + [((64, 6144, 4096), 114), ((3, 128, 256, 1024), 132)])
def test_no_unit_waits_for_a_unit_that_could_wait_and_every_flag_returns_to_zero(shape,
                                                                                   sm_count):
    """Over sampled zero_first configurations (every knob as the space allows): a slice-0 unit
    is the first unit of its CTA's walk (persistent on) or one of the lowest block indices
    (one unit a CTA), so it zeroes before its CTA waits for anything; each flag is one tile,
    zeroed once, and counts split_k x its zeroing consumers (the last arrival resets it)."""
    op = (make("bmm", shape, space="v3") if len(shape) == 4
          else Gemm(*shape, space="v3", sm_count=sm_count))
    configs = op.space.sample_restricted(60, np.random.default_rng(0),
                                         {"split_reduce": ["zero_first"]})
    assert configs, shape  # the shape splits K
    modes = Counter()
    for c in configs:
        p = kernel_plan(op, c)
        assert p.zero_first and p.splits > 1
        check_walk(p)
        modes[(c["persistent"], c["arrangement"], p.CS)] += 1
    assert {k[0] for k in modes} == {"on", "off"}, modes  # both walks among the samples


def body(source: str) -> str:
    """The kernel's definition in its CUDA source (after its declaration)."""
    return source[source.rindex("__global__"):]


def test_the_source_declares_the_flags_and_zeroes_before_the_first_wgmma():
    """The flags and their functions in the CUDA source; in the kernel, slice 0's zeroing
    (plain stores of C, all of them, then the fence and the arrival) before the unit's first
    wgmma, the later slices' one wait after the last wgmma and before the adds; nothing zeroed
    by the launch (atomic: C, and no flags)."""
    op = Gemm(100, 1000, 4040, space="v3")
    tiles = kernel_plan(op, RAGGED).tiles
    for epilogue, store, adds in (("tma", "C_ptr[", "cp_reduce_async_bulk"),
                                  ("v2", "st_vec_global_v2", "global_add_v2")):
        k = lowered(op, {**RAGGED, "epilogue": epilogue})
        assert k.zeroed == ()
        assert f'extern "C" __device__ unsigned int {zf.FLAGS}[{tiles}];' in k.source
        b = body(k.source)
        mma, wait = b.index("mma_async"), b.index("bocast_flag_wait(")
        assert b.index(store) < b.rindex(store) < b.index("fence_acq_rel_gpu") \
            < b.index("bocast_flag_arrive(") < mma, epilogue
        assert b.rindex("mma_async") < wait < b.index(adds) and b.count("bocast_flag_wait(") == 1
    atomic = lowered(op, {**RAGGED, "split_reduce": "atomic"})
    assert atomic.zeroed == ("C",) and zf.FLAGS not in atomic.source


@needs_nvcc
def test_zero_first_kernels_build_without_spills_and_read_no_accumulator_early():
    """The twins' zero_first kernels (swap_ab scalar, tma, v2 with a 2x1 cluster and one unit
    a CTA; ping-pong) and a ragged cooperative one, built as a tuning run
    builds them (-Xptxas -v): no spills, no stack, no serialized wgmma, nothing zeroed by the
    launch, and no SASS instruction touching an accumulator while its wgmma group may run
    (the zeroing's moves and stores come after the previous unit's last wait)."""
    bests = json.loads(BESTS.read_text())
    twins = [(m, bests[f"skinny_{m}x6144x4096"]["best_config"]) for m in TWIN_MS]
    for knob, values in (("epilogue", {"scalar", "tma", "v2"}), ("persistent", {"on", "off"}),
                         ("swap_ab", {"on", "off"}), ("cluster", {"1x1", "2x1"})):
        assert {c[knob] for _, c in twins} == values, knob  # the sample this test promises
    cases = [(Gemm(m, 6144, 4096, space="v3"), {**c, **ZF}) for m, c in twins]
    cases.append((Gemm(100, 1000, 4040, space="v3"), RAGGED))
    results = []
    for op, config in cases:
        results += check_v3_builds(op, [config])
    for (_, config), res in zip(cases, results):
        assert tuple(res["zeroed"]) == (), config
        assert early_accumulator_reads(sass(res["cubin"])) == [], config
