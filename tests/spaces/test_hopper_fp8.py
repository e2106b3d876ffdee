"""Space v3's fp8 GEMM (issue 39): ``e4m3:bf16`` and ``e4m3:fp32`` with per-tensor scales, and
``e5m2xe4m3:bf16``/``:fp32`` (A in e5m2). What
the workload accepts and refuses, ``space auto``, the tensors (the scales are inputs), the
float64 reference of the dequantized inputs and the vendor baseline (torch._scaled_mm), the
runner's fp8 tensor maps and inputs, the generated CUDA (wgmma k32 without transpose flags,
the descriptors' 32-byte step, TMA boxes and swizzles of 1-byte elements, the scales applied
once a tile) and static sm_90a builds without spills. Their results are checked on the GPU
(experiments/device/fp8_check.sh)."""

import re

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators.operator import WorkloadError, get_operator, make_named
from tests.builds import check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")
FP8 = ("e4m3:bf16", "e4m3:fp32", "e5m2xe4m3:bf16", "e5m2xe4m3:fp32")
OUT = {"bf16": "bfloat16", "fp32": "float32"}
#: (A's type, B's type, wgmma's) of each fp8 dtype
TYPES = {"e4m3": ("float8_e4m3fn", "float8_e4m3fn", "e4m3.e4m3"),
         "e5m2xe4m3": ("float8_e5m2", "float8_e4m3fn", "e5m2.e4m3")}
#: the fp16 live best's layout (tests/spaces/test_hopper_dtypes.py's BEST) at fp8's 128-byte
#: rows: BK 128
BEST = {"bm": 128, "bn": 256, "bk": 128, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2"}


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_gemm_workload_tensors_and_knobs(dtype):
    """A, B in e4m3, the two scales fp32 scalars (inputs, drawn away from 1), C in the output's
    type; fp32 accumulators; fp8's tolerance; BK counts 64- or 128-byte rows of 1-byte elements."""
    op = Gemm(256, 512, 256, dtype=dtype, space="v3")
    ins, out = dtype.split(":")
    a_type, b_type, _ = TYPES[ins]
    assert op.workload["dtype"] == dtype and op.workload["space"] == "v3"
    assert [(t.name, t.dtype, t.role, t.shape) for t in op.tensors()] == [
        ("A", a_type, "input", (256, 256)), ("B", b_type, "input", (512, 256)),
        ("scale_a", "float32", "input", (1,)), ("scale_b", "float32", "input", (1,)),
        ("C", OUT[out], "output", (256, 512))]
    lo, hi = op.tensors()[2].values
    assert 0 < lo < hi <= 1 / 16  # either scale left out: off by 16x at least
    assert op.matmul.acc_dtype == "float32" and op.tolerance == 2e-2
    assert tuple(op.space.knob("bk").choices) == (64, 128)
    bf16 = Gemm(256, 512, 256, dtype="bf16:fp32", space="v3")
    assert tuple(bf16.space.knob("bk").choices) == (32, 64)


@pytest.mark.parametrize("op, shape, options, message", [
    ("gemm", (256, 256, 256), {"dtype": "e4m3:fp32", "space": "v2"},
     r"dtype 'e4m3:fp32' needs space v3; space v2 implements \['fp16:fp32', 'fp16:fp16'\]$"),
    ("gemm", (256, 256, 256), {"dtype": "e4m3:bf16", "layout": "NN", "space": "v3"},
     r"needs layout NT \(B stored \[N, K\]\): fp8 wgmma reads both operands K-major"),
    ("gemm", (256, 256, 256), {"dtype": "e4m3:bf16", "layout": "NN"},
     "needs space v3.*v3 does not take this workload either.*needs layout NT"),
    ("gemm", (256, 200, 256), {"dtype": "e4m3:bf16"}, r"N and K multiples of 16.*N = 200"),
    ("gemm", (256, 256, 200), {"dtype": "e4m3:fp32", "space": "v3"}, r"K = 200"),
    ("gemm", (256, 256, 256), {"dtype": "e4m3:fp16"}, "not supported; use one of"),
    # e5m2 x e5m2 neither cuBLASLt nor this template takes; e4m3 x e5m2 is not listed yet
    ("gemm", (256, 256, 256), {"dtype": "e5m2:bf16"}, "not supported; use one of"),
    ("gemm", (256, 256, 256), {"dtype": "e4m3xe5m2:bf16"}, "not supported; use one of"),
    # bmm, gemv and the convolutions have no fp8: their lists do not name it
    ("bmm", (4, 128, 128, 64), {"dtype": "e4m3:bf16", "space": "v3"},
     r"bmm: dtype 'e4m3:bf16' not supported; use one of \['fp16:fp32', 'fp16:fp16', "
     r"'bf16:fp32', 'bf16:bf16'\]$"),
    ("gemv", (256, 256), {"dtype": "e4m3:bf16"}, r"use one of \['fp16:fp32', 'fp16:fp16'\]$"),
    ("conv2d", None, {"dtype": "e4m3:fp32", "space": "v3"}, "not supported; use one of"),
])
def test_fp8_refusals_name_what_is_accepted(op, shape, options, message):
    with pytest.raises(WorkloadError, match=message):
        make_named(op, shape, **options)


def test_space_auto_keeps_fp8_on_v3():
    """v2 has no fp8: auto takes v3 by its rule, and below it (M < 16) too, saying why."""
    op = make_named("gemm", (4096, 4096, 4096), dtype="e4m3:bf16")
    assert op.workload["space"] == "v3" and op.space_choice.startswith("v3 (auto: N >= 64 and M")
    small = make_named("gemm", (8, 4096, 4096), dtype="e4m3:fp32")
    assert small.workload["space"] == "v3"
    assert "v2 does not take this workload" in small.space_choice


def _inputs(op, seed=0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    types = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
             "float32": torch.float32}
    out = []
    for t in op.tensors()[:4]:
        lo, hi = t.values
        out.append((torch.rand(t.shape, generator=gen) * (hi - lo) + lo).to(types[t.dtype]))
    return out


@pytest.mark.parametrize("dtype", FP8)
def test_reference_is_the_dequantized_product_in_float64_and_the_baseline_scaled_mm(dtype):
    """The check's reference: scale_a scale_b (A B^T) of the fp8 values in float64, exact;
    the vendor baseline: torch._scaled_mm on the same tensors (B [N, K] transposed is the
    column-major [K, N] it takes), out_dtype the workload's, fast accumulation."""
    import torch

    op = Gemm(64, 96, 64, dtype=dtype, space="v3")
    a, b, sa, sb = _inputs(op)
    ref = op.reference(a, b, sa, sb)
    exact = (a.double() * sa.double()) @ (b.double() * sb.double()).t()
    assert ref.dtype == torch.float64 and torch.allclose(ref, exact, rtol=1e-12, atol=0)
    unscaled = a.double() @ b.double().t()
    assert float((unscaled - ref).norm() / ref.norm()) > 100  # the scales matter
    if not hasattr(torch, "_scaled_mm"):
        pytest.skip("this torch has no _scaled_mm")
    try:
        fast = op.reference_fast(a, b, sa, sb)
    except (RuntimeError, NotImplementedError) as e:  # a torch without a CPU _scaled_mm
        pytest.skip(f"torch._scaled_mm on the CPU: {e}")
    assert fast.dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype.split(":")[1]]
    names = {"e4m3": "e4m3 x e4m3", "e5m2xe4m3": "e5m2 x e4m3"}[dtype.split(":")[0]]
    assert f"(cuBLASLt, {names} in, per-tensor scales)" in op.reference_name
    assert op.reference_name.startswith("torch._scaled_mm(out_dtype=") and \
        "use_fast_accum=True" in op.reference_name
    assert float((fast.double() - ref).norm() / ref.norm()) < op.tolerance


