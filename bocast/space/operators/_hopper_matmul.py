"""Space v3 for GEMM and bmm: the Hopper template (TMA + wgmma + warp specialization in TVM's
TIRx, ``_hopper_kernel``) over C[M, N] = A[M, K] B[N, K]^T. This module holds the space (knobs,
derived columns, the named constraints of what the kernel and the H100 admit) and
:func:`kernel`: the GEMM's prim_func (A, B, C and their tensor maps) around the shared body,
with the GEMM's hooks (A's box at k block and block row of a 2-D map; C's rows and columns).

The matmul is the NT layout (both operands K-major: wgmma's native form, fp8's only one), fp16,
bf16 or fp8 in, fp32 accumulate, fp32 or 16-bit out (``mm.SPACE_DTYPES``; fp8 with per-tensor
or block scales, ``gemm.py``). M, N, K may be ragged (K % 8 == 0 remains: TMA's global rows
are multiples of 16 bytes): tiles and k blocks count by ceil-division, TMA zero-fills its boxes
past an edge (the mbarrier still receives the whole box's bytes, as CUTLASS's fixed
TmaTransactionBytes relies on), the direct stores test their row and column where an extent is
ragged, the TMA store clips its boxes (its tensor map of C needs rows of 16-byte multiples).
A bmm (C[b] = A[b] B[b]^T) is the same kernel over the batch's tiles, its operands read as one
[b x M, K] and one [b x N, K] matrix, the persistent loop walking batch x tiles, batch
outermost; a tile must not cross a batch element (``bmm_tiles_within_batch``). Split K:
``_hopper_split`` (every tile, below a wave) and ``_hopper_tail`` (a persistent walk's last
round). Configurations outside the kernel are refused by named constraints or, for the
workload, by :func:`check_workload`.

Swap AB (``swap_ab``, GEMM and GEMV: ``_hopper_swap``): the same body over C^T = B A^T, B's
rows as wgmma's M and C's BM rows (8 to 256) as its N, C stored transposed; skinny ones also
take N tiles of 48 and 96 (``_hopper_narrow``). A GEMV is the GEMM of M = its vectors
(``GEMV_NAMES``: the kernel's parameters carry its tensors' names).

Kernel arguments: the tensor maps of A and B (``__grid_constant__ CUtensorMap``, encoded by the
runner with ``cuTensorMapEncodeTiled`` from :attr:`TirxKernel.tensor_maps`) and C's pointer, or
with the tma epilogue C's tensor map (in C's type); fp8's also the scales' pointers (scale_a,
scale_b: one fp32 each, or block scales' row-major matrices, ``_hopper_blockscale``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bocast.space.operators.operator import WorkloadError
from bocast.space.space import Categorical, Constraint, Knob, Ordinal, Space

from . import _fuse as fx
from . import _hopper_blockscale as bs
from . import _hopper_cluster_split as cs
from . import _hopper_kernel as hk
from . import _hopper_narrow as nw
from . import _hopper_split as sk
from . import _hopper_swap as sw
from . import _hopper_tail as tl
from . import _matmul as mm
from ._hopper_layout import (
    CLUSTERS,
    DEFAULT_SM_COUNT,
    DTYPE_BYTES,
    EPI_ROWS,
    EPI_SMEM_PER_CONSUMER,
    REG_SPLITS,
    STAGES,
    WGMMA_TYPES,
    bk_choices,
    cluster_constraints,
    encode_args,
    epi_cols,
    target_sms,
    tensor_map,
)
from ._hopper_stores import row_major_stores

ARCH = "sm_90a"
REGISTERS_PER_SM = 65536
#: a consumer thread's registers beyond its accumulators (descriptors, addresses, loop state);
#: CUTLASS's and ThunderKittens' 128 x 256 tiles (128 accumulators a thread) fit 168
REGISTER_OVERHEAD = 40
BARRIER_SMEM = 1024  # the mbarriers' static shared memory, as ptxas reports it (alignment)
#: no batch_bind knob (_matmul.space): the persistent tile loop walks batch x tiles
BATCH_KNOB = False


def check_workload(spec: mm.MatmulSpec) -> None:
    """What the template implements, refused by name otherwise."""
    what = "space v3 (Hopper TMA + wgmma)"
    if spec.epilogue is not None or (spec.block, spec.operands) not in (
            ("C", ("A", "B", "C")), ("Y", GEMV_NAMES)):
        raise WorkloadError(f"{what} implements GEMM, bmm and GEMV only so far; use space v2")
    if not spec.trans_b:
        raise WorkloadError(f"{what} needs layout NT (B stored [N, K], K-major); use space v2 "
                            "for NN")
    # the dtype itself is checked with the workload (mm.dtype_pair: SPACE_DTYPES); this is
    # what the kernel assumes of it
    assert spec.in_dtype in WGMMA_TYPES and spec.acc_dtype == "float32", spec
    assert spec.b_dtype in (None, *WGMMA_TYPES), spec  # e5m2 x e4m3 (same size)
    row_elements = 16 // DTYPE_BYTES[spec.in_dtype]
    if spec.K % row_elements:
        raise WorkloadError(f"{what} needs K % {row_elements} == 0 (TMA: global rows a "
                            f"multiple of 16 bytes), got K = {spec.K}")
    if max(spec.batch, 1) > 1 and (spec.M % 64 or spec.N % 64):
        raise WorkloadError(f"{what} needs a bmm's M and N to be multiples of 64 (a tile may "
                            f"not cross a batch element: bmm_tiles_within_batch), got M = "
                            f"{spec.M}, N = {spec.N}")


def knobs(spec, stages: tuple[int, ...] = STAGES) -> list[Knob]:  # stages: the ring's depths
    return [
        Ordinal("bm", (64, 128, 192, 256), doc="CTA tile rows (BM = 64 x wgmma atoms x "
                                               "consumers)"),
        Ordinal("bn", (64, 128, 192, 256), doc="CTA tile columns = the wgmma's N"),
        Ordinal("bk", (bs.SCALE_BLOCK,) if spec.scale_block else bk_choices(spec.in_dtype),
                doc="k block per stage: rows of 128 bytes (128-byte swizzle) or 64 (64-byte): "
                    "64 or 32 16-bit elements, 128 or 64 fp8 ones"),
        Ordinal("stages", stages, doc="shared-memory ring of A/B k blocks"),
        Ordinal("consumers", (1, 2), doc="consumer warpgroups"),
        Categorical("arrangement", ("cooperative", "pingpong"),
                    doc="consumers split each tile's rows, or take turns with whole tiles"),
        Categorical("regs", tuple(REG_SPLITS), doc="setmaxnreg producer/consumer registers"),
        # block scales: every k block's tile is waited for and promoted before the next one
        Ordinal("inflight", (0,) if spec.scale_block else (0, 1),
                doc="wgmma groups left in flight when a k block ends"),
        Categorical("persistent", ("on", "off"), doc="one CTA per SM looping over tiles, or "
                                                     "one CTA per tile"),
        Ordinal("raster", (1, 2, 4, 8, 16), doc="block rows (raster_major m) or columns (n) "
                                                 "grouped in tile order (L2 reuse)"),
        Categorical("epilogue", ("v2", "scalar", "tma"),
                    doc="accumulators to C as 8-byte vector stores, one float at a time, or "
                        "through a swizzled shared-memory box that TMA stores"),
        # cluster and raster_major came after the v3 datasets and stores were recorded: theirs
        # read as 1x1 and m
        Categorical("cluster", tuple(CLUSTERS), default="1x1",
                    doc="thread-block cluster: 2x1 pairs two block rows of one block column, "
                        "whose CTAs each load half of the shared B tile and multicast it to "
                        "both; 1x2 pairs two block columns sharing A's tile"),
        Categorical("raster_major", ("m", "n"), default="m",
                    doc="tile order: groups of raster block rows walked column by column (m), "
                        "or groups of raster block columns walked row by row (n)"),
    ]


def _cluster(c, col: int):
    return np.select([c["cluster"] == n for n in CLUSTERS], [v[col] for v in CLUSTERS.values()],
                     1)


def _regs(c, col: int):
    names = list(REG_SPLITS)
    vals = [split[col] if (split := REG_SPLITS[n]) else 0 for n in names]
    return np.select([c["regs"] == n for n in names], vals, 0)


def derive(spec):
    M, N, K, batch = spec.M, spec.N, spec.K, max(spec.batch, 1)
    in_size, sms = DTYPE_BYTES[spec.in_dtype], target_sms(spec)

    def run(c):
        bm, bn, bk, cons = c["bm"], c["bn"], c["bk"], c["consumers"]
        threads = 128 * (1 + cons)
        # the kernel's tile: C's, or C^T's under swap_ab (_hopper_swap): wgmma M rows, N columns
        k_rows, k_cols = sw.kernel_tile(c)
        rows = np.where(c["arrangement"] == "pingpong", k_rows, k_rows // cons)  # one consumer's
        atoms = rows // 64
        tiles_m, tiles_n = -(-M // bm), -(-N // bn)  # ceil: ragged edges are partial tiles
        epi = np.where(c["epilogue"] == "tma", cons * EPI_SMEM_PER_CONSUMER, 0)
        # split_reduce cluster: C's fp32 staging tile over the ring where it is larger
        staging = np.where(sk.cluster_mode(c), cs.staging_bytes(bm, bn, sw.swapped(c)), 0)
        smem = np.maximum(c["stages"] * (bm + bn) * bk * in_size + epi, staging) + BARRIER_SMEM
        launch_cap = np.minimum(255, REGISTERS_PER_SM // threads // 8 * 8)
        producer_regs, setmaxnreg = _regs(c, 0), _regs(c, 1)  # each once: 500k-row draws
        consumer_regs = np.where(setmaxnreg > 0, setmaxnreg, launch_cap)
        tiles = batch * tiles_m * tiles_n
        # split K, tail split (GEMM and bmm; a space without the knob: 1): units of (k slice,
        # tile); the rounds of a walk whose last one is split (_hopper_tail.wave_rounds)
        splits, tail = (c[k] if k in c else np.ones_like(bm) for k in ("split_k", "tail_split"))
        units = tiles * splits
        cluster_m, cluster_n = _cluster(c, 0), _cluster(c, 1)
        return {"wave_efficiency": wave_efficiency(batch * M * N * splits, units, bm, bn, sms,
                                                   tail),
                "threads": threads, "atoms": atoms, "consumer_rows": rows,
                "acc_regs": atoms * k_cols // 2,
                "consumer_regs": consumer_regs, "producer_regs": producer_regs,
                "smem_bytes": smem, "dynamic_smem_bytes": smem - BARRIER_SMEM,
                "static_smem_bytes": np.full_like(bm, BARRIER_SMEM),
                "tiles_m": tiles_m, "tiles_n": tiles_n, "tiles": tiles,
                "k_blocks": -(-K // bk), "units": units,
                "grid": np.where(c["persistent"] == "on", np.minimum(sms, units), units),
                "cluster_m": cluster_m, "cluster_n": cluster_n,
                "cluster_size": cluster_m * cluster_n}

    return run


def wave_efficiency(outputs, tiles, bm, bn, sm_count: int = DEFAULT_SM_COUNT, tail=1):
    """The share of the kernel's tile slots that compute real outputs: ``outputs`` elements over
    (rounds x SMs x BM x BN), a round being one tile on each of the target's SMs (one CTA an SM:
    its launch registers take the register file). Quantization and ragged edges together: at
    1024^3 a 128 x 256 tile is 32 tiles for 132 SMs, 0.24; at 4096^3 512 tiles in 4 rounds,
    0.97. With split K the tiles are the units and the outputs count once a slice; ``tail``
    (tail_split) counts a split last round as its share. Warm starts rescale a source row's
    TFLOPS by its ratio at the target's and the source's shape (``strategies/bo/sources``)."""
    return outputs / (tl.wave_rounds(tiles, np.asarray(tail), sm_count) * sm_count * bm * bn)


def batch_constraints(spec) -> list[Constraint]:
    """A bmm's tiles stay inside one batch element (a GEMM has none of these)."""
    M, N, batch = spec.M, spec.N, max(spec.batch, 1)
    if batch == 1:
        return []
    return [Constraint(
        "bmm_tiles_within_batch",
        f"a bmm reads its {batch} batch elements as one [b x M, K] and one [b x N, K] matrix "
        f"(2-D tensor maps): a tile that crossed an element's edge would read the next "
        f"element's rows as its own (TMA zero-fills only past the last one), so BM divides "
        f"M ({M}) and BN divides N ({N}); K may be ragged (TMA zero-fills each row past K)",
        lambda c: (M % c["bm"] == 0) & (N % c["bn"] == 0))]


