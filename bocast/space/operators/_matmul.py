"""The Tensor Core matmul every operator space maps onto, and its two space generations.

Every operator here is, like in Heron, one matmul on Tensor Cores:

    C[(b,) i, j] = sum_k A[(b,) i, k] * B[(b,) j, k]      (trans_b, "NT")
    C[(b,) i, j] = sum_k A[(b,) i, k] * B[(b,) k, j]      ("NN")

with fp16 operands and an fp32 or fp16 accumulator (space v3: fp16, bf16 or fp8 operands, fp32
accumulation, an fp32 or 16-bit output; :data:`SPACE_DTYPES`). An operator describes its matmul
with a :class:`MatmulSpec` and writes ``prim_func()`` so that one block (``spec.block``) is it.
Its operands may be produced by other blocks (padding, an im2col gather, a reshape of the weights):
the schedules inline every such producer into the shared-memory fetch, so the gather costs index
arithmetic in the cooperative copy and no extra kernel. Its result may be copied by one more block
(``spec.epilogue``) into the operator's output layout when that layout is a row-major reshape of
the matmul's ``[M, N]`` (NHWC convolution outputs are ``[N*OH*OW, K]``): the schedules view the
output buffer through that reshape (``transform_layout``, which leaves its memory unchanged) and
inline the copy into the write-back, so the kernel writes the operator's output directly.

Three schedule spaces implement it, chosen by the workload's ``space`` in
:mod:`._matmul_operator` (the operator class and the choice live there, above the generations,
which build on the pieces here):

- ``v2`` (default): ``_pipelined_matmul.py``, cp.async software pipelines, ldmatrix +
  mma.sync or WMMA, XOR-swizzled or padded dynamic shared memory, block rasterisation;
- ``v1``: ``_wmma_matmul.py``, Heron's WMMA knob set (the space of the datasets and
  results recorded before space v2; kept so that they replay and rerun);
- ``v3``: ``_hopper_matmul.py``, TMA + wgmma + warp specialization (Hopper).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bocast.space.knobs import MAX_EXTENT, Constraint
from bocast.space.operators.operator import WorkloadError, check_tensor

#: a workload's ``dtype``, "input:output": (the operands' type, A's if B's differs; the output's)
DTYPE_PAIRS = {"fp16:fp32": ("float16", "float32"), "fp16:fp16": ("float16", "float16"),
               "bf16:fp32": ("bfloat16", "float32"), "bf16:bf16": ("bfloat16", "bfloat16"),
               "e4m3:bf16": ("float8_e4m3fn", "bfloat16"),
               "e4m3:fp32": ("float8_e4m3fn", "float32"),
               "e5m2xe4m3:bf16": ("float8_e5m2", "bfloat16"),
               "e5m2xe4m3:fp32": ("float8_e5m2", "float32"),
               "e4m3b128:bf16": ("float8_e4m3fn", "bfloat16"),
               "e4m3b128:fp32": ("float8_e4m3fn", "float32")}
#: fp8 with block scales (DeepSeek-V3's: A 1 x 128, B 128 x 128 blocks, fp32; ``gemm.py``):
#: a dtype of its own, so every per-tensor workload keeps its identity
BLOCK_FP8_PAIRS = ("e4m3b128:bf16", "e4m3b128:fp32")
#: fp8 (e4m3, or A e5m2 x B e4m3), per-tensor or block scales (``gemm.py``); GEMM only
#: (``fp8`` below)
FP8_PAIRS = ("e4m3:bf16", "e4m3:fp32", "e5m2xe4m3:bf16", "e5m2xe4m3:fp32", *BLOCK_FP8_PAIRS)
#: the dtypes each space generation implements. v1/v2: fp16 mma.sync / WMMA, accumulating in
#: the output's type; v3: wgmma on fp16, bf16 or fp8, fp32 accumulators, a 16-bit output rounded
#: once (:func:`acc_dtype`), GEMM and bmm (fp8: GEMM only) and the direct convolutions
#: (``_hopper_conv.DTYPES``: the 16-bit ones).
SPACE_DTYPES = {"v1": ("fp16:fp32", "fp16:fp16"), "v2": ("fp16:fp32", "fp16:fp16"),
                "v3": ("fp16:fp32", "fp16:fp16", "bf16:fp32", "bf16:bf16", *FP8_PAIRS)}
GRID_Y_LIMIT = 65535
THREAD_LIMIT = 1024  # threads per block
SMEM_LIMIT = 227 * 1024  # shared memory per block on the H100 (static + dynamic, with opt-in)
STATIC_SMEM_LIMIT = 48 * 1024  # static shared memory per block (ptxas)
SPACES = ("v2", "v1", "v3")
DEFAULT_SPACE = "v2"
#: ``space: auto`` takes v3 for a GEMM or bmm whose M and N are both at least this: cold, v3
#: beat v2 from M = 64 (and at N = 128) up, v2 won at M = 32, where half of v3's 64-row tile is
#: padding and v2 splits K (H200, experiments/results/v3_vs_v2_h200.md); bmm's rule still.
#: GEMM goes lower (gemm.AUTO_V3_SKINNY_MIN_M) since v3 has split K and swap-AB
AUTO_V3_MIN_MN = 64
AUTO_V3_RULE = f"M and N >= {AUTO_V3_MIN_MN}; measured, v3 beat v2 there and v2 won at M = 32"


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def dtype_pair(op: str, dtype: str, space: str, spaces: Sequence[str] = SPACES, *,
               fp8: bool = False) -> tuple[str, str]:
    """(operand type, output type) of ``dtype`` on ``space``, for an operator whose spaces
    implement :data:`SPACE_DTYPES` (``spaces``: those that do, all by default) and, if ``fp8``,
    its fp8 dtypes (:data:`FP8_PAIRS`); one WorkloadError naming the dtypes accepted, or the
    spaces that take this one."""
    mine = [d for d in DTYPE_PAIRS if any(d in SPACE_DTYPES[s] for s in spaces)
            and (fp8 or d not in FP8_PAIRS)]
    if dtype not in mine:
        raise WorkloadError(f"{op}: dtype {dtype!r} not supported; use one of {mine}")
    if space in SPACE_DTYPES and dtype not in SPACE_DTYPES[space]:
        where = [s for s in spaces if dtype in SPACE_DTYPES[s]]
        raise WorkloadError(f"{op}: dtype {dtype!r} needs space {' or '.join(where)}; space "
                            f"{space} implements {list(SPACE_DTYPES[space])}")
    return DTYPE_PAIRS[dtype]


def acc_dtype(space: str, out_dtype: str) -> str:
    """The accumulator's type: v1 and v2 accumulate in the output's type (fp16:fp16 is fp16
    mma.sync); v3 always in fp32 (wgmma's only accumulator for bf16; an fp16 output of v3 is
    fp32 accumulation rounded once at the store, as cuBLAS's fp16 GEMM)."""
    return "float32" if space == "v3" else out_dtype


def space_version(op: str, space: str) -> str:
    if space not in SPACES:
        raise WorkloadError(f"{op}: space {space!r} not known; use one of {list(SPACES)}")
    return space


def check_extents(op: str, names: Sequence[str], values: Sequence[Any], *,
                  minimum: int = 1) -> None:
    """Every value an integer between ``minimum`` and 2^31 - 1; else one WorkloadError naming
    the first bad one."""
    for name, v in zip(names, values):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise WorkloadError(f"{op}: {name} must be {what}, got {v!r}")
        if v > MAX_EXTENT:
            raise WorkloadError(f"{op}: {name} = {v} is larger than {MAX_EXTENT} (2^31 - 1), "
                                "the largest extent bocast accepts")


def check_options(op: str, options: dict, allowed: Sequence[str]) -> None:
    unknown = set(options) - set(allowed)
    if unknown:
        raise WorkloadError(f"{op}: unknown option(s) {sorted(unknown)}"
                            + (f"; known: {', '.join(allowed)}" if allowed else ""))


@dataclass(frozen=True)
class MatmulSpec:
    """The matmul an operator runs on Tensor Cores, and where ``prim_func()`` keeps it."""

    M: int
    N: int
    K: int
    in_dtype: str = "float16"
    acc_dtype: str = "float32"
    out_dtype: str = "float32"  # the accumulator's type, except on space v3 (:func:`acc_dtype`)
    trans_b: bool = True  # B is [N, K] ("NT"); else [K, N] ("NN")
    batch: int = 0  # extent of a leading batch axis of A, B and C (0: none)
    block: str = "C"  # name of the matmul block
    epilogue: str | None = None  # block copying the matmul result into the output layout
    epilogue_map: Callable | None = None  # its iterators -> (i, j) of the matmul (row-major)
    space: str = DEFAULT_SPACE
    b_dtype: str | None = None  # B's element type where it is not in_dtype (A's)
    sm_count: int | None = None  # the target's SMs: space v3's grid (None: hl.DEFAULT_SM_COUNT)
    fuse: Any = None  # space v3's fused epilogue (_fuse.Fuse: bias, activation), or None
    scale_block: int = 0  # fp8 block scales' K block (128: BLOCK_FP8_PAIRS), 0 without
    #: the operator's names of the GEMM's A, B and C tensors (space v3's kernel parameters, bound
    #: by name): a GEMV's are X, A, Y
    operands: tuple[str, str, str] = ("A", "B", "C")

    @property
    def acc_bytes(self) -> int:
        return 4 if self.acc_dtype == "float32" else 2


def vendor_matmul(op, fn, a, b, what: str):
    """cuBLAS as users call it on fp16 or bf16 operands (``fn`` is torch.mm or torch.bmm):
    fp32 output where the workload has it and torch offers ``out_dtype``, else output in the
    operands' type. Sets ``op.reference_name`` to what ran."""
    import torch

    ins = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(a.dtype, str(a.dtype))
    if op.out_dtype == "float32":
        try:
            out = fn(a, b, out_dtype=torch.float32)
            op.reference_name = f"{what}(out_dtype=float32) (cuBLAS, {ins} in, fp32 out)"
            return out
        except (TypeError, NotImplementedError):  # older torch; or a CPU tensor (tests)
            op.reference_name = f"{what} (cuBLAS, {ins} in and out; no out_dtype here)"
    else:
        op.reference_name = f"{what} (cuBLAS, {ins} in and out)"
    return fn(a, b)


# ------------------------------------------------------------------------------------ space


def vec_constraint(name: str, doc: str, extents: Sequence[int]) -> Constraint:
    """The fetch's vector width must divide every extent in ``extents``: the lengths of the
    contiguous, vector-aligned runs the operands are read in (rows of A and B for a GEMM, runs of
    input channels for an implicit-GEMM convolution). A vector across a run's end would be a
    misaligned or out-of-bounds vector access."""
    ext = tuple(int(e) for e in extents)
    return Constraint(name, doc, lambda c: np.logical_and.reduce([e % c["vec"] == 0 for e in ext]))


# Known constraints both space generations have, on derived columns both compute (``threads``,
# ``smem_bytes``, ``static_smem_bytes``, ``staged``); each space words the shared-memory ones for
# what its tiles put where.


def threads_constraint() -> Constraint:
    return Constraint("threads_le_1024", "32 x warps per block <= 1024",
                      lambda c: c["threads"] <= THREAD_LIMIT)


def shared_memory_constraint(doc: str) -> Constraint:
    """All of a block's shared memory (``smem_bytes``) fits :data:`SMEM_LIMIT`."""
    return Constraint("shared_memory_le_227KB", doc, lambda c: c["smem_bytes"] <= SMEM_LIMIT)


def static_shared_memory_constraint(doc: str) -> Constraint:
    """A block's static shared memory (``static_smem_bytes``) fits :data:`STATIC_SMEM_LIMIT`."""
    return Constraint("static_shared_memory_le_48KB", doc,
                      lambda c: c["static_smem_bytes"] <= STATIC_SMEM_LIMIT)


def out_vec_constraint(N: int) -> Constraint:
    """The staged write-back's vectors (``out_vec``) stay inside rows of C."""
    return Constraint("out_vec_divides_n", f"store vectors stay inside rows of C (N={N})",
                      lambda c: ~c["staged"] | (N % c["out_vec"] == 0))


def direct_writeback_constraint(spec: MatmulSpec, doc: str, m: str, n: str) -> Constraint:
    """Without the staging tile, M and N are whole multiples of the Tensor Core tile (derived
    columns ``m`` and ``n``): the direct stores have no padded edge to skip."""
    M, N = spec.M, spec.N
    return Constraint("direct_writeback_unpadded", doc,
                      lambda c: c["staged"] | ((M % c[m] == 0) & (N % c[n] == 0)))


def check_size(spec: MatmulSpec, op: str) -> None:
    """Bounds of the matmul itself, checked before its space is built (a convolution's M is a
    product of extents, so each extent being bounded does not bound it): its operands fit the
    kernels' 32-bit indices, and it has more than one output element per batch (TVM drops the
    unit loops of a 1 x 1 output and no schedule of either space applies)."""
    b = max(spec.batch, 1)
    for name, shape in (("the matmul's A", (b, spec.M, spec.K)),
                        ("the matmul's B", (b, spec.N, spec.K)),
                        ("the matmul's C", (b, spec.M, spec.N))):
        check_tensor(op, name, shape[1:] if not spec.batch else shape)
    if spec.M * spec.N < 2:
        raise WorkloadError(f"{op}: the matmul is M = {spec.M} x N = {spec.N}: one output element "
                            "per batch, which the Tensor Core schedules cannot tile (TVM drops "
                            "its unit loops); at least one of M, N must be >= 2")


def prepare(sch, spec: MatmulSpec, m: int, n: int, k: int):
    """The first steps of both schedules: view the output as the matmul's [M, N] (when the
    operator has an epilogue), pad the einsum to whole (m, n, k) Tensor Core tiles and make one
    such tile a block of its own (what the intrinsics replace). Returns the matmul block, its
    batch loop (or None), its (i, j, k) loops over tiles, the tile block and whether M or N was
    padded."""
    if spec.epilogue is not None:
        # The output is a row-major reshape of C: view it as C's [M, N] so that the epilogue
        # becomes a plain copy, which the write-back absorbs.
        from tvm.tirx import IndexMap

        iters = sch.get(sch.get_sblock(spec.epilogue)).iter_vars
        view = IndexMap.from_func(spec.epilogue_map, ndim=len(iters),
                                  index_dtype=str(iters[0].var.ty))
        sch.transform_layout(spec.epilogue, ("write", 0), view)
        sch.transform_block_layout(spec.epilogue, view)
    blk = sch.get_sblock(spec.block)
    padded_mn = bool(spec.M % m or spec.N % n)
    if padded_mn or spec.K % k:
        sch.pad_einsum(blk, ([1] if spec.batch else []) + [m, n, k])
    loops = sch.get_loops(blk)
    io, ii = sch.split(loops[-3], [None, m])
    jo, ji = sch.split(loops[-2], [None, n])
    ko, ki = sch.split(loops[-1], [None, k])
    sch.reorder(io, jo, ko, ii, ji, ki)
    tile = sch.blockize(ii)  # one Tensor Core tile per block instance
    return blk, (loops[0] if spec.batch else None), (io, jo, ko), tile, padded_mn


def tile_dims(shapes: dict[str, tuple[int, int, int]], axis: int):
    """A column function: extent ``axis`` (0: m, 1: n, 2: k) of each configuration's Tensor
    Core tile, looked up by the categorical knob that names it in ``shapes``."""
    names = list(shapes)
    dims = np.array([shapes[s][axis] for s in names], dtype=np.int64)
    return lambda col: np.select([col == s for s in names], dims, 0)


# ------------------------------------------------------------------ shared schedule steps


def spread(sch, loop, warps: int | None, vec: int) -> None:
    """Split a flat copy loop over the thread block: [rest, warps (threadIdx.y), 32 lanes
    (threadIdx.x), ``vec`` elements (vectorised)]; ``warps=None`` for a copy by one warp."""
    if warps is None:
        _, tx, v = sch.split(loop, [None, 32, vec])
    else:
        _, ty, tx, v = sch.split(loop, [None, warps, 32, vec])
        sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)


