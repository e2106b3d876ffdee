"""Space v3 for skinny GEMMs (issue 38 item 3): the target's SM count taken from the workload,
and split K (the ``split_k`` knob: a tile's k blocks divided among CTAs whose fp32 partial
sums add into the zeroed output). The split's index maps are checked by simulating the
kernel's walk against numpy; the constraints by name; the generated CUDA and static sm_90a
builds on the CPU. The kernels' results are checked on the GPU
(experiments/device/skinny_check.sh)."""

import json

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_layout as hl
from bocast.space.operators._hopper_plan import Plan
from bocast.space.operators.operator import (
    WorkloadError,
    from_workload,
    get_operator,
    make,
    make_named,
    on_gpu,
)
from tests.builds import check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")

#: a skinny decode GEMM's kernel: 128 x 128 tiles, the tma epilogue (TMA's reduce-add)
SKINNY = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumers": 2,
          "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
          "raster": 1, "epilogue": "tma", "split_k": 4}


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


def walk(p: Plan):
    """Every CTA's walk as the kernel's producer makes it: per CTA rank and step, (block row,
    block column, first k block, k blocks), over the persistent or one-a-unit grid."""
    out = []
    for cl in range(p.clusters):
        n = (p.units // p.CS - cl + p.clusters - 1) // p.clusters  # the kernel's n_tiles
        for rank in range(p.CS):
            for i in range(n):
                t = cl + i * p.clusters
                tm, tn, _ = p.tile(t, rank)
                out.append((tm, tn, p.k0(t), p.KB))
    return out


def check_walk(p: Plan):
    """:func:`walk` of ``p`` computes every (tile, k block) pair exactly once over all CTAs, and
    summing each unit's partial product of its k slice (what the reduce-add does) gives the
    kernel's product X Y^T of its operands (X [p.M, K], Y [p.N, K]; random) against numpy.
    Slices past an edge are cut, as TMA zero-fills. Returns the walk's units."""
    units = walk(p)
    seen = sorted((tm, tn, k0 + kb) for tm, tn, k0, kb_n in units for kb in range(kb_n))
    assert seen == [(i, j, kb) for i in range(p.tiles_m) for j in range(p.tiles_n)
                    for kb in range(p.KT)]
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((p.M, p.K)), rng.standard_normal((p.N, p.K))
    P = np.zeros((p.M, p.N))
    for tm, tn, k0, kb_n in units:
        r, q = slice(tm * p.BM, (tm + 1) * p.BM), slice(tn * p.BN, (tn + 1) * p.BN)
        k = slice(k0 * p.BK, (k0 + kb_n) * p.BK)
        P[r, q] += X[r, k] @ Y[q, k].T
    np.testing.assert_allclose(P, X @ Y.T, rtol=1e-10, atol=1e-10)
    return units


@pytest.mark.parametrize("M, N, K, change", [
    (128, 4096, 4096, {}),
    (16, 1000, 1000, {"bm": 64, "consumers": 1, "bn": 64, "split_k": 8, "bk": 32}),  # ragged
    (128, 512, 2048, {"split_k": 8, "persistent": "off"}),
    (256, 1024, 1024, {"cluster": "2x1", "split_k": 2, "raster": 2}),
    (128, 1024, 1024, {"cluster": "1x2", "split_k": 2}),
    (64, 512, 512, {"bm": 64, "consumers": 1, "split_k": 1}),
])
@pytest.mark.parametrize("sm_count", [132, 114, 10])
def test_each_k_slice_of_each_tile_is_computed_once_and_sums_to_the_product(M, N, K, change,
                                                                           sm_count):
    """The walk of units (k slice, tile): every (tile, k block) pair exactly once over all
    CTAs, whatever the grid; and summing each unit's partial product of its k slice (what the
    reduce-add does) gives A B^T, against numpy."""
    config = {**SKINNY, **change}
    p = Plan(config, M, N, K, sm_count=sm_count)
    assert p.grid == (min(sm_count, p.units) if config["persistent"] == "on" else p.units)
    assert len(check_walk(p)) == p.units == p.tiles * p.splits


def test_a_cluster_pairs_its_ctas_on_the_same_k_slice():
    """Both CTAs of a cluster load halves of one shared tile: at each step they hold the same
    k slice (a unit index counts the cluster's blocks)."""
    p = Plan({**SKINNY, "cluster": "2x1", "split_k": 4}, 256, 1024, 4096)
    for cl in range(p.clusters):
        n = (p.units // 2 - cl + p.clusters - 1) // p.clusters
        for i in range(n):
            t = cl + i * p.clusters
            (tm0, tn0, _), (tm1, tn1, _) = p.tile(t, 0), p.tile(t, 1)
            assert tn0 == tn1 and tm1 == tm0 + 1


@pytest.mark.parametrize("shape, change, violated", [
    ((128, 4096, 4096), {}, []),                                 # 32 tiles: 64 < 132
    ((128, 4096, 4096), {"split_k": 8}, []),                     # 32 x 4 = 128 < 132
    ((128, 4096, 4096), {"split_k": 8, "bn": 64}, ["split_k_only_below_a_wave"]),
    ((4096, 4096, 4096), {"split_k": 2}, ["split_k_only_below_a_wave"]),
    ((128, 4096, 4160), {"split_k": 2}, ["split_k_divides_k_blocks"]),  # 65 k blocks
    ((128, 4096, 4104), {"split_k": 1}, []),                     # ragged K, one slice
    ((128, 4096, 4096), {"epilogue": "v2"}, []),
    ((128, 4096, 4096), {"epilogue": "scalar", "split_k": 2}, []),
])
def test_split_k_constraints_accept_and_refuse_by_name(shape, change, violated):
    space = Gemm(*shape, space="v3").space
    assert space.validate({**SKINNY, **change}) == violated


def test_split_k_needs_an_fp32_output():
    space = Gemm(128, 4096, 4096, space="v3", dtype="bf16:bf16").space
    assert space.validate({**SKINNY, "split_k": 2}) == ["split_k_needs_fp32_output"]
    assert space.validate({**SKINNY, "split_k": 1}) == []



def test_split_k_refuses_a_fused_epilogue():
    """bias and activation apply to the whole sum: no k slice may fuse them into its part."""
    space = make("gemm", (128, 4096, 4096), dtype="bf16:fp32", space="v3", fuse="gelu").space
    assert space.validate({**SKINNY, "split_k": 2}) == ["split_k_without_fuse"]
    assert space.validate({**SKINNY, "split_k": 1}) == []

def test_the_split_k_knob_defaults_to_one_for_configurations_recorded_before_it():
    """The v3 datasets and stores hold no split_k: theirs read as 1, today's kernel, and the
    spaces of shapes whose tiles fill a wave keep the same feasible set (every split_k > 1 is
    refused there)."""
    space = Gemm(4096, 4096, 4096, space="v3").space
    config = {k: v for k, v in SKINNY.items() if k != "split_k"}
    assert space.knob("split_k").default == 1 and space.from_json(config)["split_k"] == 1
    cols = space.columns([{**config, "bn": 256}])
    assert cols["units"][0] == cols["tiles"][0] == 32 * 16
    sample = space.sample(64, rng=0)
    assert {c["split_k"] for c in sample} == {1}


def test_the_target_sm_count_sets_the_grid_and_the_waves():
    """A 114-SM H100 PCIe gets its own persistent grid and waves; the constraint that splits
    below a wave counts its SMs."""
    config = {**SKINNY, "split_k": 8}
    h200, pcie = Gemm(128, 4096, 4096, space="v3"), Gemm(128, 4096, 4096, space="v3",
                                                          sm_count=114)
    c132, c114 = h200.space.columns([config]), pcie.space.columns([config])
    # 32 tiles x 8 slices: 256 units, 2 waves of 132 or 3 of 114
    assert (c132["grid"][0], c114["grid"][0]) == (132, 114)
    assert c132["wave_efficiency"][0] == pytest.approx(256 / 264)
    assert c114["wave_efficiency"][0] == pytest.approx(256 / 342)
    assert h200.space.validate(config) == []  # half the units, 128, < 132
    assert pcie.space.validate(config) == ["split_k_only_below_a_wave"]  # 128 >= 114
    plan = Plan(config, 128, 4096, 4096, sm_count=114)
    assert plan.grid == 114


def test_the_sm_count_is_recorded_only_where_it_changes_the_kernel():
    """Only a v3 workload of other than 132 SMs names it, so every workload recorded before
    (stores, datasets, the records library: all 132) keeps its identity; a workload naming it
    rebuilds the same operator; a bad count gets one error naming it."""
    base = {"op": "gemm", "shape": [128, 4096, 4096], "dtype": "fp16:fp32", "layout": "NT",
            "space": "v3"}
    assert Gemm(128, 4096, 4096, space="v3", sm_count=132).workload == base
    assert Gemm(128, 4096, 4096, space="v2", sm_count=114).workload == {**base, "space": "v2"}
    pcie = from_workload({**base, "sm_count": 114})
    assert pcie.workload == {**base, "sm_count": 114} and pcie.matmul.sm_count == 114
    assert from_workload(base).matmul.sm_count == hl.DEFAULT_SM_COUNT
    bmm = make("bmm", (4, 256, 256, 64), space="v3", sm_count=114)
    assert bmm.workload["sm_count"] == 114
    for bad in (0, 2000, "114", True):
        with pytest.raises(WorkloadError, match="sm_count"):
            from_workload({**base, "sm_count": bad})
    with pytest.raises(WorkloadError, match="unknown option"):
        make("gemv", (4096, 4096, 16), sm_count=114)


def test_the_shipped_v3_datasets_keep_their_workloads():
    from importlib.resources import files

    for name in ("gemm_4096_4096_4096_v3.json", "bmm_12_512_512_64_v3.json"):
        meta = json.loads(files("bocast.data").joinpath(name).read_text())
        assert from_workload(meta["workload"]).workload == meta["workload"]


def test_a_live_run_names_its_gpus_sm_count():
    """on_gpu: a v3 GEMM rebuilt for the GPU's SMs (the space choice kept); unchanged for 132,
    for a workload naming its own, for an unknown count, for an operator without the option."""
    op = make_named("gemm", (128, 4096, 4096))
    assert op.workload["space"] == "v3"
    pcie = on_gpu(op, 114)
    assert pcie.workload["sm_count"] == 114 and pcie.space_choice == op.space_choice
    assert on_gpu(op, 132).workload == op.workload and on_gpu(op, None) is op
    assert on_gpu(pcie, 100) is pcie
    gemv = make("gemv", (4096, 4096, 16))
    assert on_gpu(gemv, 114) is gemv


def test_space_auto_takes_v3_from_m_16(monkeypatch):
    """auto: v3 for M >= AUTO_V3_SKINNY_MIN_M (16) with N >= 64, v2 below it or for N < 64;
    the switch off (None) gives v3 from 64 rows only."""
    from bocast.space.operators import gemm

    assert gemm.AUTO_V3_SKINNY_MIN_M == 16
    for shape in ((16, 4096, 4096), (32, 6144, 4096), (63, 64, 1000), (4096, 4096, 4096)):
        assert make_named("gemm", shape).workload["space"] == "v3", shape
    for shape in ((8, 4096, 4096), (15, 4096, 4096), (16, 32, 4096), (32, 63, 4096)):
        assert make_named("gemm", shape).workload["space"] == "v2", shape
    assert "N >= 64 and M >= 16" in gemm.Gemm.v3_rule
    monkeypatch.setattr(gemm, "AUTO_V3_SKINNY_MIN_M", None)
    assert make_named("gemm", (16, 4096, 4096)).workload["space"] == "v2"
    assert make_named("gemm", (64, 4096, 4096)).workload["space"] == "v3"


def test_split_k_reaches_the_generated_cuda_and_the_launch():
    """split_k > 1: TMA's reduce-add (tma epilogue), red.global.add.v2.f32 (v2) or .f32
    (scalar) instead of stores, C zeroed by the launch (TirxKernel.zeroed through the build to
    the runner's task); the grid counts units. split_k 1: stores, nothing zeroed."""
    from bocast.measure.builder import BuildResult
    from bocast.measure.runner import kernel_task
    from bocast.records.status import Status

    op = Gemm(128, 1024, 1000, space="v3")  # ragged K: 16 k blocks of 64 (the last partial)
    tma = lowered(op, SKINNY)
    assert tma.zeroed == ("C",) and tma.grid == (8 * 4, 1, 1)
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" in tma.source
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" not in tma.source
    v2 = lowered(op, {**SKINNY, "epilogue": "v2"}).source
    assert "red.global.add.v2.f32" in v2 and "st.global" not in v2
    scalar = lowered(op, {**SKINNY, "epilogue": "scalar"}).source
    assert "red.global.add.f32" in scalar and "red.global.add.v2" not in scalar
    one = lowered(op, {**SKINNY, "split_k": 1})
    assert one.zeroed == () and "cp.reduce" not in one.source
    b = BuildResult(key="k", status=Status.OK, kernel=tma.kernel, args=tma.args,
                    tensor_maps=tma.tensor_maps, zeroed=tma.zeroed, cubin=b"x")
    assert kernel_task(op, b, seed=0, repeats=1, warmup_ms=1)["zeroed"] == ("C",)


@needs_nvcc
def test_split_k_kernels_build_for_sm_90a_without_spills():
    """A sample with split_k > 1 (each epilogue, a cluster, a ragged skinny shape) through the
    builder's own path: nvcc for sm_90a, ptxas's report (-Xptxas -v) without spills, stack or
    serialized wgmma; the build carries the zeroed output."""
    op = Gemm(16, 1000, 4096, space="v3")
    configs = [{**SKINNY, "bm": 64, "consumers": 1, "split_k": 8},
               {**SKINNY, "bm": 64, "consumers": 1, "epilogue": "v2", "split_k": 2,
                "bn": 256, "regs": "24/240", "stages": 3}]
    assert any(c["split_k"] > 1 for c in op.space.sample(64, rng=3))  # samples split K too
    for res in check_v3_builds(op, configs):
        assert res["zeroed"] == ("C",)
    skinny = Gemm(128, 1024, 4096, space="v3")
    (res,) = check_v3_builds(skinny, [{**SKINNY, "cluster": "1x2", "epilogue": "scalar",
                                       "split_k": 4}])
    assert tuple(res["cluster"]) == (2, 1, 1) and res["zeroed"] == ("C",)
