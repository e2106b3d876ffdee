"""Space v3's convolutions in bf16:fp32, bf16:bf16 and fp16:fp16 (issue 39 item 2; the template:
bocast.space.operators._hopper_conv, both producers). What the workloads accept and refuse, that the
fp16:fp32 workloads recorded before keep their identity, the float64 reference and the cuDNN
baseline's types, the tensor maps in the operands' and the output's types and their driver
codes, what reaches the generated CUDA (bf16 wgmma, the 16-bit stores and staging boxes), and
a static sm_90a build of a sampled bf16 configuration of each producer. Their results are
checked on the GPU (experiments/device/bf16conv_check.sh)."""

import ctypes
import re

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _hopper_conv as hc
from bocast.space.operators import _hopper_im2col as im
from bocast.space.operators.operator import WorkloadError, make, make_named

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

#: ragged everywhere: M = 7 x 13 x 11 output pixels, K = 96 output channels (not a multiple of
#: 64 or of 128), no pixel tile covers 13 x 11; no network's layer
RAGGED = (7, 13, 11, 64, 96, 3, 3, 1, 1, 1)
TYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
NEW = ("bf16:fp32", "bf16:bf16", "fp16:fp16")
BASE = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2"}
IM2COL = {**BASE, "a_load": "im2col", "tile_w": None, "tile_h": None}
TILED = {**BASE, "a_load": "tiled", "tile_w": 4, "tile_h": 4}


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


@pytest.mark.parametrize("dtype", NEW)
@pytest.mark.parametrize("name, shape", [
    ("conv2d", RAGGED), ("conv2d_dilated", (4, 21, 21, 64, 64, 3, 3, 1, 2, 2)),
    ("conv1d", (4, 50, 64, 64, 3, 1, 1, 1)), ("conv3d", (2, 6, 9, 7, 64, 64, 3, 3, 3, 1, 1, 1))])
def test_every_direct_convolution_takes_the_16_bit_dtypes_on_v3(name, shape, dtype):
    op = make(name, shape, dtype=dtype, space="v3")
    ins, out = TYPES[dtype[:4]], TYPES[dtype[5:]]
    assert op.workload == {"op": name, "shape": list(op.workload["shape"]), "dtype": dtype,
                           "space": "v3"}
    assert [t.dtype for t in op.tensors()] == [ins, ins, out]
    assert op.matmul.acc_dtype == "float32" and op.matmul.out_dtype == out
    assert op.tolerance == {"float32": 1e-3, "float16": 5e-3, "bfloat16": 1e-2}[out]
    g = hc.ConvGeometry.of(op)
    assert (g.in_dtype, g.out_dtype) == (ins, out)


def test_fp16_workloads_keep_their_identity():
    """The dtype is the workload's field as before: an fp16:fp32 conv's workload, hence its
    records, its run's identity and its library entry, are what they were; the space's knobs
    are the same for every dtype (16-bit operands: BK 32 or 64 either way)."""
    op = make("conv2d", RAGGED, space="v3")
    assert op.workload == {"op": "conv2d", "shape": list(RAGGED), "dtype": "fp16:fp32",
                           "space": "v3"}
    assert make("conv2d", RAGGED).workload == {**op.workload, "space": "v2"}
    knobs = [(k.name, k.choices) for k in op.space.knobs]
    for dtype in NEW:
        assert [(k.name, k.choices) for k in make("conv2d", RAGGED, dtype=dtype,
                                                  space="v3").space.knobs] == knobs


@pytest.mark.parametrize("name, options, message", [
    ("conv2d", {"dtype": "bf16:fp32", "space": "v2"},
     r"conv2d: dtype 'bf16:fp32' needs space v3; space v2 implements \['fp16:fp32', "
     r"'fp16:fp16'\]$"),
    ("conv3d", {"dtype": "bf16:bf16", "space": "v1"}, "needs space v3"),
    ("conv2d", {"dtype": "e4m3:bf16", "space": "v3"},
     r"conv2d: dtype 'e4m3:bf16' not supported; use one of \['fp16:fp32', 'fp16:fp16', "
     r"'bf16:fp32', 'bf16:bf16'\]$"),
    ("conv2d", {"dtype": "bf16:fp16", "space": "v3"}, "not supported; use one of"),
    ("conv2d_transpose", {"dtype": "bf16:fp32"},
     r"conv2d_transpose: dtype 'bf16:fp32' not supported; use one of \['fp16:fp32', "
     r"'fp16:fp16'\]$"),
])
def test_dtypes_a_space_lacks_are_refused_with_one_error(name, options, message):
    with pytest.raises(WorkloadError, match=message):
        make_named(name, None, **options)


