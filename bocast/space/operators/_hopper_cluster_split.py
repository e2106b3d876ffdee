"""Split K reduced inside a thread-block cluster through distributed shared memory (space v3's
GEMM, ``split_reduce`` "cluster": ``_hopper_split``), the alternative to adding the k slices'
fp32 partial sums into a zeroed output with atomics.

The ``split_k`` = S k slices of one tile are the S CTAs of one cluster (a 1-D cluster of the
grid, one unit a CTA: the k slice is the unit's innermost index, so CTA rank r of the cluster
runs slice r: ``_hopper_layout.split_unit``). After its main loop every CTA stages its fp32
partial tile in its own shared memory, over the ring (every stage is consumed by then; two
cooperative consumers meet at a named barrier first, so no wgmma of the other one still reads
it; ping-pong's consumer 0 computes a CTA's one tile alone), in the place of the epilogue's
stores, in C's frame: a [BM, BN + pad] row-major tile of C (swapped: the kernel's tile
transposed), padded so the fragment stores are free of bank conflicts (:func:`row_pad`). A
cluster barrier (arrive.release / wait.acquire) makes every CTA's staging visible to its peers;
then a reduce-scatter: CTA r sums rows [r BM / S, (r + 1) BM / S) of C's tile from every CTA's
staging (``mapa`` + ``ld.shared::cluster.v4.f32``, 4 columns a thread, peers in rank order
0..S-1: deterministic, the same sum every launch), applies a fused epilogue to the sum (bias and
activation, ``_fuse``; unswapped only, as everywhere), rounds to the output's type and stores
with plain global stores (16 bytes of fp32, or two 4-byte pairs of a 16-bit type, when N % 4 ==
0; else element by element). A last cluster barrier keeps every CTA (and its shared memory,
which its peers read) alive until all have read. No zeroed output, no atomics: an fp16 or bf16
output works as an fp32 one does.

The index maps here are plain integer arithmetic (numpy-checkable in the tests) and TIR
expressions in the kernel: :func:`staging_index` (a consumer thread's accumulator -> its
staging element) and :func:`reduce_chunk` (a reducing thread's 4-column chunk -> C's tile row
and column)."""

from __future__ import annotations

from ._fuse import activation
from ._hopper_layout import store_pair

#: CTAs of a portable cluster: split_k in cluster mode is at most this
PORTABLE_CLUSTER = 8
#: the fp32 columns a reducing thread sums and stores at once (one ld.shared::cluster.v4.f32)
CHUNK = 4
#: named barrier of the consumers before they overwrite the ring with their staging (ids 1
#: and 2 are the tma epilogue's, which the cluster mode does not use)
RING_FREE_BARRIER = 3


def row_pad(swap: bool) -> int:
    """fp32 elements after each staging row (of BN columns, a multiple of 64). Unswapped, a
    half-warp's 8-byte fragment stores (4 rows x 4 column pairs) land 8 banks apart a row:
    conflict-free with 8; swapped, a warp's scalar stores (8 kernel rows = 8 consecutive
    staging columns, 4 column pairs = staging rows 2 apart) need rows 4 banks apart: 4."""
    return 4 if swap else 8


def staging_bytes(bm, bn, swap):
    """Bytes of the fp32 staging tile of C's (bm x bn) tile (ints or numpy arrays)."""
    return bm * (bn + (swap * 4 + (1 - swap) * 8)) * 4


def staging_index(lt, a, jj, h, e, *, row0: int, stride: int, swap: bool):
    """The staging element (fp32 index) of consumer thread ``lt``'s accumulator of atom ``a``,
    column group ``jj``, row half ``h``, pair element ``e``: wgmma's m64nNk16 fragment has
    kernel row row0 + 64 a + lt/32*16 + lt%32/4 + 8 h, kernel column 8 jj + 2 (lt % 4) + e;
    C's tile is the kernel's (row, column), or swapped its (column, row)."""
    r = row0 + a * 64 + lt // 32 * 16 + lt % 32 // 4 + h * 8
    q = jj * 8 + lt % 4 * 2 + e
    return q * stride + r if swap else r * stride + q