def write_back(sch, spec: MatmulSpec, tile, *, staged: bool, padded_mn: bool, acc_scope: str,
               stage_scope: str, warp_loop, stage_at):
    """The accumulators' way to C: a fragment block in ``acc_scope`` under ``warp_loop`` and, when
    ``staged``, a staging tile in ``stage_scope`` under ``stage_at`` (pad_einsum's C_pad when M
    or N was padded: its consumer slices to C); the operator's epilogue is inlined into the block
    that then writes C to global memory. Returns the fragment block and the staging block (None
    when not staged)."""
    stage_out = None
    if staged:
        if padded_mn:
            sch.set_scope(tile, 0, stage_scope)
            stage_out = sch.get_sblock(f"{spec.block}_pad")
        else:
            stage_out = sch.cache_write(tile, 0, stage_scope)
    acc_frag = sch.cache_write(tile, 0, acc_scope)
    if spec.epilogue is not None:
        sch.reverse_compute_inline(spec.epilogue)
    sch.reverse_compute_at(acc_frag, warp_loop)
    if stage_out is not None:
        sch.reverse_compute_at(stage_out, stage_at)
    return acc_frag, stage_out


def fetch(sch, block, idx: int, scope: str, at, warps: int, vec: int):
    """Operand ``idx`` of ``block`` staged in ``scope`` under loop ``at``, copied cooperatively;
    returns the copy block and the width of its rows."""
    stage = sch.cache_read(block, idx, scope)
    sch.compute_at(stage, at)
    rows, cols = sch.get_loops(stage)[-2:]
    row_width = int(sch.get(cols).extent)
    spread(sch, sch.fuse(rows, cols), warps, vec)
    return stage, row_width