def test_space_auto_takes_v3_for_a_bf16_conv_and_says_why_not_where_it_cannot():
    assert make_named("conv2d", RAGGED, dtype="bf16:bf16").workload["space"] == "v3"
    # C % 32 != 0: v3 refuses it, and v2 has no bf16: one error naming both
    with pytest.raises(WorkloadError, match="needs space v3.*v3 does not take.*C % 32 == 0"):
        make_named("conv2d", (7, 13, 11, 48, 96, 3, 3), dtype="bf16:fp32")


@pytest.mark.parametrize("dtype", ("bf16:fp32", "bf16:bf16"))
def test_the_reference_is_float64_and_the_baseline_runs_in_the_inputs_type(dtype):
    import torch

    op = make("conv2d", (2, 9, 7, 32, 16, 3, 3, 2, 1, 1), dtype=dtype, space="v3")
    gen = torch.Generator().manual_seed(0)
    x, w = ((torch.rand(t.shape, generator=gen) * 2 - 1).to(torch.bfloat16)
            for t in op.tensors()[:2])
    ref = op.reference(x, w)
    assert ref.dtype == torch.float64 and tuple(ref.shape) == op.tensors()[2].shape
    # one output element by hand: pixel (1, 2, 3), channel 5, stride 2, padding 1
    n, oh, ow, k = 1, 2, 3, 5
    exact = sum(float(x[n, ih, iw].double() @ w[k, r, s].double())
                for r in range(3) for s in range(3)
                if 0 <= (ih := oh * 2 - 1 + r) < 9 and 0 <= (iw := ow * 2 - 1 + s) < 7)
    assert float(ref[n, oh, ow, k]) == pytest.approx(exact, rel=1e-12, abs=1e-12)
    fast = op.reference_fast(x, w)
    assert fast.dtype == torch.bfloat16
    assert op.reference_name == "torch.nn.functional.conv2d (cuDNN, bf16 channels-last, bf16 out)"
    rel = float(torch.linalg.vector_norm(fast.double() - ref) / torch.linalg.vector_norm(ref))
    assert rel < 1e-2  # bf16's rounding of the output (the tolerance of a bf16 output)


class _Driver:
    """libcuda's two encoders, recording the data type and swizzle each call passes."""

    def __init__(self):
        self.calls = []

    def cuTensorMapEncodeIm2col(self, tmap, dtype, *args):
        self.calls.append(("im2col", dtype.value, args[-3].value))
        return 0

    def cuTensorMapEncodeTiled(self, tmap, dtype, *args):
        self.calls.append(("tiled", dtype.value, args[-3].value))
        return 0


def test_bf16_tensor_maps_and_their_driver_codes(monkeypatch):
    """X's maps (tiled and im2col) and the weights' in bf16, 2-byte strides and 64 channels a
    128-byte swizzled row; Y's tma-epilogue maps in the output's type, 64 bf16 or 32 fp32
    channels a box row; the runner and an export's im2col encoder pass CUtensorMapDataType
    BFLOAT16 (9) for bf16, FLOAT32 (7) for fp32 (cuda.h)."""
    from bocast.measure import gpu_worker, tensor_maps

    op = make("conv2d", RAGGED, dtype="bf16:bf16", space="v3")
    g = hc.ConvGeometry.of(op)
    maps = hc.conv_tensor_maps(g, 128, 128, 64, (8, 4, 4), True)
    assert maps["X_map"] == {"tensor": "X", "dtype": "bfloat16", "dims": [64, 11, 13, 7],
                             "strides": [128, 128 * 11, 128 * 11 * 13], "box": [64, 4, 4, 8],
                             "element_strides": [1, 1, 1, 1], "swizzle": 3}
    assert maps["W_map"] == {"tensor": "W", "dtype": "bfloat16", "dims": [576, 96],
                             "strides": [1152], "box": [64, 128], "swizzle": 3}
    assert maps["Y_map"] == {"tensor": "Y", "dtype": "bfloat16", "dims": [96, 11, 13, 7],
                             "strides": [192, 192 * 11, 192 * 11 * 13], "box": [64, 4, 4, 4],
                             "swizzle": 3}
    im_maps = hc.conv_tensor_maps(g, 128, 128, 32, None, True)
    assert im_maps["X_map"]["dtype"] == "bfloat16" and im_maps["X_map"]["strides"][0] == 128
    assert im_maps["X_map"]["swizzle"] == 2  # 32 bf16 channels: 64-byte rows
    assert im_maps["Y_map"] == {"tensor": "Y", "dtype": "bfloat16", "dims": [96, 7 * 13 * 11],
                                "strides": [192], "box": [64, 64], "swizzle": 3}
    fp32 = hc.conv_tensor_maps(hc.ConvGeometry.of(make("conv2d", RAGGED, dtype="bf16:fp32",
                                                       space="v3")), 128, 128, 64, None, True)
    assert fp32["Y_map"]["dtype"] == "float32" and fp32["Y_map"]["box"] == [32, 64]

    driver = _Driver()
    monkeypatch.setattr(gpu_worker, "_driver", lambda: driver)
    for m in (maps["X_map"], maps["W_map"], maps["Y_map"], im_maps["X_map"], fp32["Y_map"]):
        gpu_worker.encode_tensor_map(m, 0x10000, m["dtype"])
    tensor_maps.im2col_encoder(lambda: driver)(ctypes.c_void_p(0x2000), "bfloat16", 4,
                                               ctypes.c_void_p(0x10000),
                                               *im.encode_args(im_maps["X_map"]))
    assert driver.calls == [("tiled", 9, 3), ("tiled", 9, 3), ("tiled", 9, 3), ("im2col", 9, 2),
                            ("tiled", 7, 3), ("im2col", 9, 2)]


