"""Split K for the last round of a persistent GEMM (space v3's GEMM and bmm: the ``tail_split``
knob). A persistent kernel's CTAs (one an SM) walk the tiles in rounds; when the tiles do not
divide by the SMs, the last round runs on a few SMs while the rest idle, yet takes a whole
round. With ``tail_split`` s the tiles of that last round are cut into s k slices each (units
of KT / s k blocks, the whole tiles' units first), so the round is spread over s times as many
CTAs and lasts about 1 / s of a round, where the units fill the SMs; their fp32 partial sums
add into the output (the split-K adds: ``red.global.add``, or TMA's reduce-add).

Why (H200, results/tail_split_h200, written before the knob existed): the default command's
kernel at 2048x28672x8192 (128 x 192 ping-pong: 16 x 150 = 2,400 tiles, 18.2 rounds of 132)
ran 649.7 TFLOPS, and 690.6 at N = 28416 (2,368 tiles, 17.9 rounds) for 0.991 of the work:
the 24-tile last round cost a whole one (0.998 and 1.051 of cuBLAS); a 128 x 256 control whose
rounds do not change between the two shapes read 666.0 and 661.5. CUTLASS's stream-K
scheduler (``sm90_tile_scheduler_stream_k.hpp``) balances the last rounds' k iterations the
same way, with a workspace and its own reduction; this is its "data-parallel, then split"
form without a workspace.

How the adds meet an output nobody zeroed (the launch zeroes nothing: a second kernel that
wrote the whole output would cost more than the round saves): slice 0 of a tile zeroes it at
its unit's start, and every later slice adds once that zeroing is visible, through a flag a
tile in the kernel module's own global memory (``bocast_tail_flags``, declared in the CUDA
source with TVM's ``pragma_import_c``: zero when the module loads; every launch leaves it
zero, so neither the runner nor an export passes or clears anything). Slice 0's zeroing
consumers (each of a cooperative tile's, the one of a ping-pong tile) set their accumulators
to 0, store them with the plain ``store_rows`` hook (the edges known), make them visible at GPU
scope (``fence.proxy.async.global`` first where TMA's reduce-adds, the async proxy, follow;
then ``fence.acq_rel.gpu`` and the warpgroup's named barrier) and add 1 to the flag
(``atom.release.gpu``); the main loop's first wgmma starts the sum afresh (scale_d 0). At its
epilogue a consumer of a later slice has thread 0 wait (``ld.acquire.gpu``) until the flag
counts slice 0's zeroing consumers, then add 1 (relaxed: it publishes nothing), and its
warpgroup meets at the named barrier (every thread adds, or thread 0's reduce-adds follow a
``fence.proxy.async.global``). The arrival that completes a tile's count (s x its zeroing
consumers) sets the flag back to 0: every waiter has passed its wait by then. (The mechanism
of ``split_reduce`` zero_first, measured correct and reverted for its speed at the skinny
shapes in the seventeenth session, branch zero-first.)

No deadlock: a unit waits only for the slice-0 unit of its own tile, which has a lower index
(the slices of a tile are consecutive units); every CTA walks its units in increasing order
and zeroes at a unit's start, before anything of that unit waits; a waiting consumer holds
no stage of the ring (it released them after its main loop) and, in ping-pong, has passed
its turn to the other consumer. The persistent grid is one CTA an SM, all resident. One launch
of a loaded module at a time: two at once (two streams) would share its flags."""

from __future__ import annotations

import numpy as np

from bocast.space.space import Constraint, Knob, Ordinal

from . import _hopper_swap as sw
from ._hopper_epilogue import consumer_barrier, tma_boxes
from ._hopper_layout import target_sms

#: k slices of each last-round tile (1: no split, the walk of before the knob)
TAIL_SPLIT = (1, 2, 4, 8)
#: the flags' symbol in the kernel's CUDA source
FLAGS = "bocast_tail_flags"


def knobs(spec) -> list[Knob]:
    # came after every dataset and store: theirs read as 1 (the kernel they timed); fp8 block
    # scales promote every k block into their own sums (_hopper_blockscale): not split here.
    # Drawn beyond 1 only where tail_split_needs_persistent and _alone allow it: a free knob of
    # four values made the v3 GEMM spaces' uniform samples 2.5-4x slower (three draws in four
    # rejected), ``open_when`` keeps them at their former speed
    opens = {"persistent": ("on",), "cluster": ("1x1",),
             **({"swap_ab": ("off",)} if sw.has_knob(spec) else {})}
    return [Ordinal("tail_split", (1,) if spec.scale_block else TAIL_SPLIT, default=1,
                    open_when=opens,
                    doc="k slices each tile of a persistent walk's last, partial round is cut "
                        "into, spreading that round over more SMs; the slices' fp32 partial "
                        "sums add into the output (slice 0 zeroes it first); 1: no split")]


