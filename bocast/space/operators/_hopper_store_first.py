"""Split K without a zeroed output (space v3's GEMM and bmm, ``split_reduce`` "store_first",
``_hopper_split``): slice 0 of a tile stores its fp32 partial sums, and every other slice adds
its own into them once slice 0 has stored.

Why: the atomic mode adds every slice into an output the launch zeroes first, a second kernel
in the stream. On an H200 that zeroing cost 1.4-2.4 us of cuBLAS's 15-18 us at the decode
projections N,K = 6144,4096 (M 16-128; ``experiments/results/fresh_skinny_h200``), which is the
gap the best split-K kernels showed there (0.84-0.93 of cuBLAS).

How: a flag a tile, a uint32 of ``bocast_tile_flags`` in the kernel module's own global memory
(declared in the CUDA source through TVM's ``pragma_import_c``: zero when the module loads, and
every launch leaves it zero, so neither the runner nor an export passes or clears anything).
Slice 0's storing consumers (each of a cooperative tile's, the one of a ping-pong tile) store
their rows as the epilogue knob says (v2 or scalar ``st.global``, or TMA's box store), make them
visible at GPU scope (every thread's ``fence.acq_rel.gpu`` and the warpgroup's named barrier;
the tma epilogue: its bulk stores waited for, then ``fence.proxy.async.global``) and add 1 to
the flag (``atom.release.gpu``). A consumer of a later slice runs its main loop, then thread 0
waits (``ld.acquire.gpu``) until the flag counts slice 0's storing consumers, adds 1 itself, and
its warpgroup meets at the named barrier before adding its sums (``red.global.add``, TMA's
reduce-add) as the atomic mode does. The arrival that completes a tile's count (split_k x its
storing consumers) sets the flag back to 0: every waiter has passed its wait by then.

No deadlock: units wait only for slice-0 units, the first ``tiles`` of the walk (the k slice
outermost, ``_hopper_layout.split_unit``). Persistent CTAs take those as their first units (no
more tiles than SMs: ``split_k_only_below_a_wave``); with one unit a CTA they have the lowest
block indices and are dispatched first (the order CUTLASS's serial split-K relies on too).
One launch of a loaded module at a time: two launches at once (two streams) would share its
flags."""

from __future__ import annotations

from collections.abc import Callable

#: the flags' symbol in the kernel's CUDA source
FLAGS = "bocast_tile_flags"


def prelude(tiles: int) -> str:
    """The CUDA declarations the kernel's source gets (``pragma_import_c``): the flags, zeroed
    at the module's load, and the two device functions the kernel calls."""
    return f'''extern "C" __device__ unsigned int {FLAGS}[{tiles}];
// a tile's arrival; the last one of a launch (every waiter past its wait) zeroes the flag
__device__ __forceinline__ void bocast_flag_arrive(int tile, unsigned int arrivals) {{
  unsigned int* f = {FLAGS} + tile;
  unsigned int old;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(f) : "memory");
  if (old == arrivals - 1) asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" :: "l"(f) : "memory");
}}
// until slice 0's storing consumers have all arrived
__device__ __forceinline__ void bocast_flag_wait(int tile, unsigned int stored) {{
  unsigned int* f = {FLAGS} + tile;
  unsigned int v;
  do {{
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
  }} while (v < stored);
}}
'''


class Ordering:
    """The store_first macros over Plan ``p``, given the operator's two sets of output hooks
    (``Operands.store_box``, ``store_rows``): ``stores`` (plain) and ``adds`` (split K's)."""

    def __init__(self, p, stores: tuple[Callable, Callable], adds: tuple[Callable, Callable]):
        from tvm.script import tirx as T

        assert p.store_first
        self.prelude = prelude(p.tiles)
        storing = 1 if p.pingpong else p.NC  # the consumers that store one tile
        arrivals = p.splits * storing
        NC, tma = p.NC, p.tma_store
        store_box, store_rows = stores
        add_box, add_rows = adds

        @T.macro
        def meet(cw):  # the consumer's warpgroup, at named barrier 1 + cw (immediate ids)
            if NC == 1:  # noqa: SIM114 - a static test, then a TIR one
                T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
            elif cw == 0:
                T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
            else:
                T.ptx["bar.sync"](T.uint32(2), T.uint32(128))

        @T.macro
        def wait(flag, ks, cw, lt):
            """Before a later slice's epilogue: until slice 0 has stored the tile."""
            if ks > 0:
                if lt == 0:
                    T.evaluate(T.call_extern("void", "bocast_flag_wait", flag,
                                             T.uint32(storing)))
                    if tma:  # the reduce-adds (async proxy) after the acquire
                        T.ptx["fence.proxy.async.global"]()
                    T.evaluate(T.call_extern("void", "bocast_flag_arrive", flag,
                                             T.uint32(arrivals)))
                meet(cw)

        @T.macro
        def box(out_map, smem, tm, row0, a, col0, lt, ks):
            if ks == 0:
                store_box(out_map, smem, tm, row0, a, col0, lt)
            else:
                add_box(out_map, smem, tm, row0, a, col0, lt)

        @T.macro
        def rows(out, acc, tm, tn, row0, lt, ks):
            if ks == 0:
                store_rows(out, acc, tm, tn, row0, lt)
            else:
                add_rows(out, acc, tm, tn, row0, lt)

        @T.macro
        def stored(flag, ks, cw, lt):
            """After slice 0's stores of the tile: visible at GPU scope, then its arrival."""
            if ks == 0:
                if tma:
                    if lt == 0:  # its bulk stores complete, their writes seen by this thread
                        T.ptx["cp.async.bulk.wait_group"](0)
                        T.ptx["fence.proxy.async.global"]()
                        T.evaluate(T.call_extern("void", "bocast_flag_arrive", flag,
                                                 T.uint32(arrivals)))
                else:
                    T.ptx["fence.acq_rel.gpu"]()
                    meet(cw)
                    if lt == 0:
                        T.evaluate(T.call_extern("void", "bocast_flag_arrive", flag,
                                                 T.uint32(arrivals)))

        self.wait, self.box, self.rows, self.stored = wait, box, rows, stored
