"""Narrow N tiles for space v3's skinny GEMMs (issue 38 item 3): ``bn`` 48 and 96 beside 64-256.

Why: a skinny GEMM's grid is its N tiles (x 1 or 2 M tiles). At M = 128, N = 6144 the tiles of
64 or 128 columns give 96 CTAs for 132 SMs (0.73 of a wave) whichever way they are cut, and the
tunes stopped at 0.88-0.92 of cuBLAS there (experiments/results/deep_ring_h200). cuBLAS runs
``nvjet_sm90_hss_96x64_64x10_1x2`` at that shape (experiments/results/fresh_skinny_h200): tiles
96 wide, 128 CTAs, 0.97 of a wave. A wgmma's N is any multiple of 8 up to 256, so 96 (and 48:
128 CTAs with one M tile of 128) is one instruction, m64n96k16 (m64n48k16); nothing else in the
template assumes BN a multiple of 64 (the ring's rows, the multicast's halves of 24 or 48 rows
and the staging boxes are whole 8-row swizzle atoms), except the tma epilogue's boxes
(``_hopper_matmul``'s tma_boxes_pair_up).

Measured on an H200 (experiments/results/narrow_h200): the wave was not the limit. At M = 128
every narrow kernel re-timed at 0.65-0.80 of cuBLAS, below the swap_ab 128 x 64 kernel of 96
CTAs (0.96); at M = 64 a 64 x 48 tile of 16 stages (128 CTAs) re-timed at 1.005-1.015, above
every swapped kernel (0.97). No 64-trial tune chose a narrow tile, and the M = 64 tunes at N,K =
6144,4096 fell from 0.98-1.02 to 0.93-0.94 after they came: whether they stay is the next
measurement's to say (the same seeds with bn pinned to 64-256).

Only the spaces with swap_ab (GEMM and GEMV, batch 1) offer them, and only for M up to
:data:`_hopper_swap.SWAP_MAX_M`: larger GEMMs fill their waves with M tiles and keep the
spaces (and the datasets' feasible sets) they had. Under swap ``bn`` is the kernel's rows,
wgmma's M, whole 64-row atoms: the narrow values are unswapped only."""

from __future__ import annotations

from bocast.space.space import Constraint, Knob, Ordinal

from . import _hopper_swap as sw

#: C tile columns narrower than, or between, the 64-multiples: wgmma's N (multiples of 8)
NARROW_BN = (48, 96)


def offered(spec) -> bool:
    """Whether ``spec``'s space offers :data:`NARROW_BN`: a GEMM or GEMV with swap_ab's knob
    and M <= SWAP_MAX_M."""
    return sw.has_knob(spec) and spec.M <= sw.SWAP_MAX_M


def bn_knob(knob: Knob, spec) -> Knob:
    """``_hopper_matmul``'s bn knob, with :data:`NARROW_BN` among its values where
    :func:`offered`."""
    if not offered(spec):
        return knob
    assert isinstance(knob, Ordinal) and min(knob.choices) == 64, knob
    return Ordinal(knob.name, tuple(sorted({*NARROW_BN, *knob.choices})),
                   doc=knob.doc + "; 48 and 96 for skinny GEMMs (unswapped)")


def constraints(spec) -> list[Constraint]:
    if not offered(spec):
        return []
    return [Constraint(
        "narrow_bn_unswapped",
        f"bn {' and '.join(map(str, NARROW_BN))} is wgmma's N, unswapped only: under swap_ab "
        "bn is the kernel's rows, wgmma's M, whole 64-row atoms",
        lambda c: (c["bn"] % 64 == 0) | ~sw.swapped(c))]