@pytest.mark.parametrize("dtype, ptx", [("bf16:bf16", "bf16"), ("bf16:fp32", "bf16"),
                                        ("fp16:fp16", "f16")])
@pytest.mark.parametrize("producer", [TILED, IM2COL])
def test_the_dtype_reaches_the_generated_cuda(producer, dtype, ptx):
    """wgmma on the operands' type (k16, fp32 accumulators); the encoders in the host code
    name the operands' and the output's types; a 16-bit output stored as rounded pairs (v2),
    rounded pairs stored element by element (scalar) or staged 64-column boxes (tma), an fp32
    one as before."""
    op = make("conv2d", RAGGED, dtype=dtype, space="v3")
    ins, out = TYPES[dtype[:4]], TYPES[dtype[5:]]
    config = {**producer, "bn": 64}
    low = lowered(op, config)
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{ptx}.{ptx}" in low.source
    assert {m["dtype"] for m in low.tensor_maps.values()} == {ins}
    pair = {"bfloat16": "nv_bfloat162", "float16": "half2"}.get(out)
    if pair is None:
        assert "st.global.v2.f32" in low.source
    else:
        assert f"bocast_st_global_{pair}(" in low.source and "st.global.v2.f32" not in low.source
        scalar = lowered(op, {**config, "epilogue": "scalar"}).source
        assert f"bocast_st_scalar_{pair}(" in scalar and ")acc" not in scalar
    tma = lowered(op, {**config, "bn": 128, "epilogue": "tma"})
    assert tma.tensor_maps["Y_map"]["dtype"] == out
    script = op.apply({**config, "bn": 128, "epilogue": "tma"}).mod.script()
    assert re.search(rf'"runtime.cuTensorMapEncodeTiled", Y_map, "{out}"', script)
    if pair is not None:
        body = tma.source[tma.source.index("setmaxnreg_inc"):]
        # a consumer's m64 atom of 128 columns: two 64-column boxes, 16 pairs a thread each
        assert body.count(f"bocast_st_shared_{pair}(") == 2 * 16


@needs_nvcc
@pytest.mark.parametrize("producer, dtype", [("tiled", "bf16:bf16"), ("im2col", "bf16:fp32")])
def test_a_sampled_bf16_configuration_of_each_producer_builds_for_sm_90a(producer, dtype):
    """One random configuration of each producer (seed 0), nvcc for sm_90a with ptxas's
    report: no spills, no stack, no serialized wgmma, the shared memory the model counts."""
    from tests.builds import check_v3_builds

    op = make("conv2d", RAGGED, dtype=dtype, space="v3")
    config = next(c for c in op.space.sample(64, rng=0) if c["a_load"] == producer)
    check_v3_builds(op, [config])


def test_a_16_bit_outputs_tma_epilogue_rules_hold_for_both_producers():
    """GEMM's 16-bit tma rules over Y's maps: a consumer's 64-column boxes pair up, and Y's
    rows (K output channels of 2 bytes) are multiples of 16 bytes."""
    one_box = {"bm": 64, "bn": 64, "consumers": 1, "epilogue": "tma"}
    for producer in (TILED, IM2COL):
        config = {**producer, **one_box}
        assert make("conv2d", RAGGED, space="v3").space.validate(config) == []
        assert make("conv2d", RAGGED, dtype="bf16:bf16", space="v3").space.validate(config) \
            == ["tma_boxes_pair_up"]
        odd_k = (7, 13, 11, 64, 100, 3, 3, 1, 1, 1)  # 200-byte rows of bf16
        tma = {**producer, "epilogue": "tma"}
        assert make("conv2d", odd_k, dtype="bf16:bf16", space="v3").space.validate(tma) == \
            ["tma_store_needs_n_multiple_of_4"]
        assert make("conv2d", odd_k, dtype="bf16:fp32", space="v3").space.validate(tma) == []
