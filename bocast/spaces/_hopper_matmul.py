"""Space v3: a Hopper GEMM template (TMA + wgmma + warp specialization), written in TVM's TIRx.

No Hopper GEMM exists in TVM 0.27 (its s_tir schedules know mma.sync and WMMA only), so this
space is not a schedule of the TE matmul: it is a kernel template, one generator that takes a
configuration and returns a TIRx PrimFunc, compiled with ``tir_pipeline="tirx"`` for ``sm_90a``
(ptxas rejects wgmma on plain sm_90). The kernel follows CUTLASS's warp-specialized sm90 kernels
and ThunderKittens' H100 GEMM:

    one CTA per SM (persistent) or per tile; 128 x (1 + consumers) threads
    warpgroup 0, the producer (``setmaxnreg.dec``): one thread walks the CTA's tiles and k
      blocks, waits for a free stage (``empty[s]``), and issues two TMA loads (A, B boxes of
      BM x BK and BN x BK, 128- or 64-byte swizzle) that complete on ``full[s]``
    warpgroups 1..C, the consumers (``setmaxnreg.inc``): each owns BM / C rows of the tile; per k
      block it waits ``full[s]``, issues BK / 16 x (BM / C / 64) ``wgmma.mma_async m64nBNk16``
      from shared-memory descriptors, commits, waits (all groups, or all but the newest one) and
      frees the stage; at the end of a tile it stores its fp32 accumulators straight to C
      (``epilogue`` "v2": 8-byte stores, "scalar": 4-byte ones), or ("tma") box by box, 64 rows
      x 32 columns, into a shared-memory staging buffer in TMA's 128-byte swizzle, which one
      thread stores to C with ``cp.async.bulk.tensor`` (two buffers a consumer alternate)
    tiles in grouped order: ``raster`` block rows at a time (Triton's GROUP_M) for L2 reuse
    thread-block clusters (``cluster`` 2x1 or 1x2, CUTLASS's ClusterShape with multicast): two
      CTAs (a 1-D cluster of the grid) hold paired tiles at every step of their walk, 2x1 two
      block rows of one block column (they share B's tile), 1x2 two block columns of one block
      row (sharing A's). Each CTA's producer loads its own operand and its half of the shared
      one (a box of BN / 2 or BM / 2 rows), which ``.multicast::cluster`` (CTA mask 0b11)
      writes into both CTAs' stage s and completes on both CTAs' ``full[s]`` (each expects the
      whole stage's bytes); a stage is overwritten only when the consumers of both CTAs have
      released it (``empty[s]`` counts consumers x 2 arrivals; each release arrives on both
      CTAs' barriers, the peer's through its ``mapa`` shared::cluster address, CTA-scoped
      as CUTLASS's ClusterBarrier does; the producer's wait is CTA-scoped too). The barriers' inits
      are fenced for the cluster (``fence.mbarrier_init.release.cluster``) and a cluster
      barrier follows them, before any remote use; a cluster barrier ends the kernel, so no
      CTA exits while its peer may still arrive on its barriers. The launch gives the cluster
      dims (cuLaunchKernelEx, :attr:`TirxKernel.cluster`, as TVM's host code does)

The matmul is C[M, N] = A[M, K] B[N, K]^T (the GEMM's NT layout, both operands K-major, which is
wgmma's native form), fp16 in, fp32 accumulate and out. A GEMM's extents may be ragged (M, N, K
need not be multiples of BM, BN, BK; K % 8 == 0 remains, TMA's global rows being multiples of 16
bytes): tiles and k blocks are counted by ceil-division, TMA zero-fills the parts of its boxes
past an edge (the mbarrier still receives the whole box's bytes, as CUTLASS's fixed
TmaTransactionBytes relies on), and the direct stores test their row and column against M and
N (generated only for an extent that is ragged); the TMA store clips its boxes at C's edges
(the tma epilogue needs N % 4 == 0: C's rows must be multiples of 16 bytes for its tensor map).
What the template does not do yet: clusters of more than 2 CTAs, stmatrix (it moves
16-bit elements: no use for the fp32 output), a conflict-free staging layout (the swizzled box
costs 2 shared-memory wavefronts a half-warp's store, see :func:`staging_offset`), overlapping
a tile's epilogue with the next tile's main loop beyond what ping-pong gives, the NN layout and
fp16 output. A bmm (C[b] = A[b] B[b]^T)
is the same kernel over the batch's tiles: its operands are read as one [b x M, K] and one
[b x N, K] matrix (2-D tensor maps) and the persistent loop walks batch x tiles, batch
outermost; a tile must not cross a batch element (``bmm_tiles_within_batch``: BM divides M, BN
divides N; K may be ragged). Configurations outside it are refused by named constraints or,
for the workload, by :func:`check_workload`.

Kernel arguments: the tensor maps of A and B (``__grid_constant__ CUtensorMap``, encoded by the
runner with ``cuTensorMapEncodeTiled`` from :attr:`TirxKernel.tensor_maps`) and C's pointer, or
with the tma epilogue C's tensor map (fp32).
"""

