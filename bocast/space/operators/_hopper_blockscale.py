"""fp8 block scales in space v3's consumers (DeepSeek-V3's recipe, DeepGEMM's "promotion"): A
[M, K] with one fp32 scale a row per 128 of K (scale_a [M, ceil(K / 128)]), B [N, K] with one
per 128 x 128 block (scale_b [ceil(N / 128), ceil(K / 128)]), both row-major.

The k block is the scale block (BK = 128, ``Plan.block_scaled``). Each k block's wgmmas run
into a fresh register tile (``part``: scale_d 0 on its first k32 step); after the wait for
them, the consumer thread adds ``part`` x scale_a[row, kb] x scale_b[col / 128, kb] into the
tile's accumulators (``acc``, zeroed when the tile starts), on the CUDA cores in fp32. That is
the block scales, and it bounds the sum wgmma's fp8 accumulator keeps to 128 products (its
limited precision over a long K is what the per-tensor kernel and cuBLASLt's fast accumulation
accept). Two accumulator sets: the space's ``block_scales_fit_registers``.

Scales come straight from global memory (L1/L2: a tile's rows read the same few lines every k
block), loaded after the k block's wgmmas are issued and before the wait, so their latency hides
behind the Tensor Cores: per thread and k block, 2 x atoms of scale_a (its two fragment rows of
each m64 atom) and up to two of scale_b. A tile's columns start at tn x BN, a multiple of 64: a
128-column scale block holds either all of an 8-column fragment group or none, so each group
needs one scale_b value, and a tile of BN <= 256 columns meets at most two blocks (the first,
nb0 = tn x BN // 128, and the next). When BN is a multiple of 128 the group's block is static;
else (BN 64, 192) the tile starts 0 or 64 columns into its first block, and a select on that
picks between two static choices. Rows past a ragged M read row M - 1's scale and a block past
a ragged N the last block's (their values are never stored); K's last block is ragged like
the operands' (TMA zero-fills A and B there).

The index maps are plain functions of integers or TIR expressions (the tests check them against
numpy's dequantization)."""

from __future__ import annotations

#: the scale blocks' extent along K (and B's along N): DeepSeek-V3's and DeepGEMM's 128
SCALE_BLOCK = 128


def scale_shapes(M: int, N: int, K: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(scale_a's shape, scale_b's shape) of an M x N x K block-scaled GEMM."""
    kb = -(-K // SCALE_BLOCK)
    return (M, kb), (-(-N // SCALE_BLOCK), kb)


def fragment_row(lt, a, h):
    """Row, within a consumer's rows, of consumer thread ``lt``'s accumulators of m64 atom ``a``,
    half ``h`` (wgmma's f32 fragment: rows lt / 32 x 16 + lt % 32 / 4, and 8 below)."""
    return a * 64 + lt // 32 * 16 + lt % 32 // 4 + h * 8


def b_blocks(BN: int) -> int:
    """The most 128-column scale blocks a tile of BN columns meets (its start a multiple of 64)."""
    offsets = (0,) if BN % SCALE_BLOCK == 0 else (0, 64)
    return max((off + BN - 1) // SCALE_BLOCK + 1 for off in offsets)


def group_block(BN: int, jj: int, offset: int) -> int:
    """The scale block, counted from the tile's first (nb0), of the tile's 8-column fragment group
    ``jj`` when the tile starts ``offset`` (0 or 64) columns into block nb0."""
    assert offset in (0, 64) and (offset == 0 or BN % SCALE_BLOCK)
    return (offset + 8 * jj) // SCALE_BLOCK


def promotion(p):
    """The macros of a block-scaled plan ``p`` (``_hopper_plan.Plan``): (zero, load, promote).

    zero(acc): the tile's accumulators to 0. load(sv, scale_a, scale_b, tm, tn, kb, row0, lt):
    thread lt's scales of k block kb (global index) into the local buffer ``sv`` of
    :func:`scales_len` values. promote(acc, part, sv, tn): acc += part x the scales."""
    from tvm.script import tirx as T

    BM, BN, M, atoms, half_n = p.BM, p.BN, p.M, p.atoms, p.half_n
    nq, last_b = b_blocks(BN), -(-p.N // SCALE_BLOCK) - 1
    ragged_m, shifts = p.M % BM != 0, BN % SCALE_BLOCK != 0

    @T.macro
    def zero(acc):
        for v in T.unroll(atoms * half_n):
            acc[v] = T.float32(0)

    @T.macro
    def load(sv, scale_a, scale_b, tm, tn, kb, row0, lt):
        for a in T.unroll(atoms):
            for h in T.unroll(2):
                row = T.meta_var(tm * BM + row0 + fragment_row(lt, a, h))
                sv[a * 2 + h] = scale_a[T.min(row, M - 1) if ragged_m else row, kb]
        for q in T.unroll(nq):
            sv[atoms * 2 + q] = scale_b[T.min(tn * BN // SCALE_BLOCK + q, last_b), kb]

    @T.macro
    def promote(acc, part, sv, tn):
        # the tile's offset into its first scale block (0 unless BN is 64 or 192)
        shifted = T.meta_var(tn * BN % SCALE_BLOCK != 0)
        for a in T.unroll(atoms):
            for h in T.unroll(2):
                for jj in T.unroll(BN // 8):
                    sb = T.meta_var(sv[atoms * 2 + group_block(BN, jj, 0)] if not shifts else
                                    T.if_then_else(shifted,
                                                   sv[atoms * 2 + group_block(BN, jj, 64)],
                                                   sv[atoms * 2 + group_block(BN, jj, 0)]))
                    for e in T.unroll(2):
                        v = T.meta_var(a * half_n + jj * 4 + h * 2 + e)
                        acc[v] = acc[v] + part[v] * (sv[a * 2 + h] * sb)

    return zero, load, promote


def scales_len(p) -> int:
    """Values of a thread's scales buffer (``load``): 2 of scale_a an atom, then scale_b's."""
    return 2 * p.atoms + b_blocks(p.BN)
