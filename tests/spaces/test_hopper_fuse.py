"""Space v3's fused epilogue (issue 39, item 4): the workload field ``fuse``, act(scale (A B^T)
+ bias) applied to the fp32 accumulators before the output's rounding. What the workload
accepts and refuses, its tensors (the bias vector, the operands' narrower interval) and
identity, the float64 reference (against numpy's own arithmetic) and the unfused torch
sequence that is the vendor baseline, the generated CUDA (the bias loaded once a tile column,
each activation's helper, both after fp8's scales and before the store; gelu's erf, branch-free
to 1.5e-7) and static sm_90a
builds without spills. Their results are checked on the GPU
(experiments/device/epilogue_check.sh)."""

import math
import re

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators.operator import WorkloadError, get_operator, make_named
from tests.builds import check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")
FUSES = ("bias", "relu", "gelu", "silu", "bias+relu", "bias+gelu", "bias+silu")
#: the live best at GEMM 4096^3 (tests/spaces/test_hopper_dtypes.py's BEST)
BEST = {"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2"}
OUT = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


@pytest.mark.parametrize("dtype", ("bf16:bf16", "bf16:fp32", "fp16:fp16", "e4m3:bf16"))
def test_fuse_is_a_workload_field_with_a_bias_tensor(dtype):
    """"fuse" is in the workload only when there is one (every workload before it reads the
    same); the bias is an input [N] in the output's type, after the scales; A and B are drawn
    so that their products spread about 1 (a^2 sqrt(K / 9) = 1, with fp8's mean scales)."""
    plain = Gemm(256, 512, 4096, dtype=dtype, space="v3")
    assert "fuse" not in plain.workload and plain.fuse is None
    assert Gemm(256, 512, 4096, dtype=dtype, space="v3", fuse="none").workload == plain.workload
    op = Gemm(256, 512, 4096, dtype=dtype, space="v3", fuse="bias+gelu")
    assert op.workload == {**plain.workload, "fuse": "bias+gelu"}
    names = [t.name for t in op.tensors()]
    assert names == [t.name for t in plain.tensors()][:-1] + ["bias", "C"]
    bias = op.tensors()[-2]
    assert (bias.shape, bias.dtype, bias.role) == ((512,), OUT[dtype[-4:]], "input")
    a = op.tensors()[0].values[1]
    scales = ((1 / 64 + 1 / 16) / 2) ** 2 if dtype.startswith("e4m3") else 1.0
    assert op.tensors()[0].values == op.tensors()[1].values == (-a, a)
    assert a * a * math.sqrt(4096 / 9) * scales == pytest.approx(1.0)
    assert [t.name for t in Gemm(256, 512, 4096, dtype=dtype, space="v3",
                                 fuse="silu").tensors()] == [t.name for t in plain.tensors()]
    assert op.tolerance == plain.tolerance and op.flops == plain.flops


@pytest.mark.parametrize("shape, options, message", [
    ((256, 256, 256), {"fuse": "bias+tanh", "space": "v3"},
     r"gemm: fuse 'bias\+tanh' not known; use one of \['none', 'bias', 'relu', 'gelu', "
     r"'silu', 'bias\+relu', 'bias\+gelu', 'bias\+silu'\]$"),
    ((256, 256, 256), {"fuse": "gelu+bias", "space": "v3"}, "not known"),
    ((256, 256, 256), {"fuse": "gelu", "space": "v2"},
     r"fuse 'gelu' needs space v3 .*space v2 has no fused epilogue"),
    ((256, 256, 256), {"fuse": "bias", "layout": "NN", "space": "v3"}, "needs layout NT"),
])
def test_bad_fuse_is_refused_by_name(shape, options, message):
    with pytest.raises(WorkloadError, match=message):
        make_named("gemm", shape, **options)


def test_fuse_refusals_of_other_operators_and_types():
    with pytest.raises(WorkloadError, match=r"bmm: unknown option\(s\) \['fuse'\]"):
        make_named("bmm", (4, 128, 128, 64), fuse="gelu", space="v3")
    with pytest.raises(WorkloadError, match="fuse must be a string"):
        make_named("gemm", (256, 256, 256), fuse=True)


def test_space_auto_takes_v3_for_a_fused_gemm_and_says_why():
    op = make_named("gemm", (8, 4096, 4096), dtype="fp16:fp32", fuse="bias+gelu")
    assert op.workload["space"] == "v3" and "fuse 'bias+gelu' needs space v3" in op.space_choice


