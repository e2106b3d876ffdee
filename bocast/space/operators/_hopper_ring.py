"""Where space v3's kernel (``_hopper_kernel``) is in its TMA ring: the stage that a walk's k
block ``it`` fills or reads, and the parity of that stage's barrier phase. A ring of a power of
two stages indexes by the k block's count (``it % S`` and ``it // S`` are a mask and a shift);
another ring keeps a running (stage, phase) pair in registers, advanced once
a k block, instead of dividing by S at every one (CUTLASS's PipelineState). Measured on an H200
(results/skinny_v2_v3_h200, section 5): the running pair lifted 10- and 12-stage rings by 1-5%
(the 64 x 48 tile at 10 and 12 stages level with 8 and 16 at M = 64); at 8 and 16 the SASS is
unchanged. A walk that skips k blocks of other walks (ping-pong's consumers take turns with
whole tiles) keeps the division (``on`` False)."""

from __future__ import annotations


def ring_walk(S: int):
    """(at, before, start, step) for a ring of ``S`` stages: ``at(it, pos, on)`` the (stage,
    phase) of k block ``it``, ``before(it, pos, on)`` the stage of k block it - 1, ``start(pos)``
    and ``step(pos, on)`` TIRx macros that set the running pair ``pos`` (a local int32 buffer of
    2) to the ring's start and advance it a k block."""
    from tvm.script import tirx as T

    running = S & (S - 1) != 0

    def at(it, pos, on=True):
        return (pos[0], pos[1]) if running and on else (it % S, (it // S) & 1)

    def before(it, pos, on=True):
        if running and on:
            return T.if_then_else(pos[0] == 0, S - 1, pos[0] - 1)
        return (it + S - 1) % S

    @T.macro
    def start(pos):
        pos[0] = 0
        pos[1] = 0

    @T.macro
    def step(pos, on=True):
        if running and on:
            if pos[0] == S - 1:
                pos[0] = 0
                pos[1] = pos[1] ^ 1
            else:
                pos[0] = pos[0] + 1

    return at, before, start, step
