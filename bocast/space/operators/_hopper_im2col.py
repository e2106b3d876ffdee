"""TMA's im2col mode for space v3's convolutions (``_hopper_conv``'s producer ``a_load: im2col``,
conv1d's and conv3d's only one): the tensor map's description, a load's coordinates and offsets,
and the packed arguments of the map's host encoder, all free of TVM (the kernel, the runner and
the tests' numpy model share them). Written for conv2d below; conv1d has one spatial dimension
(a rank-3 map, one offset), conv3d three (rank 5, three offsets), innermost first throughout.

What the hardware does (PTX ISA, "im2col mode" of ``cp.async.bulk.tensor``; ``cuda.h``'s
``cuTensorMapEncodeIm2col``; CUTLASS's sm90 conv collective and Triton's ``14-conv-im2col.py``
use it the same way; the mapping was checked on an H200, ``hopper-next.md`` a.5):

- the map over X (dims innermost first: C, W, H, N) fixes, per spatial dimension, a bounding
  box of positions ``lower, lower + t, ...`` up to ``extent - 1 + upper`` (t: the traversal
  stride, the map's element stride; corners W first), and a load's shape: ``pixels`` positions
  (BM) of ``channels`` channels (BK) each, in shared memory as BM rows of BK channels, swizzled
  as the 2-D box of the GEMM's A (so the wgmma descriptors are unchanged);
- one load starts at the position its coordinates (c, w, h, n) give, walks the box's
  positions W fastest, then H, then N (crossing rows and images), and reads for each position
  the BK channels at position + the load's offsets (u16, W first); a coordinate outside X reads
  zero (the fill counts towards the mbarrier's bytes like the rest of the box).

For the convolution: ``lower = -pad`` and the last position ``(O - 1) * stride - pad`` make the
positions exactly the output pixels' top-left input coordinates, in the order of the implicit
GEMM's rows (n, oh, ow); the offsets ``(s * dil, r * dil)`` choose tap (r, s). So the load for
k block (r, s, c-block) starting at output pixel m0 is A's box [m0 .. m0 + BM) x (r, s, c-block)
of the implicit GEMM, M counted linearly: no pixel tile, no row computed in vain but the last
tile's past M (zeros, never stored), for any stride, padding and dilation.

Why this producer was added for strided and dilated convolutions, as the likely faster one
(nothing could be timed where it was written; ``experiments/device/conv_v3_check.sh`` measures
it against the tiled one): it is what CUTLASS's sm90 conv uses; one TMA instruction per k block
as in the GEMM (the tiled box too, but its rectangle of pixels must tile the output: 7 x 7 or
14 x 14 outputs, ResNet's later stages, waste 12-25 % of the rows of any 64-multiple tile); the
same one elected producer thread and ring, so nothing changes for the consumers. A cp.async
gather by the producer warpgroup would need 128 threads with registers (the producer has 24-56
after setmaxnreg), its own swizzle arithmetic and arrive-on-complete barriers: more to get
wrong, and not faster than TMA.
"""

from __future__ import annotations

import numpy as np

from ._hopper_layout import DTYPE_BYTES, SWIZZLE