def test_the_runner_encodes_fp8_tensor_maps_as_bytes_and_draws_each_inputs_interval():
    """CUtensorMapDataType UINT8 is 0 (cuda.h); make_inputs draws each input in its
    TensorSpec.values and builds it in its type (read from its source: it needs a GPU)."""
    import inspect

    from bocast.measure import gpu_worker, tensor_maps

    assert tensor_maps.TMA_DTYPES["float8_e4m3fn"] == 0
    src = inspect.getsource(gpu_worker.make_inputs)
    assert '"float8_e4m3fn": torch.float8_e4m3fn' in src and "t.values" in src


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_reaches_the_generated_cuda(dtype):
    """wgmma m64nBNk32 .e4m3.e4m3 with only scale_a/scale_b immediates (no transpose flags),
    four k32 steps of 32 bytes per 128-byte k block from 128-byte swizzled rows (64-byte ones
    at BK 64), tensor maps of fp8 boxes [BK, rows], the scales' product read once and applied
    to the accumulators, the kernel's parameters naming the scales."""
    op = Gemm(256, 512, 256, dtype=dtype, space="v3")
    a_type, b_type, mma = TYPES[dtype.split(":")[0]]
    low = lowered(op, BEST | {"bn": 128})
    src = low.source
    assert f"wgmma.mma_async.sync.aligned.m64n128k32.f32.{mma}" in src
    # ..., desc_a, desc_b, scale_d, imm-scale-a, imm-scale-b; and no trans-a, trans-b (the
    # 16-bit types' line ends "1, 1, 0, 0;")
    assert set(re.findall(r"%63\}, %64, %65, (\w+, [^;]*);", src)) == {"ps0, 1, 1"}
    assert low.args == ("A_map", "B_map", "C", "scale_a", "scale_b")
    assert low.tensor_maps["A_map"] == {"tensor": "A", "dtype": a_type,
                                        "dims": [256, 256], "strides": [256], "box": [128, 128],
                                        "swizzle": 3}
    assert low.tensor_maps["B_map"]["box"] == [128, 128]
    assert low.tensor_maps["B_map"]["dtype"] == b_type
    assert low.dynamic_smem == 4 * (128 + 128) * 128
    consumer = src[src.index("setmaxnreg_inc"):]
    starts = [int(x) for x in re.findall(
        r"descriptor\(\(&\(desc_b_ptr\[0\]\)\), \(&\(Sm_ptr\[[^;]* \+ (\d+)\)\]\)\), 1, 64, 3\);",
        consumer)]
    assert starts == [16384, 16416, 16448, 16480]  # B's rows after A's 128: +32 bytes a wgmma
    assert "(scale_a_ptr[0] * scale_b_ptr[0])" in consumer
    assert len(re.findall(r"acc_ptr\[\d+\] = \(acc_ptr\[\d+\] \* sc_ptr\[0\]\)", consumer)) == 64
    # once a tile: after its last wgmma and the wait for it (inflight 1: the wait after the k
    # loop), before the epilogue's first store
    late = lowered(op, BEST | {"bn": 128, "inflight": 1}).source
    late = late[late.index("setmaxnreg_inc"):]
    scale = late.index("acc_ptr[0] = (acc_ptr[0] * sc_ptr[0])")
    assert late.rindex("mma_async", 0, scale) < late.rindex("wgmma_wait_group", 0, scale) < scale
    assert "mma_async" not in late[scale:]
    store = "st_vec_global_v2_f32(" if dtype.endswith("fp32") else "bocast_st_global_nv_bfloat162("
    assert scale < late.index(store)
    sw64 = lowered(op, BEST | {"bn": 128, "bk": 64}).source
    assert ", 1, 32, 2)" in sw64 and sw64.count(f"k32_f32_{mma.replace('.', '_')}") > 0


