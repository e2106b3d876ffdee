"""What one configuration of space v3 fixes about its kernel (:class:`Plan`), the hooks an
operator gives the kernel body (:class:`Operands`) and the built kernel with its launch
(:class:`TirxKernel`); :mod:`._hopper_kernel` writes the body from them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._hopper_layout import (
    CLUSTERS,
    DEFAULT_SM_COUNT,
    EPI_SMEM_PER_CONSUMER,
    REG_SPLITS,
    epi_cols,
    split_unit,
    tile_coords,
    wgmma_k,
)
from ._hopper_layout import DTYPE_BYTES as SIZE


def select(cond, a, b):
    """``a`` where ``cond`` else ``b``: a TIR Select in the kernel, Python's choice on ints (the
    tests walk a Plan with ints)."""
    if isinstance(cond, bool):
        return a if cond else b
    from tvm.script import tirx as T

    return T.Select(cond, a, b)


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
    #: output tensors the launch sets to zero before the kernel runs (split-K: the k slices'
    #: partial sums add into them); the runner's zeroing is part of each timed launch
    zeroed: tuple[str, ...] = ()


class Plan:
    """What one configuration fixes about the kernel of an M x N x K matmul (``batch`` of them,
    read as one [b x M, K] A and one [b x N, K] B): tile, ring of stages, the consumers' rows,
    the tiles' walk and the launch. M, N and K may be ragged: tiles and k blocks are counted by
    ceil-division (TMA zero-fills its boxes past an edge; the operator's stores test theirs).

    Split K (``split_k`` > 1, a GEMM's knob; 1 for a configuration without it): the walk is of
    units, (k slice, tile), the k slice outermost (:func:`split_unit`); a unit runs ``KB`` =
    KT / splits k blocks of its tile and its epilogue adds its partial sums into the output.
    ``sm_count``: the target's SMs, the persistent grid's size."""

    def __init__(self, config, M: int, N: int, K: int, batch: int = 1, *,
                 in_dtype: str = "float16", out_dtype: str = "float32",
                 b_dtype: str | None = None, sm_count: int = DEFAULT_SM_COUNT,
                 fuse: Any = None, scale_block: int = 0):
        c = config
        #: the operands' and the output's element types (the accumulators are fp32 whatever
        #: they are: wgmma has no other accumulator for bf16, and a 16-bit output is rounded
        #: once, at the store, as cuBLAS does); their sizes set every byte count below
        self.in_dtype, self.out_dtype = in_dtype, out_dtype
        # B's type where it is not A's (fp8 e5m2 x e4m3: the same size, so every size below
        # is A's; only the wgmma's type and B's tensor map differ)
        self.b_dtype = b_dtype or in_dtype
        assert SIZE[self.b_dtype] == SIZE[in_dtype], (in_dtype, b_dtype)
        self.in_size, self.out_size = SIZE[in_dtype], SIZE[out_dtype]
        self.wgmma_k = wgmma_k(in_dtype)
        #: fp8 block scales (``scale_block`` 128: ``_hopper_blockscale``): each k block's
        #: products scaled and added into a second set of accumulators
        self.block_scaled = scale_block > 0
        #: per-tensor scales (fp8 operands without block scales): the kernel takes two fp32
        #: scalars and multiplies its accumulators by their product before the output's rounding
        self.scaled = SIZE[in_dtype] == 1 and not self.block_scaled
        #: the workload's fused epilogue (``_fuse.Fuse``: bias, activation) or None
        self.fuse = fuse
        self.epi_cols = epi_cols(out_dtype)
        self.BM, self.BN, self.BK, self.S, self.NC = (
            int(c[k]) for k in ("bm", "bn", "bk", "stages", "consumers"))
        BM, BN, BK, S, NC = self.BM, self.BN, self.BK, self.S, self.NC
        self.G, self.inflight = int(c["raster"]), int(c["inflight"])
        assert not self.block_scaled or (scale_block == BK and self.inflight == 0
                                         and fuse is None), "bk 128, inflight 0, no fuse"
        self.major = c.get("raster_major", "m")  # a configuration from before the knob: "m"
        self.split = REG_SPLITS[c["regs"]]
        self.pingpong = c["arrangement"] == "pingpong"
        self.WM = BM if self.pingpong else BM // NC  # rows of a tile one consumer computes
        self.atoms = self.WM // 64
        self.step = NC if self.pingpong else 1  # tiles between two of one consumer's
        self.vec_store, self.tma_store = c["epilogue"] == "v2", c["epilogue"] == "tma"
        # a configuration from before the cluster knob: 1x1
        self.CM, self.CN = CLUSTERS[c.get("cluster", "1x1")]
        self.CS = self.CM * self.CN  # CTAs a cluster
        self.M, self.N, self.K, self.batch = M, N, K, batch
        self.tiles_m, self.tiles_n, self.KT = -(-M // BM), -(-N // BN), -(-K // BK)
        self.tiles = batch * self.tiles_m * self.tiles_n
        self.splits = int(c.get("split_k", 1))
        assert self.KT % self.splits == 0, "split_k_divides_k_blocks"
        self.KB = self.KT // self.splits  # k blocks a unit runs
        self.units = self.tiles * self.splits  # (k slice, tile) pairs: the walk's work
        self.grid = min(sm_count, self.units) if c["persistent"] == "on" else self.units
        #: tail_split (``_hopper_tail``): the tiles of the persistent walk's last round, a
        #: partial one, split into ``tail`` k slices of ``KBt`` k blocks each; the first ``dp``
        #: units are whole tiles (``rounds`` a CTA), every later one such a slice
        self.tail = int(c.get("tail_split", 1))
        self.dp, self.rounds, self.KBt = self.units, 0, self.KB
        if self.tail > 1:
            assert self.splits == 1 and c["persistent"] == "on" and self.tiles > self.grid \
                and self.KT % self.tail == 0, "tail_split's constraints (_hopper_tail)"
            self.dp = self.tiles - self.tiles % self.grid
            self.rounds, self.KBt = self.dp // self.grid, self.KT // self.tail
            self.units = self.dp + (self.tiles - self.dp) * self.tail
        #: split_reduce "cluster" (``_hopper_cluster_split``): a tile's k slices are the CTAs
        #: of one cluster, one unit a CTA, reduced through distributed shared memory; else
        #: ("atomic", or no split) each unit adds its partial sums into the zeroed output
        self.cluster_reduce = self.splits > 1 and c.get("split_reduce", "atomic") == "cluster"
        assert not self.cluster_reduce or (c["persistent"] == "off" and c.get(
            "cluster", "1x1") == "1x1"), "split_reduce_cluster_one_unit_a_cta, _no_multicast"
        assert self.tiles % self.CS == 0 and self.grid % self.CS == 0, \
            "cluster_pairs_whole_tiles, cluster_divides_grid"
        self.clusters = self.grid // self.CS  # the walk's stride, in blocks of CS tiles
        self.threads = 128 * (NC + 1)
        self.half_n = BN // 2  # accumulators of one m64 atom per thread
        self.stage_bytes = (BM + BN) * BK * self.in_size
        # elements (of the operands' type) of the ring; the tma epilogue's boxes follow it
        self.ring = S * (BM + BN) * BK
        self.epi_bytes = NC * EPI_SMEM_PER_CONSUMER if self.tma_store else 0
        # the shared operand's box is half its tile: each CTA of a cluster loads (and
        # multicasts) its half, rows rank x half
        self.a_box, self.b_box = BM // self.CN, BN // self.CM
        #: the CTAs of a launch's cluster: the multicast pair's, or a tile's k slices'
        self.launch_cluster = self.splits if self.cluster_reduce else self.CS
        #: bytes of the one dynamic allocation: the ring and the tma epilogue's boxes, or
        #: the cluster mode's fp32 staging tile over them where it is larger (``staging``)
        self.staging = 0
        self.dynamic_smem = S * self.stage_bytes + self.epi_bytes

    def stage_in_cluster(self, staging_bytes: int) -> None:
        """The cluster mode's staging tile (bytes, C's tile in fp32 with its row padding):
        the dynamic allocation grows to hold it where the ring is smaller."""
        assert self.cluster_reduce
        self.staging = staging_bytes
        self.dynamic_smem = max(self.dynamic_smem, staging_bytes)

    def tile(self, t, rank):
        """(A/C block row, C block column, B's first row) of unit ``t`` of a CTA's walk."""
        block, _ = split_unit(t, self.tiles // self.CS, self.splits, self.cluster_reduce)
        if self.tail > 1:  # a last-round slice: its tile follows the whole ones
            block = select(t < self.dp, t, self.dp + (t - self.dp) // self.tail)
        return tile_coords(block, M=self.M, N=self.N, BM=self.BM, BN=self.BN, G=self.G,
                           cluster=(self.CM, self.CN), rank=rank, major=self.major)

    def k0(self, t):
        """The first k block of unit ``t`` (0 without split K)."""
        if self.tail > 1:
            return select(t < self.dp, 0, (t - self.dp) % self.tail * self.KBt)
        return split_unit(t, self.tiles // self.CS, self.splits, self.cluster_reduce)[1] * self.KB

    def unit_k(self, t):
        """The k blocks unit ``t`` runs."""
        return self.KB if self.tail == 1 else select(t < self.dp, self.KB, self.KBt)

    def it0(self, i):
        """The k blocks of a CTA's walk before its ``i``-th unit (the ring's count of them)."""
        if self.tail == 1:
            return i * self.KB
        return select(i < self.rounds, i * self.KB,
                      self.rounds * self.KB + (i - self.rounds) * self.KBt)

    def kernel(self, main, tensor_maps: dict, zeroed: tuple[str, ...] = ()) -> TirxKernel:
        """The v3 kernel of prim_func ``main`` (the operator's, around the body), launched so
        (``zeroed``: :attr:`TirxKernel.zeroed`)."""
        import tvm

        return TirxKernel(tvm.IRModule({"main": main}), (self.grid, 1, 1), (self.threads, 1, 1),
                          self.dynamic_smem, tensor_maps, (self.launch_cluster, 1, 1), zeroed)


@dataclass
class Operands:
    """An operator's hooks into :func:`device_body`: functions of TIR expressions, or TIRx
    macros, that its ``kernel`` makes over its :class:`Plan`."""

    #: (kb, tm) -> TMA coordinates, innermost first, of A's box for k block kb of block row tm
    #: (with a 1x2 cluster the outermost one is A's row: the body adds this CTA's half)
    a_coords: Callable
    #: the rank of A's tensor map (the TMA load's dimensionality)
    a_rank: int
    #: macro (out_map, smem, tm, row0, a, col0, lt): the tma epilogue's store of the box staged
    #: at ``smem`` (atom a of the consumer's rows from row0 of block row tm, 32 columns from
    #: col0) by thread lt == 0, unless the box lies wholly past the output's edge
    store_box: Callable
    #: macro (out, acc, tm, tn, row0, lt): the direct epilogues (v2, scalar): consumer thread
    #: lt's accumulators of its rows from row0 of tile (tm, tn) to ``out``, none past an edge
    store_rows: Callable
    #: kb -> the im2col offsets (u16 TIR expressions, W first) of A's load for k block kb, when
    #: A's map is an im2col map (conv2d's ``a_load: im2col``); None: a tiled map
    a_offsets: Callable | None = None
    #: (kb, tm, bn0) -> TMA coordinates, innermost first, of B's box for k block kb of block
    #: row tm and B's first row bn0 (conv2d_transpose: a phase's tap in W's 4-D map); None:
    #: B is a 2-D [rows, K] map, box at (kb x BK, bn0)
    b_coords: Callable | None = None
    #: the rank of B's tensor map
    b_rank: int = 2
    #: tm -> how many k blocks of block row tm compute (a TIR expression, at least 1): the
    #: first ones; the rest are skipped, the producer loads nothing and completes their stages
    #: empty, the consumers issue no wgmma (conv2d_transpose: a phase's own taps). None: all
    k_count: Callable | None = None
    #: split_reduce "cluster" (``_hopper_cluster_split.cluster_reduce``): the macros (stage,
    #: reduce, meet) that replace the output stores; None: the stores (or the atomic adds)
    split_cluster: tuple[Callable, Callable, Callable] | None = None
    #: tail_split (``_hopper_tail.Tail``): the last round's k slices' zeroing, waits and adds;
    #: None: every unit stores with the hooks above
    tail: Any = None