#: cuTensorMapEncodeIm2col's limits (cuda.h), by spatial dimensions (1-3: a map of rank 3-5,
#: NWC, NHWC, NDHWC): the corners are signed integers of 16, 8 or 5 bits; the traversal stride
#: is at most 8 (a load's channels at most 256 and pixels at most 1024: BK and BM are less)
CORNER_RANGE = {1: (-32768, 32767), 2: (-128, 127), 3: (-16, 15)}
MAX_TRAVERSAL_STRIDE = 8
#: a tap's offset, (R - 1) x dilation, below 2^(16 // spatial dims) - 1 (the load's 16 offset
#: bits shared by the spatial dimensions): CUTLASS's sm90 conv can_implement
#: (sm90_implicit_gemm_gmma_ss_warpspecialized.hpp, "255 for 2-D and 31 for 3-D"), taken as is
MAX_OFFSET = {sp: 2 ** (16 // sp) - 2 for sp in (1, 2, 3)}
#: the packed function an exported kernel's host code calls to encode the map (TVM registers
#: only cuTensorMapEncodeTiled; ``bocast.measure.tensor_maps.register_im2col_encoder`` adds it)
ENCODER = "bocast.cuTensorMapEncodeIm2col"


def tap(kb, g, bk: int):
    """(*taps, c-block) of k block ``kb`` (conv2d: (r, s, c-block)): k blocks run over the
    kernel's taps, outermost first, then c-block, innermost (``c_block_within_tap``: BK divides
    C). TIR expressions in the kernel, ints in tests."""
    cbs = g.C // bk
    inner = [cbs * int(np.prod(g.ksize[i + 1:])) for i in range(len(g.ksize))]
    return (kb // inner[0], *(kb // d % k for d, k in zip(inner[1:], g.ksize[1:])), kb % cbs)


def corners(g) -> tuple[list[int], list[int]]:
    """The bounding box's lower and upper corners, innermost (W) first: positions -pad ..
    (O - 1) * stride - pad, the first input coordinates of the output pixels, each dimension."""
    lower = [-g.pad] * len(g.size)
    upper = [(o - 1) * g.stride - g.pad - (n - 1)
             for n, o in zip(reversed(g.size), reversed(g.out))]
    return lower, upper


def why_not(g) -> str | None:
    """Why TMA's im2col mode cannot take the convolution ``g`` (None: it can)."""
    sp = len(g.size)
    (lo, hi), most = CORNER_RANGE[sp], MAX_OFFSET[sp]
    lower, upper = corners(g)
    if not all(lo <= v <= hi for v in lower + upper):
        return (f"its bounding box's corners {lower} / {upper} (innermost first) leave the "
                f"rank-{sp + 2} map's range [{lo}, {hi}]")
    if g.stride > MAX_TRAVERSAL_STRIDE:
        return f"stride {g.stride} exceeds TMA's traversal stride limit {MAX_TRAVERSAL_STRIDE}"
    if (max(g.ksize) - 1) * g.dil > most:
        return (f"a tap's offset (R - 1) x dilation exceeds {most} (16 // {sp} bits a spatial "
                "dimension)")
    return None


def tensor_map(g, BM: int, BK: int) -> dict:
    """The im2col map over X[N, H, W, C] (its type: fp16 or bf16, ``g.in_dtype``) for loads of
    BM pixels x BK channels (128- or 64-byte rows: that swizzle); what the runner encodes
    (``gpu_worker.encode_tensor_map``, ``mode`` im2col)."""
    size = DTYPE_BYTES[g.in_dtype]
    lower, upper = corners(g)
    strides = [g.C * size]
    for n in reversed(g.size):  # every dimension's but the outermost's (N)
        strides.append(strides[-1] * n)
    return {"tensor": "X", "dtype": g.in_dtype, "mode": "im2col",
            "dims": [g.C, *reversed(g.size), g.N], "strides": strides,
            "lower": lower, "upper": upper, "channels": BK, "pixels": BM,
            "element_strides": [1, *[g.stride] * len(g.size), 1],
            "swizzle": SWIZZLE[BK * size]}


#: the fields of an im2col map after its rank, in the order of :func:`encode_args` (the number of
#: values each takes, by rank: rank, rank - 1, spatial = rank - 2, ...)
_FIELDS = (("dims", 0), ("strides", -1), ("lower", -2), ("upper", -2), ("channels", None),
           ("pixels", None), ("element_strides", 0), ("swizzle", None))


def encode_args(m: dict) -> list:
    """The packed encoder's arguments after (map, dtype, rank, pointer): the map's fields in
    :data:`_FIELDS` order, flattened (an export's host code passes them so)."""
    out: list = []
    for name, _ in _FIELDS:
        v = m[name]
        out += list(v) if isinstance(v, (list, tuple)) else [v]
    return out


def parse_args(rank: int, args) -> dict:
    """:func:`encode_args` read back (the packed encoder's side): the map's fields."""
    args, spec = [int(a) for a in args], {}
    for name, less in _FIELDS:
        n = 1 if less is None else rank + less
        spec[name] = args[0] if less is None else args[:n]
        args = args[n:]
    if args:
        raise ValueError(f"{len(args)} arguments too many for a rank-{rank} im2col map")
    return {**spec, "mode": "im2col"}


def first_pixel(m0, g):
    """(n, *o): the output pixel of the implicit GEMM's row ``m0`` (conv2d: (n, oh, ow))."""
    inner = [int(np.prod(g.out[i + 1:])) for i in range(len(g.out))]
    return (m0 // (inner[0] * g.out[0]),
            *(m0 // d % o if d > 1 else m0 % o for d, o in zip(inner, g.out)))


def load_coords(kb, m0, g, bk: int):
    """The coordinates (c, *positions innermost first, n) of the im2col load of k block ``kb``
    for the BM rows from ``m0`` (conv2d: (c, w, h, n)): c-block's first channel and the first
    row's pixel's first input position (which may be negative: padding)."""
    cb = tap(kb, g, bk)[-1]
    n, *o = first_pixel(m0, g)
    return (cb * bk, *(x * g.stride - g.pad for x in reversed(o)), n)


def load_offsets(kb, g, bk: int):
    """The im2col offsets of k block ``kb``'s load, innermost first (conv2d: (s dil, r dil)):
    its tap's shift."""
    return tuple(r * g.dil for r in reversed(tap(kb, g, bk)[:-1]))