def constraints(spec) -> list[Constraint]:
    N, out, out_size = spec.N, spec.out_dtype, DTYPE_BYTES[spec.out_dtype]
    epi = epi_cols(out)
    out_name = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[out]
    return [
        Constraint("bm_whole_atoms", "a consumer's rows are whole m64 wgmma atoms: BM (BN under "
                   "swap_ab, the kernel's rows) % (64 x consumers) == 0 when they split a tile "
                   "(cooperative)",
                   lambda c: (c["arrangement"] == "pingpong")
                   | (sw.kernel_tile(c)[0] % (64 * c["consumers"]) == 0)),
        Constraint("pingpong_needs_two", "ping-pong takes turns: it needs 2 consumers",
                   lambda c: (c["arrangement"] == "cooperative") | (c["consumers"] == 2)),
        *batch_constraints(spec),
        Constraint("v2_stores_need_even_n",
                   f"the v2 epilogue's {2 * out_size}-byte stores (columns 2j, 2j + 1 of "
                   f"{out_name}) need N ({N}) even: aligned, and a pair is either inside C's row "
                   "or past its end",
                   lambda c: (c["epilogue"] != "v2") | (N % 2 == 0)),
        # the name says fp32's multiple (conv2d and the records before other outputs share it)
        Constraint("tma_store_needs_n_multiple_of_4",
                   f"the tma epilogue's tensor map of C needs its row stride, {out_size} N bytes "
                   f"(N = {N}, {out_name}), a multiple of 16 (cuTensorMapEncodeTiled's global "
                   "strides)",
                   lambda c: (c["epilogue"] != "tma") | (N * out_size % 16 == 0)),
        Constraint("tma_boxes_pair_up",
                   f"the tma epilogue's boxes of {epi} {out_name} columns tile BN, and its two "
                   "staging buffers alternate box by box, each tile starting on the first: a "
                   f"consumer's boxes, BN / {epi} x its m64 atoms, are even",
                   lambda c: (c["epilogue"] != "tma")
                   | ((c["bn"] % epi == 0) & (c["bn"] // epi * c["atoms"] % 2 == 0))),
        mm.shared_memory_constraint(f"stages x (BM + BN) x BK {spec.in_dtype}, the tma "
                                    "epilogue's staging boxes "
                                    f"({EPI_SMEM_PER_CONSUMER // 1024} KB a consumer) "
                                    "and the mbarriers fit the 227 KB per block (split_reduce "
                                    "cluster: C's fp32 staging tile, over the ring, too)"),
        Constraint("accumulators_fit_registers",
                   f"a consumer thread's fp32 accumulators (atoms x BN / 2) + {REGISTER_OVERHEAD}"
                   " fit its registers (setmaxnreg's consumer count, else 65536 / threads)",
                   lambda c: c["acc_regs"] + REGISTER_OVERHEAD <= c["consumer_regs"]),
        Constraint("register_file_per_sm",
                   "with setmaxnreg, 128 x (producer + consumers x consumer registers) fit the "
                   "64K-register file",
                   lambda c: 128 * (c["producer_regs"] + c["consumers"] * _regs(c, 1))
                   <= REGISTERS_PER_SM),
        Constraint("raster_divides_block_rows",
                   "raster groups whole block rows: it divides ceil(M / BM) (raster_major m), "
                   "or whole block columns: it divides ceil(N / BN) (n)",
                   lambda c: np.where(c["raster_major"] == "n", c["tiles_n"], c["tiles_m"])
                   % c["raster"] == 0),
        *cluster_constraints(spec),
        *([] if not spec.scale_block else [Constraint(
            "block_scales_fit_registers",
            f"fp8 block scales keep two accumulator sets (a k block's tile and the promoted sums, "
            f"_hopper_blockscale): 2 x atoms x BN / 2 + {REGISTER_OVERHEAD} fit a consumer "
            "thread's registers (DeepGEMM's BLOCK_N <= 192 at 128 rows for the same reason)",
            lambda c: 2 * c["acc_regs"] + REGISTER_OVERHEAD <= c["consumer_regs"])]),
    ]


def space(spec, vec: Constraint, extra_knobs: Sequence[Knob] = (),
          extra_constraints: Sequence[Constraint] = ()) -> Space:
    """``vec`` (the v1/v2 fetch's vector rule) has no knob here: TMA copies whole boxes."""
    check_workload(spec)
    widen = {"bm": sw.bm_knob, "bn": nw.bn_knob}  # the skinny GEMMs' tiles
    base = [widen[k.name](k, spec) if k.name in widen else k for k in knobs(spec)]
    return Space(base + sk.knobs(spec) + tl.knobs(spec) + sw.knobs(spec) + list(extra_knobs),
                 constraints(spec) + sk.constraints(spec) + tl.constraints(spec)
                 + sw.constraints(spec) + nw.constraints(spec) + list(extra_constraints),
                 derive(spec))


def build_options(config) -> dict:
    return {"pipeline": "tirx", "target": {"arch": ARCH}}


# ---------------------------------------------------------------------------------- kernel
def schedule(spec, func, config, prepare) -> hk.TirxKernel:  # noqa: ARG001 - v1/v2's signature
    """The kernel of one configuration (``func`` and ``prepare`` belong to the s_tir spaces)."""
    return kernel(spec.M, spec.N, spec.K, config, batch=max(spec.batch, 1),
                  in_dtype=spec.in_dtype, out_dtype=spec.out_dtype, b_dtype=spec.b_dtype,
                  sm_count=target_sms(spec), fuse=spec.fuse, scale_block=spec.scale_block,
                  names=spec.operands)


#: the operator's tensors (A, B, C of the GEMM) as a GEMV names them: vectors X [B, K] are the
#: GEMM's A, the matrix A [M, K] its B, Y [B, M] its C (gemv.py)
GEMV_NAMES = ("X", "A", "Y")


def kernel(M: int, N: int, K: int, config, *, batch: int = 1, in_dtype: str = "float16",
           out_dtype: str = "float32", b_dtype: str | None = None,
           sm_count: int = DEFAULT_SM_COUNT, fuse=None, scale_block: int = 0,
           names: tuple[str, str, str] = ("A", "B", "C")) -> hk.TirxKernel:
    from tvm.script import tirx as T

    b_dtype = b_dtype or in_dtype
    # swap_ab (_hopper_swap): the kernel computes C^T = B A^T, its first operand B (never with
    # block scales: their space has no swap_ab)
    swap = config.get("swap_ab", "off") == "on"
    p = (hk.Plan(sw.kernel_config(config), N, M, K, batch, in_dtype=b_dtype, out_dtype=out_dtype,
                 b_dtype=in_dtype, sm_count=sm_count, fuse=fuse) if swap else
         hk.Plan(config, M, N, K, batch, in_dtype=in_dtype, out_dtype=out_dtype,
                 b_dtype=b_dtype, sm_count=sm_count, fuse=fuse, scale_block=scale_block))
    # split K: every unit adds its fp32 partial sums into C, zeroed by the launch first
    # (TirxKernel.zeroed): TMA's reduce-add (tma epilogue) or red.global.add; or (split_reduce
    # cluster) the slices meet in a cluster and store C once
    adds = p.splits > 1 and not p.cluster_reduce
    assert not (adds or p.tail > 1) or out_dtype == "float32", "split_k_needs_fp32_output"
    split_cluster = None
    if p.cluster_reduce:
        p.stage_in_cluster(int(cs.staging_bytes(config["bm"], config["bn"], swap)))
        split_cluster = cs.cluster_reduce(p, swap=swap, rows=batch * M, cols=N,
                                          out_dtype=out_dtype)
    zeroed = (names[2],) if adds else ()
    BM, BK, tma_store = p.BM, p.BK, p.tma_store
    a_box, b_box = (p.b_box, p.a_box) if swap else (p.a_box, p.b_box)  # A's and B's boxes
    maps = {"A_map": tensor_map(names[0], batch * M, K, a_box, BK, in_dtype),
            "B_map": tensor_map(names[1], batch * N, K, b_box, BK, b_dtype)}
    if tma_store:
        maps["C_map"] = tensor_map(names[2], batch * M, N, EPI_ROWS, epi_cols(out_dtype),
                                   out_dtype)
    a_tma, b_tma, *c_tma = (encode_args(m) for m in maps.values())
    def stores(adds: bool):  # tail_split: whole tiles store, the last round's k slices add
        return (sw.transposed_stores(p, out_dtype, adds=adds) if swap else
                row_major_stores(p, M, N, out_dtype, adds=adds))

    plain = stores(False)
    tail = tl.Tail(p, plain, stores(True)) if p.tail > 1 else None
    store_box, store_rows = stores(True) if adds else plain
    body = hk.device_body(p, hk.Operands(a_coords=lambda kb, tm: (kb * BK, tm * BM), a_rank=2,
                                         store_box=store_box, store_rows=store_rows,
                                         split_cluster=split_cluster, tail=tail))

    @T.macro
    def launch(A, B, C, scale_a, scale_b, bias=None):
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, in_dtype, 2, A.data, *a_tma)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, b_dtype, 2, B.data, *b_tma)
        if tma_store:  # C's tensor map exists only for the tma epilogue
            C_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.call_packed("runtime.cuTensorMapEncodeTiled", C_map, out_dtype, 2, C.data,
                          *c_tma[0])
        T.device_entry()
        if swap:  # the kernel's first operand is B
            body(B_map, A_map, C, None, scale_a, scale_b, bias)
        else:
            body(A_map, B_map, C, C_map if tma_store else None, scale_a, scale_b, bias)

    if fuse is not None and fuse.bias:  # a bias vector among the parameters (_fuse.entry)
        return p.kernel(fx.entry(launch, rows_a=batch * M, rows_b=batch * N, K=K, N=N,
                                 in_dtype=in_dtype, b_dtype=b_dtype, out_dtype=out_dtype,
                                 scaled=p.scaled), maps)
    if names == GEMV_NAMES:  # the kernel's parameters named as the GEMV's tensors
        @T.prim_func
        def gemv(A_ptr: T.handle, X_ptr: T.handle, Y_ptr: T.handle):
            A = T.match_buffer(A_ptr, (N, K), b_dtype, align=16)  # the matrix: the GEMM's B
            X = T.match_buffer(X_ptr, (M, K), in_dtype, align=16)  # the vectors: its A
            Y = T.match_buffer(Y_ptr, (M, N), out_dtype, align=16)
            launch(X, A, Y, None, None)

        return p.kernel(gemv, maps, zeroed)
    if not p.scaled and not p.block_scaled:
        @T.prim_func
        def main(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
            A = T.match_buffer(A_ptr, (batch * M, K), in_dtype, align=16)
            B = T.match_buffer(B_ptr, (batch * N, K), b_dtype, align=16)
            C = T.match_buffer(C_ptr, (batch * M, N), out_dtype, align=16)
            launch(A, B, C, None, None)

        return p.kernel(main, maps, zeroed)

    sa_shape, sb_shape = bs.scale_shapes(M, N, K) if p.block_scaled else ((1,), (1,))

    @T.prim_func
    def scaled(A_ptr: T.handle, B_ptr: T.handle, scale_a_ptr: T.handle,
               scale_b_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (batch * M, K), in_dtype, align=16)
        B = T.match_buffer(B_ptr, (batch * N, K), b_dtype, align=16)
        # fp8's per-tensor scales, one fp32 each, or block scales (the workload's scale_a,
        # scale_b; row-major)
        scale_a = T.match_buffer(scale_a_ptr, sa_shape, "float32")
        scale_b = T.match_buffer(scale_b_ptr, sb_shape, "float32")
        C = T.match_buffer(C_ptr, (batch * M, N), out_dtype, align=16)
        launch(A, B, C, scale_a, scale_b)

    # the kernel's name is the unscaled one's ("main_kernel")
    return p.kernel(scaled.with_attr("global_symbol", "main"), maps, zeroed)
