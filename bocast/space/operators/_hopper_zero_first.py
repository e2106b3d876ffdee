"""Split K without the zeroing launch (space v3's GEMM and bmm, ``split_reduce`` "zero_first",
``_hopper_split``): slice 0 of a tile zeroes the tile's output at the start of its unit, and
every slice adds its fp32 partial sums into it at its epilogue, as the atomic mode does.

Why: the atomic mode adds every slice into an output the launch zeroes first, a second kernel
in the stream. On an H200 that zeroing cost 1.4-2.4 us of cuBLAS's 15-18 us at the decode
projections N,K = 6144,4096 (M 16-128; ``experiments/results/fresh_skinny_h200``), the gap of
the best split-K kernels there (0.85-0.97 of cuBLAS). A first try, slice 0 storing its sums
and the other slices adding theirs once it had, was correct but no faster (H200: a later
slice's epilogue waited for slice 0's whole epilogue, stores, fence and flag). Here slice 0
zeroes before its main loop, while the producer's TMA loads fill the ring, so by the time a
later slice reaches its epilogue the zeroing is long done and its wait costs nothing.

How: a flag a tile, a uint32 of ``bocast_tile_flags`` in the kernel module's own global memory
(declared in the CUDA source through TVM's ``pragma_import_c``: zero when the module loads, and
every launch leaves it zero, so neither the runner nor an export passes or clears anything).
Slice 0's zeroing consumers (each of a cooperative tile's, the one of a ping-pong tile) set
their accumulators to 0 and store them with the plain ``store_rows`` hook (it knows the edges
and swap_ab's transposed C), make them visible at GPU scope (the tma epilogue's reduce-adds
being the async proxy: ``fence.proxy.async.global`` first; then every thread's
``fence.acq_rel.gpu`` and the warpgroup's named barrier) and add 1 to the flag
(``atom.release.gpu``). The main loop's first wgmma starts the sum afresh (scale_d 0), so the
zeroed accumulators change nothing. At its epilogue a consumer of a later slice has thread 0
wait (``ld.acquire.gpu``) until the flag counts slice 0's zeroing consumers and add 1 itself
(``atom.relaxed.gpu``: that arrival publishes nothing, and a release there would wait for the
thread's adds of an earlier unit still in flight); with the direct epilogues its warpgroup then
meets at the named barrier, since every thread adds (``red.global.add``); with the tma epilogue
thread 0 alone issues the reduce-adds, after ``fence.proxy.async.global`` (the acquired zeroing,
generic-proxy writes, before its async-proxy adds; slice 0's thread 0 issues it too, for its own
warpgroup's zeroing). Slice 0 adds only into rows its own warpgroup zeroed (program order and
its barrier): no wait. The arrival that completes a tile's count (split_k x its zeroing
consumers) sets the flag back to 0: every waiter has passed its wait by then.

No deadlock: units wait only for slice-0 units, the first ``tiles`` of the walk (the k slice
outermost, ``_hopper_layout.split_unit``), and a slice-0 unit zeroes before it waits for
anything. Persistent CTAs take those as their first units (no more tiles than SMs:
``split_k_only_below_a_wave``); with one unit a CTA they have the lowest block indices and are
dispatched first (the order CUTLASS's serial split-K relies on too). One launch of a loaded
module at a time: two launches at once (two streams) would share its flags."""

from __future__ import annotations

from collections.abc import Callable

#: the flags' symbol in the kernel's CUDA source
FLAGS = "bocast_tile_flags"


def prelude(tiles: int) -> str:
    """The CUDA declarations the kernel's source gets (``pragma_import_c``): the flags, zeroed
    at the module's load, and the two device functions the kernel calls."""
    return f'''extern "C" __device__ unsigned int {FLAGS}[{tiles}];
// the last arrival of a launch at a tile (every waiter past its wait) zeroes its flag
__device__ __forceinline__ void bocast_flag_reset(unsigned int* f, unsigned int old,
                                                  unsigned int arrivals) {{
  if (old == arrivals - 1) asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" :: "l"(f) : "memory");
}}
// a zeroing consumer's arrival (thread 0, after its warpgroup's zeroes and fences): releases them
__device__ __forceinline__ void bocast_flag_arrive(int tile, unsigned int arrivals) {{
  unsigned int* f = {FLAGS} + tile;
  unsigned int old;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(f) : "memory");
  bocast_flag_reset(f, old, arrivals);
}}
// a later slice's consumer (thread 0): until slice 0's zeroing consumers have all arrived, then
// its own arrival, relaxed: it publishes nothing, it only counts toward the reset (after the
// acquiring load in program order, on the same flag)
__device__ __forceinline__ void bocast_flag_wait(int tile, unsigned int zeroing,
                                                 unsigned int arrivals) {{
  unsigned int* f = {FLAGS} + tile;
  unsigned int v;
  do {{
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
  }} while (v < zeroing);
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(v) : "l"(f) : "memory");
  bocast_flag_reset(f, v, arrivals);
}}
'''


def zeroing_consumers(p) -> int:
    """The consumers that zero (and later add into) one tile: each of a cooperative tile's
    ``NC``, the one of a ping-pong tile."""
    return 1 if p.pingpong else p.NC


class Ordering:
    """The zero_first macros over Plan ``p``, given the operator's plain ``store_rows`` hook
    (``Operands.store_rows`` without adds): ``zero``, at a unit's start, and ``wait``, before
    its epilogue's adds (the operator's split-K ``adds`` hooks, as the atomic mode's)."""

    def __init__(self, p, store_rows: Callable):
        from tvm.script import tirx as T

        assert p.zero_first
        self.prelude = prelude(p.tiles)
        zeroing = zeroing_consumers(p)
        arrivals = p.splits * zeroing
        NC, tma, n_acc = p.NC, p.tma_store, p.atoms * p.half_n

        @T.macro
        def meet(cw):  # the consumer's warpgroup, at named barrier 1 + cw (immediate ids)
            if NC == 1:  # noqa: SIM114 - a static test, then a TIR one
                T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
            elif cw == 0:
                T.ptx["bar.sync"](T.uint32(1), T.uint32(128))
            else:
                T.ptx["bar.sync"](T.uint32(2), T.uint32(128))

        @T.macro
        def zero(out, acc, flag, ks, tm, tn, row0, cw, lt):
            """At a unit's start, before its main loop: slice 0 zeroes its consumer's rows of
            the tile, visible at GPU scope, then arrives."""
            if ks == 0:
                for v in T.unroll(n_acc):
                    acc[v] = T.float32(0)
                store_rows(out, acc, tm, tn, row0, lt)
                if tma:  # the generic-proxy zeroes before any async-proxy reduce-add
                    T.ptx["fence.proxy.async.global"]()
                T.ptx["fence.acq_rel.gpu"]()
                meet(cw)
                if lt == 0:
                    T.evaluate(T.call_extern("void", "bocast_flag_arrive", flag,
                                             T.uint32(arrivals)))

        @T.macro
        def wait(flag, ks, cw, lt):
            """Before a unit's adds: a later slice until slice 0 has zeroed the tile."""
            if ks > 0:
                if lt == 0:
                    T.evaluate(T.call_extern("void", "bocast_flag_wait", flag,
                                             T.uint32(zeroing), T.uint32(arrivals)))
                if not tma:  # every thread adds: all after thread 0's acquire
                    meet(cw)
            if tma and lt == 0:  # thread 0's reduce-adds (async proxy) after the zeroing
                T.ptx["fence.proxy.async.global"]()

        self.zero, self.wait = zero, wait