def reduce_chunk(rank, c, *, bm: int, bn: int, splits: int):
    """Chunk ``c`` of cluster rank ``rank``'s share of C's (bm x bn) tile: (row, column) of its
    first element; rank r's rows are r bm / S .. (r + 1) bm / S - 1, its chunks row by row,
    CHUNK columns each (consecutive threads: consecutive columns, coalesced stores)."""
    per_row = bn // CHUNK
    return rank * (bm // splits) + c // per_row, c % per_row * CHUNK


def chunks(bm: int, bn: int, splits: int) -> int:
    """The chunks one CTA reduces: its bm / S rows of bn / CHUNK chunks."""
    return bm // splits * (bn // CHUNK)


def cluster_reduce(p, *, swap: bool, rows: int, cols: int, out_dtype: str):
    """The cluster mode's two macros over Plan ``p`` (the kernel's, swapped or not): ``stage
    (Sm, acc, row0, cw, lt)``, a consumer's accumulators into its CTA's staging, and ``reduce
    (Sm, out, cta, tx)``, every thread of the CTA: the cluster barrier, the reduce-scatter of
    this CTA's rows into ``out`` (C, [rows, cols] row-major: the GEMM's [b x M, N]) and the
    last cluster barrier. ``rows``, ``cols``: C's extents, whose ragged edges the stores test."""
    from tvm.script import tirx as T

    S, NC, atoms, half_n = p.splits, p.NC, p.atoms, p.half_n
    bm, bn = (p.BN, p.BM) if swap else (p.BM, p.BN)  # C's tile
    stride = bn + row_pad(swap)
    n_chunks, consumers = chunks(bm, bn, S), 128 * NC
    steps = -(-n_chunks // consumers)
    pred_c = n_chunks % consumers != 0
    pred_r, vec = rows % bm != 0, cols % CHUNK == 0  # vec: a chunk is inside C's row or past
    pair = store_pair(out_dtype, "global")  # None: fp32
    fuse = p.fuse  # bias and activation, on the sum (swap_ab_without_fuse: unswapped)
    assert fuse is None or not swap, "swap_ab_without_fuse"
    act = activation(fuse.act if fuse is not None else "none")
    ragged_n = cols % bn != 0
    # cooperative consumers share the tile: the ring is free once both are done with it (one
    # may still read a stage the other has released); ping-pong with one unit a CTA: consumer 0
    # computes the tile alone, consumer 1 takes no tile (and meets no barrier here)
    shared_ring = NC > 1 and not p.pingpong

    @T.macro
    def stage(Sm, acc, row0, lt):
        T.ptx.fence.proxy.async_.shared__cta()  # the ring's async-proxy reads before our writes
        if shared_ring:
            T.ptx["bar.sync"](T.uint32(RING_FREE_BARRIER), T.uint32(consumers))
        # the thread's first element's shared address, once; every store at a constant past it
        base = T.meta_var(T.cuda.cvta_generic_to_shared(T.address_of(Sm[0])) + T.uint32(
            staging_index(lt, 0, 0, 0, 0, row0=row0, stride=stride, swap=swap) * 4))
        for a in T.unroll(atoms):
            for jj in T.unroll(p.BN // 8):  # the kernel's columns
                for h in T.unroll(2):
                    v = T.meta_var(a * half_n + jj * 4 + h * 2)
                    off = T.meta_var(staging_index(0, a, jj, h, 0, row0=0, stride=stride,
                                                   swap=swap) * 4)
                    if swap:  # the pair lies along C's column: two scalar stores
                        T.ptx["st.shared.f32"](base + T.uint32(off), acc[v])
                        T.ptx["st.shared.f32"](base + T.uint32(off + stride * 4), acc[v + 1])
                    else:
                        T.ptx["st.shared.v2.f32"](base + T.uint32(off), acc[v], acc[v + 1])

    @T.macro
    def meet():
        # twice: after the staging (release: our writes, acquire: the peers'), and before
        # the CTA leaves (no peer reads its shared memory any more)
        for _ in T.unroll(2):
            T.ptx.barrier.cluster.arrive.release.aligned()
            T.ptx.barrier.cluster.wait.acquire.aligned()

    @T.macro
    def reduce(Sm, out, bias, cta, t):  # consumer thread t (0 .. 128 NC - 1)
        T.ptx.barrier.cluster.arrive.release.aligned()
        T.ptx.barrier.cluster.wait.acquire.aligned()
        rank = T.meta_var(cta % S)
        tm = T.meta_var(p.tile(cta, 0)[1] if swap else p.tile(cta, 0)[0])  # C's block
        tn = T.meta_var(p.tile(cta, 0)[0] if swap else p.tile(cta, 0)[1])
        peer = T.alloc_buffer((S,), "uint32", scope="local")
        x = T.alloc_buffer((S * CHUNK,), "float32", scope="local")
        y = T.alloc_buffer((CHUNK,), "float32", scope="local")
        off = T.alloc_buffer((1,), "int32", scope="local")
        for r in T.unroll(S):
            T.ptx.mapa.shared__cluster.u32(
                peer[r], T.cuda.cvta_generic_to_shared(T.address_of(Sm[0])), T.uint32(r))
        for it in T.serial(steps):  # rolled: an unrolled one spills at 128 x 256
            c = T.meta_var(it * consumers + t)
            if not pred_c or c < n_chunks:
                row = T.meta_var(reduce_chunk(rank, c, bm=bm, bn=bn, splits=S)[0])
                col = T.meta_var(reduce_chunk(rank, c, bm=bm, bn=bn, splits=S)[1])
                # the chunk's byte offset, an int32 first (a uint32 expression of tx - 128
                # simplifies into a negative uint32 constant, which TVM refuses)
                off[0] = (row * stride + col) * 4
                # every peer's chunk loaded before any sum (their latencies overlap)
                for r in T.unroll(S):
                    T.ptx["ld.shared::cluster.v4.f32"](
                        x[r * CHUNK], x[r * CHUNK + 1], x[r * CHUNK + 2], x[r * CHUNK + 3],
                        peer[r] + T.cast(off[0], "uint32"))
                grow = T.meta_var(tm * bm + row)
                gcol = T.meta_var(tn * bn + col)
                for e in T.unroll(CHUNK):
                    y[e] = x[e]
                    for r in T.unroll(1, S):  # rank order: the same sum every launch
                        y[e] = y[e] + x[r * CHUNK + e]
                    if fuse is not None:  # the fused epilogue on the whole sum, in fp32
                        # past a ragged N the last column's bias (never stored), as tile_macro
                        bcol = T.meta_var(T.min(gcol + e, cols - 1) if ragged_n else gcol + e)
                        y[e] = act(y[e] + T.cast(bias[bcol], "float32") if fuse.bias else y[e])
                if not pred_r or grow < rows:
                    if vec and gcol < cols:
                        if pair is None:
                            T.ptx["st.global.v4.f32"](T.address_of(out[grow, gcol]),
                                                      y[0], y[1], y[2], y[3])
                        else:
                            pair(T.address_of(out[grow, gcol]), y[0], y[1])
                            pair(T.address_of(out[grow, gcol + 2]), y[2], y[3])
                    elif not vec:
                        for e in T.unroll(CHUNK):
                            if gcol + e < cols:
                                out[grow, gcol + e] = T.cast(y[e], out_dtype)
        # no CTA leaves (its shared memory with it) while a peer may still read its staging
        T.ptx.barrier.cluster.arrive.release.aligned()
        T.ptx.barrier.cluster.wait.acquire.aligned()

    return stage, reduce, meet
