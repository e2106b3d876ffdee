"""Space v3's arithmetic, free of TVM, shared by the spaces' models (``_hopper_matmul``,
``_hopper_conv``), the kernel generator (``_hopper_kernel``) and the tests' simulations: the
machine's figures, what the knobs' values mean, the tiles' walk, the tensor maps' descriptions
and the tma epilogue's staging layout."""

from __future__ import annotations

# an element's bytes, by type: the one table every size in the template's arithmetic comes
# from (stages, swizzles, descriptors, tensor maps, staging boxes)
from bocast.space.operators.operator import DTYPES as DTYPE_BYTES
from bocast.space.operators.operator import WorkloadError
from bocast.space.space import Constraint

#: SMs of the target when none is known (H100 SXM and H200; a replay or a static build on a
#: CPU): a workload names its GPU's own (``sm_count``, read from the device by a live run;
#: :class:`bocast.space.operators._matmul.MatmulSpec`), which sets the waves and the persistent grid
DEFAULT_SM_COUNT = 132


def target_sms(spec) -> int:
    """The SM count of the GPU a matmul ``spec`` (``_matmul.MatmulSpec``) targets: its
    ``sm_count``, else :data:`DEFAULT_SM_COUNT`."""
    return spec.sm_count or DEFAULT_SM_COUNT


def sm_count_entry(op: str, space: str, sm_count) -> dict[str, int]:
    """A workload's ``sm_count`` as the workload records it: checked (an integer from 1 to
    1024), and recorded only for space v3 and a count other than :data:`DEFAULT_SM_COUNT`, so
    every workload of before (all of 132 SMs) keeps its identity: stores, datasets and the
    records library name the same workload; v1 and v2 kernels do not depend on it. None: the
    default."""
    if sm_count is None:
        return {}
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or not 1 <= sm_count <= 1024:
        raise WorkloadError(f"{op}: sm_count must be an integer from 1 to 1024 (the GPU's "
                            f"SMs), got {sm_count!r}")
    return {"sm_count": sm_count} if space == "v3" and sm_count != DEFAULT_SM_COUNT else {}


#: space v3's split-K factors: the k blocks of a tile divided among this many CTAs, whose
#: partial sums add into the output (1: one CTA a tile, no reduction)
SPLIT_K = (1, 2, 4, 8)
#: space v3's TMA ring depths (k blocks of BK in flight). A skinny GEMM streams its weights
#: through small tiles whose stage is 10-16 KB (swap_ab's 64 x 16 at BK 64: 10 KB), so up to 16
#: fit the 227 KB; cuBLAS's kernels where ours lose (M 16-128 at N, K = 6144, 4096) keep 10-16
#: in flight (nvjet 64x16_64x16, 64x64_64x13, 96x64_64x10: experiments/results/
#: fresh_skinny_h200). shared_memory_le_227KB prunes the depths a tile cannot hold
STAGES = (2, 3, 4, 5, 6, 8, 10, 12, 16)
#: the depths before the deep ring, over which the v3 datasets, stores and exhaustive tables
#: were measured; the convolutions' spaces keep them (``_hopper_conv.knobs`` says why)
SHALLOW_STAGES = (2, 3, 4, 5, 6)
#: setmaxnreg pairs (producer, consumer); "off" leaves every thread at the launch's share
REG_SPLITS = {"off": None, "24/240": (24, 240), "40/232": (40, 232), "56/224": (56, 224)}
#: TMA swizzle mode (CUtensorMapSwizzle) and wgmma descriptor swizzle, by row bytes of a tile
SWIZZLE = {128: 3, 64: 2}
#: the "tma" epilogue's staging box: 64 rows of 128 bytes (the 128-byte swizzle's width: 32
#: fp32 or 64 16-bit columns, :func:`epi_cols`), two of them per consumer (one is written while
#: TMA stores the other)
EPI_ROWS, EPI_ROW_BYTES, EPI_BUFFERS = 64, 128, 2
EPI_BOX_BYTES = EPI_ROWS * EPI_ROW_BYTES
EPI_SMEM_PER_CONSUMER = EPI_BUFFERS * EPI_BOX_BYTES
#: wgmma's PTX name of each operand type the template implements. fp8 (e4m3, e5m2) takes no
#: transpose flags (PTX: only .f16/.bf16 may be MN-major): both operands K-major, which v3's
#: are (A [M, K], B [N, K]), so the 16-bit types' flags are 0 and fp8's are left out
WGMMA_TYPES = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3",
               "float8_e5m2": "e5m2"}