def constraints(spec) -> list[Constraint]:
    """What tail_split needs; tail_split 1 passes every one."""
    sms, out = target_sms(spec), spec.out_dtype

    def on(c):
        return c["tail_split"] == 1

    def alone(c):  # no split K, no cluster, no swap_ab (a space without the knob: its default)
        ok = (c["split_k"] == 1) & (c["cluster"] == "1x1")
        return ok & (c["swap_ab"] == "off") if "swap_ab" in c else ok

    return [
        Constraint("tail_split_needs_persistent",
                   "the last round is a persistent walk's: tail_split > 1 needs persistent on",
                   lambda c: on(c) | (c["persistent"] == "on")),
        Constraint("tail_split_needs_a_partial_round",
                   f"the tiles fill more than one round of the target's {sms} SMs and the last "
                   "one only in part (tiles > SMs, tiles % SMs != 0); with fewer tiles than "
                   "SMs split_k splits every tile",
                   lambda c: on(c) | ((c["tiles"] > sms) & (c["tiles"] % sms != 0))),
        # H200 (results/tail_split_h200): 100 last-round tiles of 128 x 256 cut 8 ways (7
        # rounds of an eighth) cost 15%, 68 of 128 x 128 cut 4 ways (3 rounds) 4%, where 24
        # of 128 x 192 cut 4 ways (one round) gained 2.7-4.2%: the adds are the slices' cost
        Constraint("tail_split_in_one_round",
                   f"the slices of the last round's tiles fit one round of the {sms} SMs "
                   "(last-round tiles x tail_split <= SMs): more make further partial rounds "
                   "and add more partial sums than they save",
                   lambda c: on(c) | (c["tiles"] % sms * c["tail_split"] <= sms)),
        Constraint("tail_split_divides_k_blocks",
                   f"each slice is the same number of whole k blocks (K = {spec.K}): "
                   "tail_split divides ceil(K / BK)",
                   lambda c: c["k_blocks"] % c["tail_split"] == 0),
        Constraint("tail_split_alone",
                   "tail_split > 1 only with split_k 1, cluster 1x1 and swap_ab off (one walk "
                   "of units; a cluster's paired tiles and swap_ab's transposed stores are "
                   "not built with it)",
                   lambda c: on(c) | alone(c)),
        Constraint("tail_split_needs_fp32_output",
                   f"the slices' partial sums add into the output in fp32 (got {out})",
                   lambda c: on(c) | np.full_like(c["bm"], out == "float32", dtype=bool)),
        Constraint("tail_split_without_fuse",
                   "a fused epilogue (bias, activation) applies to the whole sum, never to a "
                   "slice's part of it",
                   lambda c: on(c) | np.full_like(c["bm"], getattr(spec, "fuse", None) is None,
                                                  dtype=bool)),
    ]


def wave_rounds(tiles, tail, sms: int):
    """Rounds of tiles a persistent walk takes, a last round split into ``tail`` slices
    counting as the share of a round its slices take: ceil(tiles / sms) at tail 1."""
    whole, last = tiles // sms, tiles % sms
    return np.where(tail > 1, whole + np.ceil(last * tail / sms) / tail, -(-tiles // sms))


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
// its own arrival, relaxed: it publishes nothing, it only counts toward the reset
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


class Tail:
    """The tail split's macros over Plan ``p`` (``tail`` > 1), given the operator's output
    hooks twice, ``plain`` and ``adds`` ((store_box, store_rows) each: ``Operands``'): ``zero``
    at a unit's start, ``wait`` before its epilogue, and the epilogues ``store_rows`` and
    ``boxes`` (the tma epilogue), which store a whole tile's unit and add a slice's."""

    def __init__(self, p, plain, adds):
        from tvm.script import tirx as T

        assert p.tail > 1
        self.prelude = prelude(p.tiles - p.dp)
        zeroing = zeroing_consumers(p)
        arrivals = p.tail * zeroing
        dp, s, tma, n_acc = p.dp, p.tail, p.tma_store, p.atoms * p.half_n
        meet = consumer_barrier(p.NC)  # the consumer's warpgroup
        plain_rows, add_rows = plain[1], adds[1]
        if tma:
            plain_boxes, add_boxes = tma_boxes(p, plain[0]), tma_boxes(p, adds[0])

        @T.macro
        def zero(out, acc, u, tm, tn, row0, cw, lt):
            """At unit u's start, before its main loop: a slice-0 unit zeroes its consumer's
            rows of the tile, visible at GPU scope, then arrives."""
            if u >= dp and (u - dp) % s == 0:
                for v in T.unroll(n_acc):
                    acc[v] = T.float32(0)
                plain_rows(out, acc, tm, tn, row0, lt)
                if tma:  # the generic-proxy zeroes before any async-proxy reduce-add
                    T.ptx["fence.proxy.async.global"]()
                T.ptx["fence.acq_rel.gpu"]()
                meet(cw)
                if lt == 0:
                    T.evaluate(T.call_extern("void", "bocast_flag_arrive", (u - dp) // s,
                                             T.uint32(arrivals)))

        @T.macro
        def wait(u, cw, lt):
            """Before unit u's epilogue: a later slice until slice 0 has zeroed the tile."""
            if u >= dp:
                if (u - dp) % s > 0:
                    if lt == 0:
                        T.evaluate(T.call_extern("void", "bocast_flag_wait", (u - dp) // s,
                                                 T.uint32(zeroing), T.uint32(arrivals)))
                    if not tma:  # every thread adds: all after thread 0's acquire
                        meet(cw)
                if tma and lt == 0:  # thread 0's reduce-adds (async proxy) after the zeroing
                    T.ptx["fence.proxy.async.global"]()

        @T.macro
        def store_rows(out, acc, u, tm, tn, row0, lt):
            if u >= dp:
                add_rows(out, acc, tm, tn, row0, lt)
            else:
                plain_rows(out, acc, tm, tn, row0, lt)

        @T.macro
        def boxes(Sm, out_map, acc, u, tm, tn, row0, cw, lt):
            if u >= dp:
                add_boxes(Sm, out_map, acc, tm, tn, row0, cw, lt)
            else:
                plain_boxes(Sm, out_map, acc, tm, tn, row0, cw, lt)

        self.zero, self.wait, self.store_rows = zero, wait, store_rows
        self.boxes = boxes if tma else None