def _numpy_epilogue(fuse: str, c: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """The epilogue in numpy's float64, the textbook formulas (math.erf: torch's F.gelu)."""
    if fuse.startswith("bias"):
        c = c + bias
    act = fuse.removeprefix("bias").removeprefix("+")
    if act == "relu":
        return np.maximum(c, 0.0)
    if act == "gelu":
        return c * 0.5 * (1.0 + np.vectorize(math.erf)(c / math.sqrt(2.0)))
    if act == "silu":
        return c / (1.0 + np.exp(-c))
    return c


def _inputs(op, seed=0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    types = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
             "float8_e4m3fn": torch.float8_e4m3fn}
    out = []
    for t in op.tensors():
        if t.role == "input":
            lo, hi = t.values
            out.append((torch.rand(t.shape, generator=gen) * (hi - lo) + lo).to(types[t.dtype]))
    return out


@pytest.mark.parametrize("fuse", FUSES)
def test_reference_is_the_float64_epilogue_and_the_baseline_the_unfused_sequence(fuse):
    """op.reference: the float64 product, then the bias and the activation in float64, as
    numpy computes them; the baseline (torch.mm in bf16, then + bias, then F.<act>, each in
    bf16) within the tolerance of it, named so. The check tells the epilogues apart: each
    other one is off by far more than the tolerance (hence the operands' narrow interval)."""
    op = Gemm(64, 96, 4096, dtype="bf16:bf16", space="v3", fuse=fuse)
    ins = _inputs(op)
    ref = op.reference(*ins)
    c = ins[0].double().numpy() @ ins[1].double().numpy().T
    bias = ins[2].double().numpy() if fuse.startswith("bias") else None
    assert np.allclose(ref.numpy(), _numpy_epilogue(fuse, c, bias), rtol=1e-12, atol=1e-12)
    assert 0.8 < float(c.std()) < 1.25  # the products spread about 1: the non-linear range
    fast = op.reference_fast(*ins)
    steps = (["+ bias"] if fuse.startswith("bias") else []) + \
        ([f"F.{fuse.split('+')[-1]}"] if fuse != "bias" else [])
    assert op.reference_name.startswith("torch.mm (cuBLAS, bf16 in and out), then "
                                        + ", ".join(steps))
    err = float((fast.double() - ref).norm() / ref.norm())
    assert fast.dtype == ins[0].dtype and err < op.tolerance
    # a bias where the workload has none: the one of the same workload with a bias
    bias = bias if bias is not None else _inputs(Gemm(64, 96, 4096, dtype="bf16:bf16",
                                                      space="v3", fuse="bias"))[2].double().numpy()
    for other in ("none", *FUSES):
        if other != fuse:
            wrong = _numpy_epilogue(other, c, bias)
            assert np.linalg.norm(wrong - ref.numpy()) / np.linalg.norm(ref.numpy()) \
                > 5 * op.tolerance, other


def test_fp8_reference_scales_then_adds_the_bias():
    """fp8: scale_a scale_b (A B^T) + bias, then the activation, all in float64."""
    op = Gemm(64, 96, 256, dtype="e4m3:fp32", space="v3", fuse="bias+silu")
    a, b, sa, sb, bias = _inputs(op)
    c = (a.double() @ b.double().t()) * (sa.double() * sb.double())
    x = c + bias.double()
    assert np.allclose(op.reference(a, b, sa, sb, bias).numpy(), (x / (1 + (-x).exp())).numpy(),
                       rtol=1e-12, atol=1e-12)


def test_the_kernels_erf_is_erf_to_fp32_precision():
    """gelu's erf in the kernel (Abramowitz & Stegun 7.1.26, branch-free): within 1.5e-7 of
    math.erf at every z >= 0, so gelu(x) = x Phi(x) within 1e-7 |x| of torch's F.gelu."""
    from bocast.space.operators._fuse import erf_as

    z = np.linspace(0.0, 12.0, 120_001)
    assert np.abs(erf_as(z) - np.vectorize(math.erf)(z)).max() < 1.5e-7


def test_warm_start_keeps_fused_records_apart():
    """A fused workload's rows are no source for another epilogue's (nor the plain one's):
    it is a workload field, not measured to rank alike."""
    from bocast.strategies.bo.sources import incompatibility

    target = Gemm(4096, 4096, 4096, dtype="bf16:bf16", space="v3", fuse="bias+gelu")
    plain = {k: v for k, v in target.workload.items() if k != "fuse"}
    for w in (plain, {**target.workload, "fuse": "bias+relu"}):
        why, _ = incompatibility(w, target)
        assert why is not None and "fuse" in why
    assert incompatibility({**target.workload, "shape": [2048, 14336, 4096]}, target)[0] is None


@pytest.mark.parametrize("act", ("relu", "gelu", "silu"))
def test_the_generated_cuda_loads_the_bias_once_a_tile_column_and_applies_the_activation(act):
    """At a ragged N (1008 of 256-column tiles): each consumer thread loads the bias of its
    BN / 4 columns once a tile (clamped to N - 1 past N: never stored), adds it to its 2 x
    atoms accumulators of each, applies bocast_<act> (gelu: the erf form, torch's default),
    and only then stores; with fp8 after the scales. The bias is a kernel parameter of its
    own."""
    op = Gemm(1000, 1008, 1024, dtype="bf16:bf16", space="v3", fuse=f"bias+{act}")
    low = lowered(op, BEST)
    assert low.args == ("A_map", "B_map", "C", "bias")  # the runner binds them by name
    helper = {"relu": "return fmaxf(x, 0.0f);", "gelu": "float z = fabsf(x) * 0.7071067811865",
              "silu": "return x / (1.0f + expf(-x));"}[act]
    assert re.search(rf"float bocast_{act}\(float x\) {{\s*{re.escape(helper)}", low.source)
    if act == "gelu":  # erf(|x| / sqrt 2) by ERF_AS, the sign put back, no branch
        assert "return 0.5f * x * (1.0f + copysignf(erf_z, x));" in low.source
        assert "__expf(-z * z)" in low.source and "1.061405429f" in low.source
    consumer = low.source[low.source.index("setmaxnreg_inc"):]
    assert len(re.findall(r"\(\(float\)bias_ptr\[", consumer)) == 256 // 4
    # the columns that may be past N (1008 = 3 x 256 + 240: 8 jj + 2 (lt % 4) (+1) from 240 of
    # the last tile) clamp to N - 1, no others
    assert len(re.findall(r"bias_ptr\[min\([^;]*\+ (24[0189])\), 1007\)\]", consumer)) == 4
    assert consumer.count(", 1007)]") == 4
    applied = re.findall(rf"acc_ptr\[(\d+)\] = bocast_{act}\(\(acc_ptr\[(\d+)\] \+ bv_ptr\[\d\]\)",
                         consumer)
    assert sorted(int(a) for a, b in applied if a == b) == list(range(128))
    store = consumer.index("bocast_st_global_nv_bfloat162(")
    assert consumer.rindex(f"bocast_{act}(") < store
    plain = lowered(Gemm(1000, 1008, 1024, dtype="bf16:bf16", space="v3", fuse=act), BEST)
    assert plain.args == ("A_map", "B_map", "C") and "bias_ptr" not in plain.source
    assert plain.source.count(f"= bocast_{act}(acc_ptr[") == 128
    fp8 = lowered(Gemm(256, 512, 256, dtype="e4m3:bf16", space="v3", fuse=f"bias+{act}"),
                  BEST | {"bk": 128, "epilogue": "tma"})
    assert fp8.args == ("A_map", "B_map", "C_map", "bias", "scale_a", "scale_b")
    late = fp8.source[fp8.source.index("setmaxnreg_inc"):]
    scaled = late.index("acc_ptr[0] = (acc_ptr[0] * sc_ptr[0])")
    assert scaled < late.index(f"acc_ptr[0] = bocast_{act}((acc_ptr[0] + bv_ptr[0]))") \
        < late.index("bocast_st_shared_nv_bfloat162(")


@needs_nvcc
def test_fused_gemm_kernels_build_for_sm_90a_without_spills():
    """Each activation with a bias, at a ragged shape: bf16:bf16 + gelu with the best's layout
    (128 accumulators a thread beside the bias), e4m3:bf16 + relu with the tma epilogue,
    fp16:fp16 + silu ping-pong; bf16:fp32 gelu without a bias, scalar stores. Four builds."""
    check_v3_builds(Gemm(1000, 1008, 1024, dtype="bf16:bf16", space="v3", fuse="bias+gelu"),
                    [BEST])
    check_v3_builds(Gemm(1000, 1008, 1008, dtype="e4m3:bf16", space="v3", fuse="bias+relu"),
                    [BEST | {"bk": 128, "epilogue": "tma"}])
    check_v3_builds(Gemm(1000, 1024, 1000, dtype="fp16:fp16", space="v3", fuse="bias+silu"),
                    [BEST | {"bm": 128, "bn": 128, "arrangement": "pingpong"}])
    check_v3_builds(Gemm(1024, 1000, 1000, dtype="bf16:fp32", space="v3", fuse="gelu"),
                    [BEST | {"epilogue": "scalar", "bn": 192}])