def test_fp8_constraints():
    """The space's limits at 1-byte operands: a stage of 128 x 256 at BK 128 is 48 KB, so 5
    stages overflow the 227 KB (4 fit, with the tma epilogue's 32 KB too); a bf16 output's
    staging boxes still pair up; outside bk's domain (32) is no configuration at all."""
    op = Gemm(4096, 4096, 4096, dtype="e4m3:bf16", space="v3")
    assert op.space.validate(BEST) == []
    assert op.space.validate(BEST | {"epilogue": "tma"}) == []
    assert op.space.validate(BEST | {"stages": 5}) == ["shared_memory_le_227KB"]
    one_box = BEST | {"bm": 64, "bn": 64, "consumers": 1, "epilogue": "tma"}
    assert op.space.validate(one_box) == ["tma_boxes_pair_up"]
    assert Gemm(4096, 4096, 4096, dtype="e4m3:fp32", space="v3").space.validate(one_box) == []
    assert op.space.validate(BEST | {"bk": 32}) == ["bk.choice"]


def test_warm_start_keeps_fp8_apart_from_other_dtypes():
    """No measurement shows fp8 kernels rank like bf16 or fp16 ones: rows of another dtype are
    no source, as for every other workload field."""
    from bocast.strategies.bo.sources import incompatibility

    target = Gemm(4096, 4096, 4096, dtype="e4m3:bf16", space="v3")
    for other in ("bf16:bf16", "fp16:fp32", "e4m3:fp32", "e5m2xe4m3:bf16"):
        why, _ = incompatibility({**target.workload, "dtype": other}, target)
        assert why is not None and "dtype" in why, other
    assert incompatibility({**target.workload, "shape": [8192, 8192, 4096]}, target)[0] is None


@needs_nvcc
def test_fp8_gemm_kernels_build_for_sm_90a_without_spills():
    """At a ragged shape (TMA boxes and stores past every edge): each epilogue of the best's
    layout in e4m3:bf16, BK 64 (the 64-byte swizzle) and a sampled configuration; one of
    e4m3:fp32 at a whole shape with a 2x1 cluster; e5m2xe4m3:bf16 (mixed operand types) with
    the tma epilogue. Seven builds."""
    ragged = Gemm(1000, 1008, 1008, dtype="e4m3:bf16", space="v3")
    check_v3_builds(ragged, [BEST, BEST | {"epilogue": "tma"}, BEST | {"epilogue": "scalar"},
                             BEST | {"bk": 64, "bn": 128, "raster": 1},
                             *ragged.space.sample(1, rng=3)])
    fp32 = Gemm(4096, 4096, 4096, dtype="e4m3:fp32", space="v3")
    check_v3_builds(fp32, [BEST | {"epilogue": "tma", "cluster": "2x1", "raster": 8}])
    mixed = Gemm(1000, 1008, 1008, dtype="e5m2xe4m3:bf16", space="v3")
    check_v3_builds(mixed, [BEST | {"epilogue": "tma"}])
