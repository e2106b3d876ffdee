"""Space v3's tma epilogue (``epilogue`` "tma"): a consumer's accumulators to the output box by
box through shared memory, each box stored by the operator's ``Operands.store_box`` hook (a
TMA store, or with split K its reduce-add). Out of ``_hopper_kernel``'s body so that a kernel
can hold it twice, over two hooks (``_hopper_tail``: plain stores for whole tiles, adds for the
k slices of the last round's)."""

from __future__ import annotations

from ._hopper_layout import EPI_BOX_BYTES, EPI_BUFFERS, staging_offset, store_pair
from ._hopper_plan import Plan


def consumer_barrier(NC: int):
    """The macro (cw): consumer ``cw``'s 128 threads meet at named barrier 1 + cw, by immediate
    ids (a register id makes ptxas reserve all 16 barriers, one CTA per SM)."""
    from tvm.script import tirx as T

    @T.macro
    def meet(cw):
        if NC == 1:  # noqa: SIM114 - a static test, then a TIR one
            T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
        elif cw == 0:
            T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
        else:
            T.ptx["bar.sync"](T.uint32(2), T.uint32(128))

    return meet


def tma_boxes(p: Plan, store_box):
    """The macro (Sm, out_map, acc, tm, tn, row0, cw, lt): consumer ``cw``'s thread ``lt`` stages
    its accumulators of tile (tm, tn), rows from row0, box by box in ``Sm`` (the kernel's dynamic
    shared memory, the boxes after the ring) and has ``store_box`` store each."""
    from tvm.script import tirx as T

    BN, NC, atoms, half_n, ring = p.BN, p.NC, p.atoms, p.half_n, p.ring
    size, out_size, epi_c = p.in_size, p.out_size, p.epi_cols
    box_chunks = BN // epi_c  # staging boxes per m64 atom
    # the two buffers alternate box by box (even: every tile starts on buffer 0); an fp32
    # output's 32-column boxes are even for any BN of 64s, a 16-bit output's 64-column boxes
    # (or BN 48, 96) need BN // epi_c * atoms even (tma_boxes_pair_up); swap_ab's BN: no tma
    assert box_chunks * epi_c == BN and (atoms * box_chunks) % EPI_BUFFERS == 0
    stage_pair = store_pair(p.out_dtype, "shared")  # the staging store of a 16-bit output
    meet = consumer_barrier(NC)

    @T.macro
    def boxes(Sm, out_map, acc, tm, tn, row0, cw, lt):
        # box by box (64 rows x 128 bytes: 32 fp32 or 64 16-bit columns): every thread writes
        # its 16 values of the box (rounded to a 16-bit output's type) to a staging buffer in
        # TMA's 128-byte swizzle (16-byte chunk q of row i at chunk q ^ (i % 8)), fences them
        # for the async proxy, the consumer's 128 threads meet at named barrier 1 + cw, and one
        # thread has TMA store the box (clipped at the output's edges). Two buffers alternate:
        # before the barrier that thread waits until the previous box's store has read its
        # buffer, so the next box may overwrite that buffer after the barrier.
        for a in T.unroll(atoms):
            for q in T.unroll(box_chunks):
                buf = T.meta_var(ring + (cw * EPI_BUFFERS + (a * box_chunks + q) % EPI_BUFFERS)
                                 * (EPI_BOX_BYTES // size))
                for jj in T.unroll(epi_c // 8):
                    for h in T.unroll(2):
                        v = T.meta_var(a * half_n + (q * epi_c // 8 + jj) * 4 + h * 2)
                        at = T.meta_var(T.address_of(
                            Sm[buf + staging_offset(lt, jj, h, out_size) // size]))
                        if out_size == 4:
                            T.ptx["st.shared.v2.f32"](at, acc[v], acc[v + 1])
                        else:
                            stage_pair(at, acc[v], acc[v + 1])
                T.ptx.fence.proxy.async_.shared__cta()
                if lt == 0:
                    T.ptx["cp.async.bulk.wait_group.read"](0)
                meet(cw)
                store_box(out_map, T.address_of(Sm[buf]), tm, row0, a, tn * BN + q * epi_c, lt)

    return boxes