#: every wgmma reads 32 bytes of K a row, whatever the type: k16 for 16-bit types, k32 for fp8
WGMMA_K_BYTES = 32
#: a k block's row bytes the bk knob offers: 64 (64-byte swizzle) or 128 (128-byte); BK is
#: this over the element size (:func:`bk_choices`), the TMA box's inner extent
BK_ROW_BYTES = (64, 128)
#: columns of the tma epilogue's staging box for an fp32 output (:func:`epi_cols` of any type)
EPI_COLS = EPI_ROW_BYTES // DTYPE_BYTES["float32"]

#: thread-block clusters, as (block rows, block columns) of C a cluster's CTAs hold at once: 2x1
#: pairs two block rows of one block column (they share B's tile), 1x2 two block columns of one
#: block row (they share A's); launched as a 1-D cluster of 2 CTAs along the grid either way
CLUSTERS = {"1x1": (1, 1), "2x1": (2, 1), "1x2": (1, 2)}
#: the multicast's CTA mask: both CTAs of a 2-CTA cluster receive each half of the shared tile
CLUSTER_MASK = 0b11


def epi_cols(dtype: str) -> int:
    """Columns of the tma epilogue's staging box for an output of ``dtype``: a 128-byte row."""
    return EPI_ROW_BYTES // DTYPE_BYTES[dtype]


def wgmma_k(dtype: str) -> int:
    """K of one wgmma on operands of ``dtype`` (m64nNk16 for 16-bit types, k32 for fp8)."""
    return WGMMA_K_BYTES // DTYPE_BYTES[dtype]