# ruff: noqa: F821 - the kernel's scalars (desc_a: T.uint64) are declared by annotation, which
# TVMScript's parser turns into variables and Python's linters see as undefined names
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bocast.operator import WorkloadError
from bocast.space import Categorical, Constraint, Knob, Ordinal, Space

from . import _matmul as mm

SM_COUNT = 132  # H100 SXM and H200: the persistent grid's size
ARCH = "sm_90a"
REGISTERS_PER_SM = 65536
#: setmaxnreg pairs (producer, consumer); "off" leaves every thread at the launch's share
REG_SPLITS = {"off": None, "24/240": (24, 240), "40/232": (40, 232), "56/224": (56, 224)}
#: registers a consumer thread needs beyond its accumulators (descriptors, addresses, loop
#: state); CUTLASS's and ThunderKittens' 128 x 256 tiles (128 accumulators a thread) fit 168
REGISTER_OVERHEAD = 40
BARRIER_SMEM = 1024  # the mbarriers' static shared memory, as ptxas reports it (alignment)
#: TMA swizzle mode (CUtensorMapSwizzle) and wgmma descriptor swizzle, by row bytes of a tile
SWIZZLE = {128: 3, 64: 2}
#: the "tma" epilogue's staging box: 64 rows x 32 fp32 columns (128-byte rows, the 128-byte
#: swizzle's width), two of them per consumer (one is written while TMA stores the other)
EPI_ROWS, EPI_COLS, EPI_BUFFERS = 64, 32, 2
EPI_BOX_BYTES = EPI_ROWS * EPI_COLS * 4
EPI_SMEM_PER_CONSUMER = EPI_BUFFERS * EPI_BOX_BYTES
DTYPE_BYTES = {"float16": 2, "float32": 4}
#: thread-block clusters, as (block rows, block columns) of C a cluster's CTAs hold at once: 2x1
#: pairs two block rows of one block column (they share B's tile), 1x2 two block columns of one
#: block row (they share A's); launched as a 1-D cluster of 2 CTAs along the grid either way
CLUSTERS = {"1x1": (1, 1), "2x1": (2, 1), "1x2": (1, 2)}
#: the multicast's CTA mask: both CTAs of a 2-CTA cluster receive each half of the shared tile
CLUSTER_MASK = 0b11
#: no batch_bind knob (bocast/spaces/_matmul.space): the persistent tile loop walks batch x tiles
BATCH_KNOB = False


def check_workload(spec: mm.MatmulSpec) -> None:
    """What the template implements, refused by name otherwise."""
    what = "space v3 (Hopper TMA + wgmma)"
    if spec.epilogue is not None or spec.block != "C":
        raise WorkloadError(f"{what} implements GEMM and bmm only so far; use space v2")
    if not spec.trans_b:
        raise WorkloadError(f"{what} needs layout NT (B stored [N, K], K-major); use space v2 "
                            "for NN")
    if spec.in_dtype != "float16" or spec.acc_dtype != "float32":
        raise WorkloadError(f"{what} implements fp16:fp32 only; use space v2")
    if spec.K % 8:
        raise WorkloadError(f"{what} needs K % 8 == 0 (TMA: global rows a multiple of 16 "
                            f"bytes), got K = {spec.K}")
    if max(spec.batch, 1) > 1 and (spec.M % 64 or spec.N % 64):
        raise WorkloadError(f"{what} needs a bmm's M and N to be multiples of 64 (a tile may "
                            f"not cross a batch element: bmm_tiles_within_batch), got M = "
                            f"{spec.M}, N = {spec.N}")


