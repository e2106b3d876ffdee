"""Space v3's fp8 GEMM with block scales (issue 39: ``e4m3b128:bf16``/``:fp32``, DeepSeek-V3's
1x128 and 128x128 scales, DeepGEMM's promotion): the workload and its identity, the tensors, the
float64 reference, the kernel's scale index maps simulated in numpy against it (ragged M, N, K;
tiles of 64, 128, 192 and 256 columns), cuBLASLt's scale layouts, the generated CUDA and static
sm_90a builds (ptxas -v: no spills where the space admits a tile; spills where
block_scales_fit_registers refuses one). The GPU check: experiments/device/blockfp8_check.sh."""

import re

import numpy as np
import pytest

from bocast.measure.nvcc import why_no_compiler
from bocast.space.operators import _block_fp8 as bf
from bocast.space.operators import _hopper_blockscale as hb
from bocast.space.operators.operator import WorkloadError, get_operator, make_named
from tests.builds import build_configs, check_v3_builds

needs_nvcc = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))
Gemm = get_operator("gemm")
#: DeepGEMM's tile at 128 rows: two consumers of 64 rows, 192 columns (two accumulator sets fit)
TILE = {"bm": 128, "bn": 192, "bk": 128, "stages": 4, "consumers": 2,
        "arrangement": "cooperative", "regs": "24/240", "inflight": 0, "persistent": "on",
        "raster": 1, "epilogue": "v2"}


def test_block_scaled_workload_tensors_and_knobs():
    """A dtype of its own (the per-tensor workloads' fields and identities unchanged), scales
    [M, ceil(K/128)] and [ceil(N/128), ceil(K/128)] drawn away from 1, bk and inflight fixed."""
    op = Gemm(1000, 1008, 1040, dtype="e4m3b128:bf16", space="v3")
    assert op.workload == {"op": "gemm", "shape": [1000, 1008, 1040], "dtype": "e4m3b128:bf16",
                           "layout": "NT", "space": "v3"}
    per_tensor = Gemm(1000, 1008, 1040, dtype="e4m3:bf16", space="v3")
    assert set(per_tensor.workload) == set(op.workload) and not per_tensor.block_scaled
    assert [t.shape for t in per_tensor.tensors()][2:4] == [(1,), (1,)]
    assert [(t.name, t.dtype, t.shape) for t in op.tensors()] == [
        ("A", "float8_e4m3fn", (1000, 1040)), ("B", "float8_e4m3fn", (1008, 1040)),
        ("scale_a", "float32", (1000, 9)), ("scale_b", "float32", (8, 9)),
        ("C", "bfloat16", (1000, 1008))]
    assert 0 < op.tensors()[2].values[0] < op.tensors()[2].values[1] <= 1 / 16
    assert op.matmul.scale_block == 128 and op.tolerance == 2e-2
    assert tuple(op.space.knob("bk").choices) == (128,)
    assert tuple(op.space.knob("inflight").choices) == (0,)
    assert make_named("gemm", (4096, 7168, 16384), dtype="e4m3b128:fp32").workload["space"] == "v3"


@pytest.mark.parametrize("options, message", [
    ({"dtype": "e4m3b128:bf16", "space": "v2"}, "needs space v3"),
    ({"dtype": "e4m3b128:bf16", "space": "v3", "fuse": "gelu"}, "no fused epilogue yet"),
    ({"dtype": "e4m3b128:fp32", "space": "v3", "layout": "NN"}, "needs layout NT"),
])
def test_block_scaled_refusals(options, message):
    with pytest.raises(WorkloadError, match=message):
        make_named("gemm", (256, 256, 256), **options)


def test_two_accumulator_sets_bound_the_tile():
    """128 x 192 fits (192 + 40 <= 240), 128 x 256 does not; ping-pong's 128 rows a consumer
    neither at 128 columns."""
    op = Gemm(4096, 7168, 16384, dtype="e4m3b128:bf16", space="v3")
    assert op.space.validate(TILE) == []
    assert op.space.validate(TILE | {"bn": 256}) == ["block_scales_fit_registers"]
    pingpong = TILE | {"bn": 128, "arrangement": "pingpong"}
    assert op.space.validate(pingpong) == ["block_scales_fit_registers"]
    assert op.space.validate(pingpong | {"bm": 64}) == []