def bk_choices(dtype: str) -> tuple[int, ...]:
    """The bk knob's values for operands of ``dtype``: (32, 64) for 16-bit types, (64, 128)
    for fp8 (DeepGEMM's block_k = 128 / element size at the 128-byte swizzle)."""
    return tuple(b // DTYPE_BYTES[dtype] for b in BK_ROW_BYTES)


def transpose_flags(dtype: str) -> tuple[int, ...]:
    """wgmma's trailing immediates after scale_a and scale_b: (trans_a, trans_b) = (0, 0) for
    16-bit operands (both K-major), none for fp8 (K-major only)."""
    return () if DTYPE_BYTES[dtype] == 1 else (0, 0)


def tensor_map(tensor: str, rows: int, cols: int, box_rows: int, box_cols: int,
               dtype: str = "float16") -> dict:
    """A row-major [rows, cols] tensor of ``dtype`` moved in [box_rows, box_cols] boxes (a box
    row of 128 or 64 bytes: that swizzle). The runner encodes it with the tensor's own dtype
    (the operator's), which ``dtype`` names."""
    size = DTYPE_BYTES[dtype]
    return {"tensor": tensor, "dtype": dtype, "dims": [cols, rows], "strides": [cols * size],
            "box": [box_cols, box_rows], "swizzle": SWIZZLE[box_cols * size]}


def encode_args(m: dict) -> list:
    """runtime.cuTensorMapEncodeTiled's arguments after the pointer: dims, byte strides, box,
    element strides (1), interleave (none), swizzle, L2 promotion (none), OOB fill (zeros)."""
    return [*m["dims"], *m["strides"], *m["box"], *([1] * len(m["dims"])), 0, m["swizzle"], 0, 0]


def tile_coords(t, *, M: int, N: int, BM: int, BN: int, G: int,
                cluster: tuple[int, int] = (1, 1), rank=0, major: str = "m"):
    """Tile ``t`` of a CTA's walk (a TIR expression in the kernel, an int in tests): (A's and
    C's block row over the [b x M] rows, C's block column, B's first row over the [b x N] rows).
    Batch element outermost; inside it grouped order (neighbouring CTAs share operands in L2):
    ``major`` "m", ``G`` block rows a group, column by column within it (Triton's GROUP_M);
    "n", ``G`` block columns a group, row by row within it (the same walk of C transposed).

    With a cluster of (rows, columns) tiles (:data:`CLUSTERS`), ``t`` counts the cluster's
    tiles, blocks of rows x columns tiles, in the same order (``G`` block rows a group, at least
    one cluster row: max(1, G // rows) cluster rows; "n": columns likewise), and the CTA of
    cluster rank ``rank`` takes tile (rank % rows, rank // rows) of the block: both CTAs of a
    cluster walk the same blocks, so their tiles pair up at every step
    (cluster_pairs_whole_tiles: the blocks tile C exactly). (1, 1): the walk of one CTA, tile
    by tile."""
    cm, cn = cluster
    tiles_m, tiles_n = -(-M // BM), -(-N // BN)  # ceil: the last row/column may be partial
    ctm, ctn = tiles_m // cm, tiles_n // cn  # cluster rows, columns
    b, r = t // (ctm * ctn), t % (ctm * ctn)
    if major == "n":  # the walk of C transposed: groups of cluster columns, row by row
        pn, pm = _grouped(r, max(1, G // cn), ctm)
    else:
        pm, pn = _grouped(r, max(1, G // cm), ctn)
    tm = pm * cm + (rank % cm if cm > 1 else 0)
    tn = pn * cn + (rank // cm if cn > 1 else 0)
    return b * tiles_m + tm, tn, b * N + tn * BN


def split_unit(u, blocks: int, splits: int, slice_inner: bool = False):
    """Work unit ``u`` of a split-K walk (``splits`` k slices of ``blocks`` tile blocks each,
    the k slice outermost): (its tile block in :func:`tile_coords`' walk, its k slice). Slice
    ``ks`` of a tile's ``KT`` k blocks is blocks ks x KT / splits .. (ks + 1) x KT / splits - 1
    (``split_k_divides_k_blocks``). One split: the tile walk itself, no remainder taken (the
    kernel of before split-K, unchanged). ``slice_inner`` (split_reduce "cluster"): the k slice
    innermost, so the ``splits`` consecutive CTAs of a cluster hold one tile's slices."""
    if splits == 1:
        return u, 0
    if slice_inner:
        return u // splits, u % splits
    return u % blocks, u // blocks


def _grouped(r, group: int, across: int):
    """Step ``r`` of a walk over groups of ``group`` lines (cluster rows, or columns), each
    group walked position by position across its ``across`` positions, the group's lines in
    turn at each: (line, position)."""
    return r // (group * across) * group + r % (group * across) % group, \
        r % (group * across) // group


def staging_offset(lt, jj, h, size: int = 4):
    """Byte offset, in a staging box of the tma epilogue, of consumer thread ``lt``'s pair of
    accumulators (jj, h): row lt/32*16 + lt%32/4 + 8 h, columns 8 jj + 2 (lt % 4) (+1) of the
    box, at the address TMA's 128-byte swizzle gives them (16-byte chunk c of row r at chunk
    c ^ (r % 8); the box's rows are 128 bytes), the output's elements being ``size`` bytes
    (the pair: 8 bytes of fp32, 4 of a 16-bit type). A TIR expression in the kernel, an int in
    tests.

    Bank conflicts: a half-warp's 8-byte stores (4 rows x 4 column pairs) land on 4 distinct
    16-byte chunks of the 8 a conflict-free store would use, so each store takes 2 shared-memory
    wavefronts per half-warp instead of 1 (a padded box would avoid it, but TMA reads the box
    unpadded; without a swizzle the 4 rows would share one chunk: 4-way)."""
    r = lt // 32 * 16 + lt % 32 // 4 + h * 8
    col_bytes = (jj * 8 + lt % 4 * 2) * size  # the pair's first byte in its unswizzled row
    return r * EPI_ROW_BYTES + ((col_bytes // 16) ^ (r % 8)) * 16 + col_bytes % 16


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
                   f"the grid ({target_sms(spec)} persistent CTAs (the target's SMs) or one a "
                   "tile, at most the tiles) is "
                   "whole clusters: the cluster size divides it",
                   lambda c: c["grid"] % c["cluster_size"] == 0),
    ]


#: CUDA's conversion of two floats to a packed pair of each 16-bit output type (round to
#: nearest even), and the pair's type
_PAIRS = {"bfloat16": ("__floats2bfloat162_rn", "__nv_bfloat162"),
          "float16": ("__floats2half2_rn", "__half2")}


def store_pair(dtype: str, space: str):
    """A function of (address, x, y) storing two fp32 accumulators, rounded to the 16-bit
    ``dtype``, as one 4-byte store to ``space`` ("global" or "shared"): a TIR call of a small
    CUDA helper (the PTX table of TVM 0.27 offers the fp32 pair's st.v2.f32, not the rounding
    of two floats into one register). None for an fp32 ``dtype``."""
    if dtype not in _PAIRS:
        return None
    from tvm.script import tirx as T

    convert, pair = _PAIRS[dtype]
    name = f"bocast_st_{space}_{pair.strip('_')}"
    # a shared store through its 32-bit shared address (st.shared), a global one through the
    # pointer (a generic store that ptxas makes st.global)
    if space == "shared":
        body = (f"  {pair} v = {convert}(x, y);\n"
                "  asm volatile(\"st.shared.b32 [%0], %1;\" :: "
                "\"r\"((unsigned)__cvta_generic_to_shared(p)), "
                "\"r\"(*reinterpret_cast<unsigned*>(&v)) : \"memory\");\n")
    else:
        body = f"  *reinterpret_cast<{pair}*>(p) = {convert}(x, y);\n"
    source = (f"__forceinline__ __device__ void {name}(void* p, float x, float y) {{\n"
              f"{body}}}\n")

    def call(address, x, y):
        return T.cuda.func_call(name, address, x, y, source_code=source)

    return call


def scalar_pair(dtype: str):
    """A function of (address, address2, x, y, second) storing two fp32 accumulators rounded
    to the 16-bit ``dtype`` one element (2 bytes) at a time, x at ``address`` and, where
    ``second`` holds, y at ``address2``: the scalar epilogue's stores. The pair is rounded by
    one packed conversion (``cvt.rn.bf16x2.f32``, as :func:`store_pair`'s), not element by
    element: ptxas (nvcc 13.0) fuses two scalar conversions of accumulators into one packed
    ``F2FP`` and, in some kernels, schedules the fused instruction above the final
    ``wgmma.wait_group``'s ``WARPGROUP.DEPBAR`` (the last k block's products lost, bf16
    ``wrong_result``: ``bocast.measure.sass`` finds it); the packed conversion it is given is
    ordered as written. None for an fp32 ``dtype``."""
    if dtype not in _PAIRS:
        return None
    from tvm.script import tirx as T

    convert, pair = _PAIRS[dtype]
    name = f"bocast_st_scalar_{pair.strip('_')}"
    half = pair[:-1]  # the pair's element type: __nv_bfloat16, __half
    source = (f"__forceinline__ __device__ void {name}(void* p, void* q, float x, float y, "
              f"int second) {{\n"
              f"  {pair} v = {convert}(x, y);\n"
              f"  *reinterpret_cast<{half}*>(p) = v.x;\n"
              f"  if (second) *reinterpret_cast<{half}*>(q) = v.y;\n"
              f"}}\n")

    def call(address, address2, x, y, second):
        return T.cuda.func_call(name, address, address2, x, y, T.Cast("int32", second),
                                source_code=source)

    return call
