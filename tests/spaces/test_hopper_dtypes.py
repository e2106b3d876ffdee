"""Space v3's dtypes beyond fp16:fp32 (issue 39, first step): bf16:fp32, bf16:bf16 and fp16:fp16
for GEMM and bmm. What the workload accepts and refuses (one error naming the accepted dtypes or
the spaces that take one), ``space auto``, the reference's and the runner's dtypes, the generated
CUDA (bf16 wgmma, the 16-bit epilogues), the staging layout of a 16-bit output, and static
sm_90a builds without spills. Their results are checked on the GPU
(experiments/device/bf16_check.sh)."""

import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators.operator import WorkloadError, get_operator, make, make_named
from tests.builds import check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm, Bmm = get_operator("gemm"), get_operator("bmm")
V3_DTYPES = ("fp16:fp32", "fp16:fp16", "bf16:fp32", "bf16:bf16")
#: the live best at GEMM 4096^3 (tests/spaces/test_hopper.py's BEST_4096), raster 1
BEST = {"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "40/232", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2"}


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


@pytest.mark.parametrize("dtype", V3_DTYPES)
def test_v3_takes_the_dtypes_of_gemm_and_bmm(dtype):
    ins, out = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[dtype[:4]], \
        {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[dtype[5:]]
    for op in (Gemm(256, 512, 256, dtype=dtype, space="v3"),
               Bmm(4, 128, 128, 64, dtype=dtype, space="v3")):
        assert op.workload["dtype"] == dtype and op.workload["space"] == "v3"
        assert [t.dtype for t in op.tensors()] == [ins, ins, out]
        # wgmma accumulates in fp32 whatever the output (bf16 has no other accumulator)
        assert op.matmul.acc_dtype == "float32" and op.matmul.out_dtype == out
        assert op.tolerance == {"float32": 1e-3, "float16": 5e-3, "bfloat16": 1e-2}[out]


@pytest.mark.parametrize("op, shape, options, message", [
    ("gemm", (256, 256, 256), {"dtype": "bf16"},
     r"dtype 'bf16' not supported; use one of \['fp16:fp32', 'fp16:fp16', 'bf16:fp32', "
     r"'bf16:bf16', 'e4m3:bf16', 'e4m3:fp32', 'e5m2xe4m3:bf16', 'e5m2xe4m3:fp32', "
     r"'e4m3b128:bf16', 'e4m3b128:fp32'\]$"),
    ("gemm", (256, 256, 256), {"dtype": "bf16:fp16", "space": "v3"}, "use one of"),
    ("gemm", (256, 256, 256), {"dtype": "bf16:fp32", "space": "v2"},
     r"dtype 'bf16:fp32' needs space v3; space v2 implements \['fp16:fp32', 'fp16:fp16'\]$"),
    ("bmm", (4, 128, 128, 64), {"dtype": "bf16:bf16", "space": "v1"}, "needs space v3"),
    ("gemv", (256, 256), {"dtype": "bf16:fp32"},
     r"gemv: dtype 'bf16:fp32' not supported; use one of \['fp16:fp32', 'fp16:fp16'\]$"),
    # the direct convolutions take bf16 on v3 (tests/spaces/test_hopper_conv_dtypes.py)
    ("conv2d", None, {"dtype": "bf16:fp32", "space": "v2"}, "needs space v3"),
    ("gemm", (256, 256, 256), {"dtype": "bf16:fp32", "layout": "NN"},
     "needs space v3.*v3 does not take this workload either.*needs layout NT"),
])
def test_bad_dtypes_get_one_error_naming_what_is_accepted(op, shape, options, message):
    with pytest.raises(WorkloadError, match=message):
        make_named(op, shape, **options)


def test_space_auto_takes_v3_for_bf16():
    """bf16 runs on v3 only: auto takes v3 by its rule, and also below it (M < 16), where
    v2 would otherwise be chosen, saying why."""
    op = make_named("gemm", (4096, 4096, 4096), dtype="bf16:fp32")
    assert op.workload["space"] == "v3" and op.space_choice.startswith("v3 (auto: N >= 64 and M")
    small = make_named("gemm", (8, 4096, 4096), dtype="bf16:bf16")
    assert small.workload["space"] == "v3"
    assert "v2 does not take this workload" in small.space_choice
    assert make_named("gemm", (8, 4096, 4096)).workload["space"] == "v2"  # fp16 as before
    assert make_named("bmm", (12, 512, 512, 64), dtype="bf16:fp32").workload["space"] == "v3"


def test_k_must_fill_16_byte_rows_of_16_bit_elements():
    with pytest.raises(WorkloadError, match="K % 8 == 0"):
        Gemm(256, 256, 100, dtype="bf16:fp32", space="v3")


def test_references_are_float64_and_the_vendor_baseline_runs_in_the_workloads_types():
    import torch

    for dtype, out in (("bf16:fp32", torch.float32), ("bf16:bf16", torch.bfloat16)):
        for op in (Gemm(64, 96, 32, dtype=dtype, space="v3"),
                   Bmm(2, 64, 64, 32, dtype=dtype, space="v3")):
            gen = torch.Generator().manual_seed(0)
            a, b = ((torch.rand(t.shape, generator=gen) * 2 - 1).to(torch.bfloat16)
                    for t in op.tensors()[:2])
            ref = op.reference(a, b)
            assert ref.dtype == torch.float64 and tuple(ref.shape) == op.tensors()[2].shape
            exact = (a.double() @ (b.double().transpose(-1, -2)))
            assert torch.equal(ref, exact)
            fast = op.reference_fast(a, b)
            # on the CPU torch has no mm with out_dtype: the baseline says it ran bf16 out
            assert fast.dtype in (out, torch.bfloat16)
            assert "bf16 in" in op.reference_name
            rel = float(torch.linalg.vector_norm(fast.double() - ref)
                        / torch.linalg.vector_norm(ref))
            assert rel < op.tolerance or out == torch.float32  # fp32 out: checked on the GPU


def test_the_runner_encodes_bf16_tensor_maps_and_makes_bf16_inputs():
    """CUtensorMapDataType: UINT8 0 (fp8), FLOAT16 6, FLOAT32 7, BFLOAT16 9 (cuda.h);
    make_inputs builds each tensor in its declared type (read from its source: it needs a GPU
    to run)."""
    import inspect

    from bocast.measure import gpu_worker, tensor_maps

    assert tensor_maps.TMA_DTYPES == {"float8_e4m3fn": 0, "float8_e5m2": 0, "float16": 6,
                                      "float32": 7, "bfloat16": 9}
    assert '"bfloat16": torch.bfloat16' in inspect.getsource(gpu_worker.make_inputs)


@pytest.mark.parametrize("dtype, ptx_type", [("bf16:fp32", "bf16"), ("bf16:bf16", "bf16"),
                                             ("fp16:fp16", "f16")])
def test_the_dtype_reaches_the_generated_cuda(dtype, ptx_type):
    """wgmma on the operands' type (m64nBNk16, fp32 accumulators), tensor maps of A and B in
    it, and a 16-bit output stored as rounded pairs: one 4-byte store a pair (v2 epilogue),
    two 2-byte stores a pair (scalar), or 64-column boxes of 128-byte rows staged for TMA."""
    op = Gemm(256, 512, 256, dtype=dtype, space="v3")
    ins, out = (t.dtype for t in op.tensors()[1:])
    low = lowered(op, BEST | {"bn": 128})
    src = low.source
    assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{ptx_type}.{ptx_type}" in src
    assert {m["dtype"] for m in low.tensor_maps.values()} == {ins}
    assert low.dynamic_smem == 4 * (128 + 128) * 64 * 2
    pair = {"bfloat16": "nv_bfloat162", "float16": "half2"}.get(out)
    if pair is None:  # fp32 output
        assert "st.global.v2.f32" in src
        return
    assert f"bocast_st_global_{pair}(" in src and "st.global.v2.f32" not in src
    scalar = lowered(op, BEST | {"bn": 128, "epilogue": "scalar"}).source
    # the scalar epilogue rounds each pair at once too (its element-wise casts let ptxas read
    # the accumulators above the final wgmma wait: _hopper_layout.scalar_pair)
    assert f"bocast_st_scalar_{pair}(" in scalar and ")acc" not in scalar
    tma = lowered(op, BEST | {"bn": 128, "epilogue": "tma"})
    assert tma.tensor_maps["C_map"] == {"tensor": "C", "dtype": out, "dims": [512, 256],
                                        "strides": [1024], "box": [64, 64], "swizzle": 3}
    body = tma.source[tma.source.index("setmaxnreg_inc"):]
    # a consumer's m64 atom: 128 columns, two 64-column boxes of 16 pairs a thread
    assert body.count(f"bocast_st_shared_{pair}(") == 2 * 16
    assert body.count("bulk_tensor_s2g") == 2


def test_the_16_bit_staging_box_is_tmas_128_byte_swizzle_without_conflicts():
    """Every rounded pair of a 64 x 64 16-bit box lands once, at the address TMA's 128-byte
    swizzle reads for its (row, column); a half-warp's 4-byte stores take one wavefront."""
    import collections

    from bocast.space.operators._hopper_layout import EPI_BOX_BYTES, staging_offset

    seen = set()
    for lt in range(128):
        for jj in range(8):
            for h in range(2):
                off = staging_offset(lt, jj, h, 2)
                r = off // 128
                col = (((off % 128) // 16) ^ (r % 8)) * 8 + off % 16 // 2
                assert (r, col) == (lt // 32 * 16 + lt % 32 // 4 + 8 * h, 8 * jj + 2 * (lt % 4))
                assert off % 4 == 0 and off not in seen
                seen.add(off)
    assert sorted(seen) == list(range(0, EPI_BOX_BYTES, 4))
    for w in range(4):
        for half in range(2):
            for jj in range(8):
                banks = collections.Counter(
                    staging_offset(w * 32 + half * 16 + lane, jj, 0, 2) // 4 % 32
                    for lane in range(16))
                assert max(banks.values()) == 1


def test_tma_boxes_pair_up_for_a_16_bit_output():
    """A 16-bit output's 64-column staging boxes: a consumer needs an even count of them (the
    two buffers alternate, every tile starting on the first); fp32's 32-column boxes always
    are."""
    one_box = BEST | {"bm": 64, "bn": 64, "consumers": 1, "epilogue": "tma"}
    assert Gemm(256, 512, 256, space="v3").space.validate(one_box) == []
    assert Gemm(256, 512, 256, dtype="bf16:bf16", space="v3").space.validate(one_box) == \
        ["tma_boxes_pair_up"]
    assert Gemm(256, 512, 256, dtype="bf16:fp32", space="v3").space.validate(one_box) == []
    # the tensor map of C: 2 N bytes a row, a multiple of 16
    tma = BEST | {"bn": 128, "epilogue": "tma"}
    assert Gemm(256, 516, 256, dtype="bf16:bf16", space="v3").space.validate(tma) == \
        ["tma_store_needs_n_multiple_of_4"]
    assert Gemm(256, 516, 256, dtype="bf16:fp32", space="v3").space.validate(tma) == []


def test_warm_start_keeps_dtypes_apart():
    """Rows of another dtype are no source: bf16 and fp16 kernels are not known to rank alike
    (not measured yet), so the rule stays the one for every other workload field."""
    from bocast.strategies.bo.sources import incompatibility

    target = Gemm(4096, 4096, 4096, dtype="bf16:fp32", space="v3")
    why, _ = incompatibility({**target.workload, "dtype": "fp16:fp32"}, target)
    assert why is not None and "dtype" in why
    assert incompatibility({**target.workload, "shape": [2048, 2048, 2048]}, target)[0] is None


@needs_nvcc
@pytest.mark.parametrize("dtype", ["bf16:fp32", "bf16:bf16", "fp16:fp16"])
def test_gemm_kernels_build_for_sm_90a_without_spills(dtype):
    """The live best's layout with each epilogue, and sampled configurations, at a ragged
    shape (TMA boxes and stores past the edges) and a whole one."""
    ragged = Gemm(1000, 1024, 1000, dtype=dtype, space="v3")
    check_v3_builds(ragged, [BEST, BEST | {"epilogue": "scalar"}, BEST | {"epilogue": "tma"},
                           *ragged.space.sample(2, rng=5)])
    if dtype == "bf16:fp32":
        whole = Gemm(4096, 4096, 4096, dtype=dtype, space="v3")
        check_v3_builds(whole, [BEST | {"raster": 16}, *whole.space.sample(2, rng=7)])


@needs_nvcc
@pytest.mark.parametrize("dtype", ["bf16:fp32", "bf16:bf16"])
def test_bmm_kernels_build_for_sm_90a_without_spills(dtype):
    op = Bmm(12, 512, 512, 64, dtype=dtype, space="v3")
    check_v3_builds(op, [BEST | {"epilogue": "tma"}, *op.space.sample(3, rng=2)])


def test_a_configurations_workload_names_its_dtype():
    """make() with the workload dict as stored rebuilds the same operator (the dtype is part
    of the workload, hence of the records, the run's identity and the library)."""
    op = make("bmm", (12, 512, 512, 64), dtype="bf16:bf16", space="v3")
    from bocast.space.operators.operator import from_workload

    again = from_workload(op.workload)
    assert again.workload == op.workload and again.tensors() == op.tensors()