def _inputs(M, N, K, seed=0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    a = (torch.rand((M, K), generator=gen) * 2 - 1).to(torch.float8_e4m3fn)
    b = (torch.rand((N, K), generator=gen) * 2 - 1).to(torch.float8_e4m3fn)
    sa_shape, sb_shape = hb.scale_shapes(M, N, K)
    sa = torch.rand(sa_shape, generator=gen) / 16 + 1 / 64
    sb = torch.rand(sb_shape, generator=gen) / 16 + 1 / 64
    return a, b, sa, sb


def test_reference_dequantizes_each_block():
    """reference64 is sum_k A[m,k] B[n,k] scale_a[m, k//128] scale_b[n//128, k//128], exactly."""
    a, b, sa, sb = _inputs(70, 144, 272)
    ref = bf.reference64(a, b, sa, sb).numpy()
    A, B = a.double().numpy(), b.double().numpy()
    SA, SB = sa.double().numpy(), sb.double().numpy()
    k = np.arange(272)
    want = np.einsum("mk,nk,mk,nk->mn", A, B, SA[:, k // 128],
                     SB[np.arange(144)[:, None] // 128, k // 128])
    assert np.allclose(ref, want, rtol=1e-12, atol=0)
    op = Gemm(70, 144, 272, dtype="e4m3b128:fp32", space="v3")
    assert np.allclose(op.reference(a, b, sa, sb).numpy(), want, rtol=1e-12, atol=0)


def _kernel_in_numpy(a, b, sa, sb, BM, BN, NC=2):
    """The consumers' arithmetic as the kernel indexes it (fragment rows, the 8-column groups'
    scale blocks, the clamps at ragged edges): per tile and k block, each thread's part of the
    fresh tile times its two scales, added into its accumulators; stored only inside C."""
    A, B = a.double().numpy(), b.double().numpy()
    SA, SB = sa.double().numpy(), sb.double().numpy()
    M, K = A.shape
    N = B.shape[0]
    Ap = np.zeros((-(-M // BM) * BM, -(-K // 128) * 128))  # TMA's zero fill past each edge
    Bp = np.zeros((-(-N // BN) * BN, Ap.shape[1]))
    Ap[:M, :K], Bp[:N, :K] = A, B
    C = np.full((M, N), np.nan)
    atoms, nq, last_b = BM // NC // 64, hb.b_blocks(BN), SB.shape[0] - 1
    for tm in range(Ap.shape[0] // BM):
        for tn in range(Bp.shape[0] // BN):
            off = tn * BN % 128
            for cw in range(NC):
                row0 = tm * BM + cw * (BM // NC)
                acc = np.zeros((128, atoms, 2, BN // 8, 2))
                for kb in range(Ap.shape[1] // 128):
                    ks = slice(kb * 128, kb * 128 + 128)
                    part = Ap[row0:row0 + BM // NC, ks] @ Bp[tn * BN:tn * BN + BN, ks].T
                    sbq = [SB[min(tn * BN // 128 + q, last_b), kb] for q in range(nq)]
                    for lt in range(128):
                        for at in range(atoms):
                            for h in range(2):
                                r = hb.fragment_row(lt, at, h)
                                s_a = SA[min(row0 + r, M - 1), kb]
                                for jj in range(BN // 8):
                                    s_b = sbq[hb.group_block(BN, jj, off)]
                                    for e in range(2):
                                        acc[lt, at, h, jj, e] += \
                                            part[r, jj * 8 + lt % 4 * 2 + e] * s_a * s_b
                for lt in range(128):
                    for at in range(atoms):
                        for h in range(2):
                            for jj in range(BN // 8):
                                for e in range(2):
                                    row = row0 + hb.fragment_row(lt, at, h)
                                    col = tn * BN + jj * 8 + lt % 4 * 2 + e
                                    if row < M and col < N:
                                        C[row, col] = acc[lt, at, h, jj, e]
    return C


@pytest.mark.parametrize("BM, BN", [(128, 64), (128, 128), (128, 192), (256, 256)])
def test_kernel_scale_index_maps_match_the_dequantized_product(BM, BN):
    """Ragged M (200), N (400: a partial 128-column block; 192-column tiles start 64 columns
    into one) and K (304: a partial k block): every element written once and equal to float64's
    block-scaled product."""
    a, b, sa, sb = _inputs(200, 400, 304, seed=BN)
    C = _kernel_in_numpy(a, b, sa, sb, BM, BN)
    assert not np.isnan(C).any()
    assert np.allclose(C, bf.reference64(a, b, sa, sb).numpy(), rtol=1e-10, atol=1e-12)


def test_b_blocks_and_group_blocks():
    assert [hb.b_blocks(n) for n in (64, 128, 192, 256)] == [1, 1, 2, 2]
    assert [hb.group_block(192, jj, 64) for jj in (0, 7, 8, 23)] == [0, 0, 1, 1]
    assert [hb.group_block(256, jj, 0) for jj in (15, 16)] == [0, 1]


def test_cublaslt_scale_layouts():
    """scale_a column-major [M, L]; scale_b [L4, ceil(N/128)] K-major, zero past L (torch's
    block-wise test's layout)."""
    import torch

    sa, sb = torch.rand(1000, 9), torch.rand(8, 9)
    ca, cb = bf.cublaslt_scales(sa, sb)
    assert ca.shape == (1000, 9) and ca.stride() == (1, 1000) and torch.equal(ca, sa)
    assert cb.shape == (12, 8) and cb.stride() == (1, 12)
    assert torch.equal(cb[:9], sb.t()) and not cb[9:].any()


def lowered(op, config):
    from bocast.space.tensorcore import lower_tirx, source_only

    source_only()
    return lower_tirx(op.apply(config), target_overrides=op.build_options(config)["target"])


def test_block_scales_reach_the_generated_cuda():
    """Every k block starts a fresh tile (scale_d 0 on its first k32 step), the scales are read
    between the commit and the wait, and the tile is promoted once per accumulator after the
    wait; no per-tensor scale; scale_a [M, 9] and scale_b [8, 9] indexed row-major."""
    op = Gemm(1000, 1008, 1040, dtype="e4m3b128:bf16", space="v3")
    low = lowered(op, TILE)
    assert low.args == ("A_map", "B_map", "C", "scale_a", "scale_b")
    src = low.source[low.source.index("setmaxnreg_inc_sync_aligned_u32_240();"):]
    loop = src[src.index("for (int kb"):]
    flags = re.findall(r"part_ptr\[95\], desc_a_ptr\[0\], desc_b_ptr\[0\], \(bool\)(\d)\);",
                       loop)
    assert flags == ["0", "1", "1", "1"]  # one k block's four k32 steps, written once
    commit, wait = loop.index("commit_group"), loop.index("wait_group")
    assert "scale_a_ptr[" in loop[commit:wait] and "scale_b_ptr[" in loop[commit:wait]
    assert re.search(r"scale_a_ptr\[\(\(min\(.*, 999\) \* 9\) \+ kb", loop[commit:wait])
    promoted = re.findall(r"acc_ptr\[(\d+)\] = \(acc_ptr\[\1\] \+ \(part_ptr\[\1\] \*", loop)
    assert sorted(map(int, promoted)) == list(range(96))
    assert loop.index("acc_ptr[0] = (acc_ptr[0] + ") > wait
    assert "sc_ptr" not in src  # no per-tensor product


@needs_nvcc
def test_static_builds_without_spills_where_the_space_admits_the_tile():
    """128 x 128 and 128 x 192 (bf16 and fp32 out, the tma epilogue) build for sm_90a with no
    spills (ptxas -v); 128 x 256, refused by block_scales_fit_registers, spills."""
    op = Gemm(1000, 1008, 1040, dtype="e4m3b128:bf16", space="v3")
    check_v3_builds(op, [TILE | {"bn": 128}, TILE])
    fp32 = Gemm(1000, 1008, 1040, dtype="e4m3b128:fp32", space="v3")
    check_v3_builds(fp32, [TILE | {"epilogue": "tma"}])
    [wide] = build_configs(op, [TILE | {"bn": 256}])
    assert wide["status"] == "ok" and wide["features"]["spill_stores"] > 0


def test_the_vendor_call_is_the_first_that_runs_named_with_why_the_others_did_not(monkeypatch):
    """vendor_block_mm tries vendor_calls in order, once per set of inputs, and names what ran;
    the per-tensor fallback's name carries each failure. (On the GPU: blockfp8_check.sh.)"""
    import torch

    tried = []

    def calls(a, b, sa, sb, out):
        def fail(what):
            def call():
                tried.append(what)
                raise RuntimeError(f"{what} not here\nmore")
            return call

        yield "first(x)", fail("first")
        yield "second(y)", fail("second")
        yield "per-tensor (why: {why})", lambda: tried.append("third") or torch.zeros(2)

    monkeypatch.setattr(bf, "vendor_calls", calls)
    op = Gemm(256, 256, 256, dtype="e4m3b128:bf16", space="v3")
    ins = _inputs(256, 256, 256)
    out = bf.vendor_block_mm(op, ins[0], ins[1].t(), ins[2], ins[3])
    assert torch.equal(out, torch.zeros(2))
    assert op.reference_name == "per-tensor (why: first: first not here; second: second not here)"
    bf.vendor_block_mm(op, ins[0], ins[1].t(), ins[2], ins[3])  # chosen once: no retries
    assert tried == ["first", "second", "third", "third", "third"]