def inline_producers(sch, stage) -> None:
    """pad_einsum's zero padding, and whatever produces the operand (a gather, a reshape),
    become index arithmetic of the cooperative copy ``stage``."""
    producers = list(sch.get_producers(stage))
    while producers:
        p = producers.pop()
        upstream = list(sch.get_producers(p))
        sch.compute_inline(p)
        producers.extend(upstream)


def tile2(sch, block, r: int, s: int):
    """Split the last two loops of ``block`` into (r, s) tiles, tiles outermost; returns the
    inner loop of the first axis (where a tile's intrinsic is tensorized)."""
    x, y = sch.get_loops(block)[-2:]
    x0, x1 = sch.split(x, [None, r])
    y0, y1 = sch.split(y, [None, s])
    sch.reorder(x0, y0, x1, y1)
    return x1


def copy_loop(sch, block, at):
    """The loops of ``block`` below loop ``at``, fused: two, or one where the tile has a single
    real row (M = 1: the padding rows are never copied) or column."""
    loops = sch.get_loops(block)
    ref = sch.get_sref(at)
    depth = next(n for n, lp in enumerate(loops) if sch.get_sref(lp).same_as(ref))
    inner = loops[depth + 1:]
    return sch.fuse(*inner) if len(inner) > 1 else inner[0]