def knobs(spec) -> list[Knob]:
    return [
        Ordinal("bm", (64, 128, 192, 256), doc="CTA tile rows (BM = 64 x wgmma atoms x "
                                               "consumers)"),
        Ordinal("bn", (64, 128, 192, 256), doc="CTA tile columns = the wgmma's N"),
        Ordinal("bk", (32, 64), doc="k block per stage (64: 128-byte swizzle, 32: 64-byte)"),
        Ordinal("stages", (2, 3, 4, 5, 6), doc="shared-memory ring of A/B k blocks"),
        Ordinal("consumers", (1, 2), doc="consumer warpgroups"),
        Categorical("arrangement", ("cooperative", "pingpong"),
                    doc="consumers split each tile's rows, or take turns with whole tiles"),
        Categorical("regs", tuple(REG_SPLITS), doc="setmaxnreg producer/consumer registers"),
        Ordinal("inflight", (0, 1), doc="wgmma groups left in flight when a k block ends"),
        Categorical("persistent", ("on", "off"), doc="one CTA per SM looping over tiles, or "
                                                     "one CTA per tile"),
        Ordinal("raster", (1, 2, 4, 8, 16), doc="block rows grouped in tile order (L2 reuse)"),
        Categorical("epilogue", ("v2", "scalar", "tma"),
                    doc="accumulators to C as 8-byte vector stores, one float at a time, or "
                        "through a swizzled shared-memory box that TMA stores"),
        # added after the v3 datasets and stores were recorded: theirs read as 1x1
        Categorical("cluster", tuple(CLUSTERS), default="1x1",
                    doc="thread-block cluster: 2x1 pairs two block rows of one block column, "
                        "whose CTAs each load half of the shared B tile and multicast it to "
                        "both; 1x2 pairs two block columns sharing A's tile"),
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

    def run(c):
        bm, bn, bk, cons = c["bm"], c["bn"], c["bk"], c["consumers"]
        threads = 128 * (1 + cons)
        rows = np.where(c["arrangement"] == "pingpong", bm, bm // cons)  # one consumer's
        atoms = rows // 64
        tiles_m, tiles_n = -(-M // bm), -(-N // bn)  # ceil: ragged edges are partial tiles
        epi = np.where(c["epilogue"] == "tma", cons * EPI_SMEM_PER_CONSUMER, 0)
        smem = c["stages"] * (bm + bn) * bk * 2 + epi + BARRIER_SMEM
        launch_cap = np.minimum(255, REGISTERS_PER_SM // threads // 8 * 8)
        consumer_regs = np.where(_regs(c, 1) > 0, _regs(c, 1), launch_cap)
        tiles = batch * tiles_m * tiles_n
        return {"threads": threads, "atoms": atoms, "consumer_rows": rows,
                "acc_regs": atoms * bn // 2,
                "consumer_regs": consumer_regs, "producer_regs": _regs(c, 0),
                "smem_bytes": smem, "dynamic_smem_bytes": smem - BARRIER_SMEM,
                "static_smem_bytes": np.full_like(bm, BARRIER_SMEM),
                "tiles_m": tiles_m, "tiles_n": tiles_n, "tiles": tiles,
                "k_blocks": -(-K // bk),
                "grid": np.where(c["persistent"] == "on", np.minimum(SM_COUNT, tiles), tiles),
                "cluster_m": _cluster(c, 0), "cluster_n": _cluster(c, 1),
                "cluster_size": _cluster(c, 0) * _cluster(c, 1)}

    return run


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
    N = spec.N
    return [
        Constraint("bm_whole_atoms", "a consumer's rows are whole m64 wgmma atoms: BM % (64 x "
                   "consumers) == 0 when they split a tile (cooperative)",
                   lambda c: (c["arrangement"] == "pingpong")
                   | (c["bm"] % (64 * c["consumers"]) == 0)),
        Constraint("pingpong_needs_two", "ping-pong takes turns: it needs 2 consumers",
                   lambda c: (c["arrangement"] == "cooperative") | (c["consumers"] == 2)),
        *batch_constraints(spec),
        Constraint("v2_stores_need_even_n",
                   f"the v2 epilogue's 8-byte stores (columns 2j, 2j + 1) need N ({N}) even: "
                   "aligned, and a pair is either inside C's row or past its end",
                   lambda c: (c["epilogue"] != "v2") | (N % 2 == 0)),
        Constraint("tma_store_needs_n_multiple_of_4",
                   f"the tma epilogue's tensor map of C needs its row stride, 4 N bytes (N = "
                   f"{N}), a multiple of 16 (cuTensorMapEncodeTiled's global strides)",
                   lambda c: (c["epilogue"] != "tma") | (N % 4 == 0)),
        mm.shared_memory_constraint("stages x (BM + BN) x BK fp16, the tma epilogue's staging "
                                    f"boxes ({EPI_SMEM_PER_CONSUMER // 1024} KB a consumer) "
                                    "and the mbarriers fit the 227 KB per block"),
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
                   "raster groups whole block rows: it divides ceil(M / BM)",
                   lambda c: (c["tiles_m"] % c["raster"] == 0)),
        *cluster_constraints(spec),
    ]


def cluster_constraints(spec) -> list[Constraint]:
    """What a 2-CTA cluster (2x1 or 1x2) needs; 1x1 passes every one."""
    M, N = spec.M, spec.N
    return [
        Constraint("cluster_pairs_whole_tiles",
                   "a cluster's two CTAs hold paired tiles at every step of their walk (2x1: "
                   "block rows 2p and 2p + 1 of one block column; 1x2: block columns 2q and "
                   "2q + 1 of one block row) and walk the same number of them, so the pairing "
                   f"is exact: ceil(M / BM) even for 2x1 (M = {M}), ceil(N / BN) even for 1x2 "
                   f"(N = {N}), in each batch element",
                   lambda c: (c["tiles_m"] % c["cluster_m"] == 0)
                   & (c["tiles_n"] % c["cluster_n"] == 0)),
        Constraint("cluster_shared_operand_whole",
                   "each CTA of a cluster loads one half of the shared operand's box (2x1: B's "
                   "BN rows, 1x2: A's BM rows) and multicasts it to both, so that operand's "
                   f"rows have no ragged edge: N % BN == 0 for 2x1 (N = {N}), M % BM == 0 for "
                   f"1x2 (M = {M}); ragged extents only along the paired dimension",
                   lambda c: ((c["cluster_m"] == 1) | (N % c["bn"] == 0))
                   & ((c["cluster_n"] == 1) | (M % c["bm"] == 0))),
        Constraint("cluster_divides_grid",
                   f"the grid ({SM_COUNT} persistent CTAs or one a tile, at most the tiles) is "
                   "whole clusters: the cluster size divides it",
                   lambda c: c["grid"] % c["cluster_size"] == 0),
    ]


def space(spec, vec: Constraint, extra_knobs: Sequence[Knob] = (),
          extra_constraints: Sequence[Constraint] = ()) -> Space:
    """``vec`` (the v1/v2 fetch's vector rule) has no knob here: TMA copies whole boxes."""
    check_workload(spec)
    return Space(knobs(spec) + list(extra_knobs), constraints(spec) + list(extra_constraints),
                 derive(spec))


def build_options(config) -> dict:
    return {"pipeline": "tirx", "target": {"arch": ARCH}}


# ---------------------------------------------------------------------------------- kernel


@dataclass
class TirxKernel:
    """A v3 kernel: its IRModule and what launching it takes (the runner needs no TVM)."""

    mod: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    #: kernel parameter name -> how the runner encodes that tensor map (cuTensorMapEncodeTiled
    #: of the named tensor: dims and byte strides innermost first, box, swizzle)
    tensor_maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: thread-block cluster dims the launch must give (cuLaunchKernelEx's
    #: CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; TVM's host code launches it so from the
    #: kernel's clusterCtaIdx extent); (1, 1, 1): a plain launch
    cluster: tuple[int, int, int] = (1, 1, 1)


def tensor_map(tensor: str, rows: int, cols: int, box_rows: int, box_cols: int,
               dtype: str = "float16") -> dict:
    """A row-major [rows, cols] tensor of ``dtype`` moved in [box_rows, box_cols] boxes (a box
    row of 128 or 64 bytes: that swizzle). The runner encodes it with the tensor's own dtype
    (the operator's), which ``dtype`` names."""
    size = DTYPE_BYTES[dtype]
    return {"tensor": tensor, "dtype": dtype, "dims": [cols, rows], "strides": [cols * size],
            "box": [box_cols, box_rows], "swizzle": SWIZZLE[box_cols * size]}


def tile_coords(t, *, M: int, N: int, BM: int, BN: int, G: int,
                cluster: tuple[int, int] = (1, 1), rank=0):
    """Tile ``t`` of a CTA's walk (a TIR expression in the kernel, an int in tests): (A's and
    C's block row over the [b x M] rows, C's block column, B's first row over the [b x N] rows).
    Batch element outermost; inside it grouped order, ``G`` block rows at a time, column by
    column within a group (Triton's GROUP_M: neighbouring CTAs share operands in L2).

    With a cluster of (rows, columns) tiles (:data:`CLUSTERS`), ``t`` counts the cluster's
    tiles, blocks of rows x columns tiles, in the same order (``G`` block rows a group, at least
    one cluster row: max(1, G // rows) cluster rows), and the CTA of cluster rank ``rank`` takes
    tile (rank % rows, rank // rows) of the block: both CTAs of a cluster walk the same blocks,
    so their tiles pair up at every step (cluster_pairs_whole_tiles: the blocks tile C
    exactly). (1, 1): the walk of one CTA, tile by tile."""
    cm, cn = cluster
    tiles_m, tiles_n = -(-M // BM), -(-N // BN)  # ceil: the last row/column may be partial
    ctm, ctn, gc = tiles_m // cm, tiles_n // cn, max(1, G // cm)  # cluster rows, columns
    per_batch, per_group = ctm * ctn, gc * ctn
    b, r = t // per_batch, t % per_batch
    pn = r % per_group // gc
    pm = r // per_group * gc + r % per_group % gc
    tm = pm * cm + (rank % cm if cm > 1 else 0)
    tn = pn * cn + (rank // cm if cn > 1 else 0)
    return b * tiles_m + tm, tn, b * N + tn * BN


def staging_offset(lt, jj, h):
    """Byte offset, in a staging box of the tma epilogue, of consumer thread ``lt``'s pair of
    accumulators (jj, h): row lt/32*16 + lt%32/4 + 8 h, columns 8 jj + 2 (lt % 4) (+1) of the
    box, at the address TMA's 128-byte swizzle gives them (16-byte chunk c of row r at chunk
    c ^ (r % 8); the box's rows are 128 bytes). A TIR expression in the kernel, an int in tests.

    Bank conflicts: a half-warp's 8-byte stores (4 rows x 4 column pairs) land on 4 distinct
    16-byte chunks of the 8 a conflict-free store would use, so each store takes 2 shared-memory
    wavefronts per half-warp instead of 1 (a padded box would avoid it, but TMA reads the box
    unpadded; without a swizzle the 4 rows would share one chunk: 4-way)."""
    r = lt // 32 * 16 + lt % 32 // 4 + h * 8
    return r * EPI_COLS * 4 + ((jj * 2 + lt % 4 // 2) ^ (r % 8)) * 16 + lt % 2 * 8


def schedule(spec, func, config, prepare) -> TirxKernel:  # noqa: ARG001 - v1/v2's signature
    """The kernel of one configuration (``func`` and ``prepare`` belong to the s_tir spaces)."""
    return kernel(spec.M, spec.N, spec.K, config, batch=max(spec.batch, 1))


def kernel(M: int, N: int, K: int, config, *, batch: int = 1) -> TirxKernel:
    import tvm
    from tvm.script import tirx as T

    c = config
    BM, BN, BK, S, NC = (int(c[k]) for k in ("bm", "bn", "bk", "stages", "consumers"))
    G, inflight = int(c["raster"]), int(c["inflight"])
    split = REG_SPLITS[c["regs"]]
    pingpong = c["arrangement"] == "pingpong"
    WM = BM if pingpong else BM // NC  # rows of a tile one consumer computes
    atoms = WM // 64
    step = NC if pingpong else 1  # tiles between two of one consumer's
    vec_store, tma_store = c["epilogue"] == "v2", c["epilogue"] == "tma"
    CM, CN = CLUSTERS[c.get("cluster", "1x1")]  # a configuration from before the knob: 1x1
    CS = CM * CN  # CTAs a cluster
    tiles_m, tiles_n, KT = -(-M // BM), -(-N // BN), -(-K // BK)  # ragged edges: partial tiles
    # ragged M or N (a GEMM's only: bmm_tiles_within_batch): the direct stores test their rows
    # and columns; TMA zero-fills the loads past each edge (and past K)
    pred_m, pred_n = M % BM != 0, N % BN != 0
    pred_n1 = N % 2 != 0  # scalar stores: column 2j + 1 may be past the edge while 2j is not
    per_batch = tiles_m * tiles_n
    tiles = batch * per_batch
    grid = min(SM_COUNT, tiles) if c["persistent"] == "on" else tiles
    assert tiles % CS == 0 and grid % CS == 0, "cluster_pairs_whole_tiles, cluster_divides_grid"
    clusters = grid // CS  # the walk's stride, in blocks of CS tiles (one tile: CS = 1)
    threads = 128 * (NC + 1)
    half_n = BN // 2  # accumulators of one m64 atom per thread
    stage_bytes = (BM + BN) * BK * 2
    ring = S * (BM + BN) * BK  # fp16 elements of the ring; the tma epilogue's boxes follow it
    epi_bytes = NC * EPI_SMEM_PER_CONSUMER if tma_store else 0
    box_chunks = BN // EPI_COLS  # staging boxes per m64 atom (even: BN is a multiple of 64)
    assert box_chunks * EPI_COLS == BN and (atoms * box_chunks) % EPI_BUFFERS == 0
    swz = SWIZZLE[BK * 2]
    sbo = 8 * BK * 2 // 16  # descriptor: bytes between 8-row core matrices, in 16-byte units

    def tile(t, rank):  # (A/C block row, C block column, B's first row) of this CTA's tile t
        return tile_coords(t, M=M, N=N, BM=BM, BN=BN, G=G, cluster=(CM, CN), rank=rank)

    mma = f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.f16.f16"
    tma = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
    tma_mc = tma + ".multicast::cluster"
    tma_st = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
    # the shared operand's box is half its tile: each CTA of a cluster loads (and multicasts)
    # its half, rows rank x half
    a_box, b_box = BM // CN, BN // CM
    maps = {"A_map": tensor_map("A", batch * M, K, a_box, BK),
            "B_map": tensor_map("B", batch * N, K, b_box, BK)}
    if tma_store:
        maps["C_map"] = tensor_map("C", batch * M, N, EPI_ROWS, EPI_COLS, "float32")
    a_tma, b_tma, *c_tma = ([*m["dims"], *m["strides"], *m["box"], 1, 1, 0, m["swizzle"], 0, 0]
                            for m in maps.values())

    def sm(s, r, col):  # fp16 element (row r, column col) of stage s in the ring
        return (s * (BM + BN) + r) * BK + col

    def acc_list(buf, a):
        return [buf[a * half_n + i] for i in range(half_n)]

    @T.macro
    def release(empty, stage, when, lt):
        """Consumer thread ``lt`` frees ``stage`` (if ``when``): thread 0 arrives on its CTA's
        empty barrier, or with a cluster thread r on rank r's, through the barrier's
        shared::cluster address (mapa)."""
        if CS == 1:
            if when and lt == 0:
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[stage]))
        elif when and lt < CS:
            peer = T.alloc_buffer((1,), "uint32", scope="local")
            T.ptx.mapa.shared__cluster.u32(
                peer[0], T.cuda.cvta_generic_to_shared(T.address_of(empty[stage])), T.uint32(lt))
            # CTA-scoped (the default .release.cta), as CUTLASS's ClusterBarrier::arrive:
            # the stage's wgmma reads are done (waited for), nothing else needs ordering.
            # With .release.cluster here and .acquire.cluster in the producer's wait, every
            # cluster kernel ran 20-26% slower than its 1x1 twin (ncu: tensor pipe 58% busy
            # against 86%); CTA-scoped, they tie (H200, hopper/cluster_scope_*_h200.txt)
            T.ptx.mbarrier.arrive.shared__cluster.b64(peer[0])

    @T.prim_func
    def main(A_ptr: T.handle, B_ptr: T.handle, C_ptr: T.handle):
        A = T.match_buffer(A_ptr, (batch * M, K), "float16", align=16)
        B = T.match_buffer(B_ptr, (batch * N, K), "float16", align=16)
        C = T.match_buffer(C_ptr, (batch * M, N), "float32", align=16)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, "float16", 2, A.data, *a_tma)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, "float16", 2, B.data, *b_tma)
        if tma_store:  # C's tensor map exists only for the tma epilogue
            C_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
            T.call_packed("runtime.cuTensorMapEncodeTiled", C_map, "float32", 2, C.data,
                          *c_tma[0])

        T.device_entry()
        if CS > 1:
            # declares the cluster: TVM's host code launches the kernel with cluster dims (CS,
            # 1, 1), its clusterCtaIdx.x extent (cuLaunchKernelEx), as the runner does
            T.cta_id_in_cluster([CS])
        cta = T.cta_id([grid])
        # the CTA's rank in its cluster: %cluster_ctarank is blockIdx.x % CS for a 1-D cluster
        # of a 1-D grid; the remainder (unlike the special register, read by a volatile asm at
        # every use) is plain arithmetic the compiler shares
        rank = T.meta_var(cta % CS if CS > 1 else 0)
        cl = T.meta_var(cta // CS)  # this CTA's cluster
        n_tiles = T.meta_var((tiles // CS - cl + clusters - 1) // clusters)  # its walk's length
        tx = T.thread_id([threads])
        # one dynamic allocation (TIRx allows one): stage s holds A's BM rows, then B's BN rows
        # (sm(s, r, col)); after the ring, the tma epilogue's staging boxes (fp32 in fp16 pairs)
        Sm = T.alloc_buffer((ring + epi_bytes // 2,), "float16", scope="shared.dyn", align=1024)
        full = T.alloc_buffer((S,), "uint64", scope="shared", align=8)
        empty = T.alloc_buffer((S,), "uint64", scope="shared", align=8)
        # ping-pong: turn[w] completes when the other consumer ends a main loop, so w's loop
        # starts after it (see the consumers' loop)
        turn = T.alloc_buffer((2,), "uint64", scope="shared", align=8)
        acc = T.alloc_buffer((atoms * half_n,), "float32", scope="local")
        desc_a: T.uint64
        desc_b: T.uint64
        wg = tx // 128
        if tx == 0:
            for s in T.unroll(S):
                T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
                # a stage is free once every consumer that reads it, in every CTA of the cluster
                # (its producer writes it there too), has released it
                T.ptx.mbarrier.init.shared.b64(T.address_of(empty[s]),
                                               T.uint32((1 if pingpong else NC) * CS))
            for w in T.unroll(2):
                T.ptx.mbarrier.init.shared.b64(T.address_of(turn[w]), T.uint32(1))
            if CS > 1:  # the inits visible to the cluster before the peer's first remote use
                T.ptx.fence.mbarrier_init.release.cluster()
        T.ptx.fence.proxy.async_.shared__cta()
        if CS > 1:
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()
        if wg == 0:
            if split is not None:
                T.ptx.setmaxnreg.dec.sync.aligned.u32(split[0])
            if tx == 0:
                for i in T.serial(n_tiles):
                    tm = T.meta_var(tile(cl + i * clusters, rank)[0])
                    bn0 = T.meta_var(tile(cl + i * clusters, rank)[2])
                    # a cluster's producer keeps its k loop rolled: unrolled (a short constant KT,
                    # a ring of 6 stages) its addresses outgrow the setmaxnreg.dec count and ptxas
                    # spills (1000 x 1024 x 1000, 128 x 128 tiles, 6 stages: 156 bytes)
                    for kb in T.serial(KT, unroll=False if CS > 1 else None):
                        it = T.meta_var(i * KT + kb)  # k blocks this CTA loaded before
                        s = T.meta_var(it % S)
                        # parity of the stage's previous release; the first pass finds every
                        # stage free (waiting on the parity before a barrier's first phase)
                        # released by the peer's consumers too with a cluster (remote
                        # arrives); a CTA-scoped wait, as CUTLASS's producer's
                        T.cuda.mbarrier_wait(T.address_of(empty[s]), ((it // S) & 1) ^ 1)
                        # the whole stage arrives here, the peer's half of a shared tile too
                        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(full[s]),
                                                                   T.uint32(stage_bytes))
                        if CN > 1:  # 1x2: this CTA's half of A, to both CTAs' stage s
                            T.ptx[tma_mc](T.address_of(Sm[sm(s, rank * a_box, 0)]),
                                          T.address_of(A_map), kb * BK, tm * BM + rank * a_box,
                                          T.address_of(full[s]), CLUSTER_MASK)
                        else:
                            T.ptx[tma](T.address_of(Sm[sm(s, 0, 0)]), T.address_of(A_map),
                                       kb * BK, tm * BM, T.address_of(full[s]))
                        if CM > 1:  # 2x1: this CTA's half of B, to both CTAs' stage s
                            T.ptx[tma_mc](T.address_of(Sm[sm(s, BM + rank * b_box, 0)]),
                                          T.address_of(B_map), kb * BK, bn0 + rank * b_box,
                                          T.address_of(full[s]), CLUSTER_MASK)
                        else:
                            T.ptx[tma](T.address_of(Sm[sm(s, BM, 0)]), T.address_of(B_map),
                                       kb * BK, bn0, T.address_of(full[s]))
        else:
            if split is not None:
                T.ptx.setmaxnreg.inc.sync.aligned.u32(split[1])
            cw = T.meta_var(wg - 1)
            lt = T.meta_var(tx % 128)
            row0 = T.meta_var(0 if pingpong else cw * WM)  # this consumer's rows of a tile
            # cooperative: every consumer takes every tile; ping-pong: consumer cw every NC-th,
            # so one's epilogue overlaps another's main loop
            for j in T.serial((n_tiles - (cw if pingpong else 0) + step - 1) // step):
                i = T.meta_var(j * step + (cw if pingpong else 0))
                tm = T.meta_var(tile(cl + i * clusters, rank)[0])
                tn = T.meta_var(tile(cl + i * clusters, rank)[1])
                if pingpong:  # noqa: SIM102 - a static test outside, a TIR test inside
                    # mbarrier waits test a phase's parity, so a consumer may run at most one
                    # phase ahead of a barrier: taking turns keeps the other consumer's k blocks
                    # from being seen as this one's. Consumer 0's j-th tile (after the first)
                    # follows consumer 1's (j-1)-th, consumer 1's j-th follows consumer 0's j-th.
                    if i > 0:
                        T.cuda.mbarrier_wait(T.address_of(turn[cw]), (j - 1 + cw) & 1)
                for kb in T.serial(KT):
                    it = T.meta_var(i * KT + kb)
                    s = T.meta_var(it % S)
                    T.cuda.mbarrier_wait(T.address_of(full[s]), (it // S) & 1)
                    T.ptx.wgmma.fence.sync.aligned()
                    for kk in T.unroll(BK // 16):
                        T.cuda.wgmma.encode_matrix_descriptor(
                            T.address_of(desc_b), T.address_of(Sm[sm(s, BM, kk * 16)]), 1, sbo, swz)
                        for a in T.unroll(atoms):
                            T.cuda.wgmma.encode_matrix_descriptor(
                                T.address_of(desc_a),
                                T.address_of(Sm[sm(s, row0 + a * 64, kk * 16)]), 1, sbo, swz)
                            T.ptx[mma](*acc_list(acc, a), desc_a, desc_b,
                                       T.ptx.pred((kb > 0) or (kk > 0)), 1, 1, 0, 0)
                    T.ptx.wgmma.commit_group.sync.aligned()
                    if inflight == 0:
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        release(empty, s, True, lt)
                    else:
                        # the newest group may still read stage s: free the one before it
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        release(empty, (it + S - 1) % S, kb > 0, lt)
                if inflight == 1:
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    release(empty, (i * KT + KT - 1) % S, True, lt)
                if pingpong and lt == 0:
                    T.ptx.mbarrier.arrive.shared.b64(T.address_of(turn[1 - cw]))
                # wgmma's m64nNk16 f32 fragment: thread lt holds rows lt/32*16 + lt%32/4 (+8),
                # columns 8 j + 2 (lt % 4) (+1)
                if tma_store:
                    # box by box (64 rows x 32 columns): every thread writes its 16 floats of the
                    # box to a staging buffer in TMA's 128-byte swizzle (16-byte chunk q of row
                    # i at chunk q ^ (i % 8)), fences them for the async proxy, the consumer's
                    # 128 threads meet at named barrier 1 + cw, and one thread has TMA store
                    # the box (clipped at C's edges). Two buffers alternate: before the barrier
                    # that thread waits until the previous box's store has read its buffer, so
                    # the next box may overwrite that buffer after the barrier.
                    for a in T.unroll(atoms):
                        for q in T.unroll(box_chunks):
                            buf = T.meta_var(ring + (cw * EPI_BUFFERS + (a * box_chunks + q)
                                                     % EPI_BUFFERS) * (EPI_BOX_BYTES // 2))
                            for jj in T.unroll(EPI_COLS // 8):
                                for h in T.unroll(2):
                                    v = T.meta_var(a * half_n + (q * EPI_COLS // 8 + jj) * 4
                                                   + h * 2)
                                    T.ptx["st.shared.v2.f32"](
                                        T.address_of(Sm[buf + staging_offset(lt, jj, h) // 2]),
                                        acc[v], acc[v + 1])
                            T.ptx.fence.proxy.async_.shared__cta()
                            if lt == 0:
                                T.ptx["cp.async.bulk.wait_group.read"](0)
                            # named barrier 1 + cw, by immediate ids (a register id makes
                            # ptxas reserve all 16 barriers, one CTA per SM)
                            if NC == 1:  # noqa: SIM114 - a static test, then a TIR one
                                T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
                            elif cw == 0:
                                T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
                            else:
                                T.ptx["bar.sync"](T.uint32(2), T.uint32(128))
                            col0 = T.meta_var(tn * BN + q * EPI_COLS)
                            grow0 = T.meta_var(tm * BM + row0 + a * 64)
                            # a box wholly past a ragged edge stores nothing: skip it
                            if lt == 0 and (not pred_m or grow0 < M) and (not pred_n or col0 < N):
                                T.ptx[tma_st](T.address_of(C_map), col0, grow0,
                                              T.address_of(Sm[buf]))
                                T.ptx["cp.async.bulk.commit_group"]()
                else:
                    # past a ragged edge (pred_m, pred_n) a store is skipped (its accumulators
                    # hold the products of TMA's zero fill)
                    for a in T.unroll(atoms):
                        for jj in T.unroll(BN // 8):
                            row = T.meta_var(tm * BM + row0 + a * 64 + lt // 32 * 16
                                             + lt % 32 // 4)
                            col = T.meta_var(tn * BN + jj * 8 + lt % 4 * 2)
                            v = T.meta_var(a * half_n + jj * 4)
                            for h in T.unroll(2):  # rows row and row + 8
                                if (not pred_m or row + h * 8 < M) and (not pred_n or col < N):
                                    if vec_store:  # N even (v2_stores_need_even_n): col + 1 < N
                                        T.ptx["st.global.v2.f32"](
                                            T.address_of(C[row + h * 8, col]),
                                            acc[v + h * 2], acc[v + h * 2 + 1])
                                    else:
                                        C[row + h * 8, col] = acc[v + h * 2]
                                        if not pred_n1 or col + 1 < N:
                                            C[row + h * 8, col + 1] = acc[v + h * 2 + 1]
            if tma_store and lt == 0:
                # the last boxes' stores must finish before the CTA (and its shared memory) ends
                T.ptx["cp.async.bulk.wait_group"](0)
        if CS > 1:
            # no CTA of the cluster exits while its peer may still arrive on its barriers (the
            # peer consumers' last releases) or read what it multicast: every thread of both
            # CTAs meets here last (CUTLASS's producer "load tail", a wait for every stage's
            # last release, would do it too)
            T.cuda.cluster_sync()

    return TirxKernel(tvm.IRModule({"main": main}), (grid, 1, 1), (threads, 1, 1),
                      S * stage_bytes + epi_bytes, maps, (CS, 1, 1))
