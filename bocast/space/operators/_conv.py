"""Convolutions (1-D, 2-D, 3-D, dilated, transposed) as implicit GEMMs on Tensor Cores.

Layouts are channels-last: input X[N, *spatial, C], weights W[K, *kernel, C] (cuDNN's NHWC /
OHWI), output Y[N, *out, K]. The convolution is the matmul

    Y[(n, *o), k] = sum over (*r, c) of  A[(n, *o), (*r, c)] * W[k, (*r, c)]

with A the im2col gather of X (zero where a tap falls in the padding), as Heron writes its
c1d/c2d/c3d/t2d/dil operators. ``prim_func()`` states it in TE as four blocks: ``A`` (the gather,
with padding, stride and dilation in its index expressions), ``B`` (the weights seen as [K, R*S*C]),
the matmul ``C`` and ``Y`` (C seen as NHWC). The shared schedules (``_matmul``) inlines A and B
into the shared-memory fetch and writes Y straight from the accumulators, so the kernel reads X and
W and writes Y and nothing else. The reduction runs over (*r, c) with c innermost, so a fetch
vector reads consecutive channels of one tap: contiguous and aligned when C is a multiple of its
width (constraint ``vec_divides_c``), and one padding test covers the whole vector.

A transposed convolution is the direct convolution of the stride-dilated input: output position
o takes input i through tap r where ``i * stride = o + pad - r * dilation``; taps that land between
input pixels (not a multiple of the stride) or outside the input read zero. Its weights are
W[K, *kernel, C] as well, i.e. torch's [C, K, *kernel] transposed to channels-last, and need no
flip in this form.

``flops`` counts the useful multiply-adds only: taps that read padding (or, transposed, the zeros
between input pixels) are excluded; the tensor-core kernel still performs them.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from bocast.space.operators.operator import TensorSpec, WorkloadError

from . import _hopper_conv, _hopper_tconv
from . import _hopper_layout as hl
from . import _matmul as mm
from . import _matmul_operator as mo


class Conv(mo.MatmulOperator):
    """An N-d convolution; subclasses set the class attributes and register."""

    spatial: ClassVar[tuple[str, ...]]  # names of the input's spatial extents, e.g. ("H", "W")
    kernel: ClassVar[tuple[str, ...]]  # names of the kernel's extents, e.g. ("R", "S")
    transposed: ClassVar[bool] = False
    min_dilation: ClassVar[int] = 1
    torch_fn: ClassVar[str]  # torch.nn.functional function of the reference
    #: space v3 (the Hopper TMA + wgmma template, ``_hopper_conv``) implements this operator
    hopper_v3: ClassVar[bool] = False
    option_names: ClassVar[tuple[str, ...]] = ("dtype", "space", "sm_count")

    def __init__(self, shape: tuple[int, ...], *, dtype: str = "fp16:fp32",
                 space: str = mm.DEFAULT_SPACE, sm_count: int | None = None):
        name = self.name
        fields = self.fields()
        if not self.min_fields() <= len(shape) <= len(fields):
            raise WorkloadError(f"{name}: shape needs {self.min_fields()} to {len(fields)} extents "
                                f"{','.join(fields)}, got {len(shape)}: {tuple(shape)}")
        values = dict(zip(fields, shape))
        for k, v in values.items():
            mm.check_extents(name, (k,), (v,), minimum=0 if k in ("pad", "output_padding") else 1)
        for k, v in {"stride": 1, "pad": 0, "dilation": 1, "output_padding": 0}.items():
            if k in fields:
                values.setdefault(k, v)
        if values["dilation"] < self.min_dilation:
            raise WorkloadError(f"{name}: dilation must be >= {self.min_dilation}, got "
                                f"{values['dilation']} (use conv2d for an undilated convolution)")
        # v1/v2: fp16 in; v3 (the direct convolutions): also bf16 in, fp32 accumulation, an
        # fp32 or 16-bit output (_hopper_conv.DTYPES: v3's dtypes but fp8, which is GEMM's)
        # (the transposed convolution's v3 kernel, _hopper_tconv, is fp16:fp32 only: its
        # dtypes are v1/v2's)
        self.in_dtype, self.out_dtype = mm.dtype_pair(
            name, dtype, space,
            mm.SPACES if self.hopper_v3 and not self.transposed else ("v1", "v2"))
        self.N, self.C, self.K = (int(values[k]) for k in ("N", "C", "K"))
        self.size = tuple(int(values[k]) for k in self.spatial)
        self.ksize = tuple(int(values[k]) for k in self.kernel)
        self.stride, self.pad, self.dilation = (int(values[k])
                                                for k in ("stride", "pad", "dilation"))
        self.output_padding = int(values.get("output_padding", 0))
        if self.transposed and self.output_padding >= max(self.stride, self.dilation):
            raise WorkloadError(f"{name}: output_padding ({self.output_padding}) must be smaller "
                                f"than stride or dilation ({max(self.stride, self.dilation)})")
        self.out = tuple(self._out_extent(n, r) for n, r in zip(self.size, self.ksize))
        if min(self.out) < 1:
            raise WorkloadError(f"{name}: the output would be empty ({self.out}): the dilated "
                                f"kernel is larger than the padded input")
        # the target's SMs: space v3's persistent grid and waves (recorded as GEMM's are)
        target = hl.sm_count_entry(name, space, sm_count)
        self.workload = {"op": name, "shape": [int(values[k]) for k in fields], "dtype": dtype,
                         "space": mm.space_version(name, space), **target}
        self.matmul = mm.MatmulSpec(
            self.N * math.prod(self.out), self.K, math.prod(self.ksize) * self.C,
            self.in_dtype, mm.acc_dtype(space, self.out_dtype), out_dtype=self.out_dtype,
            trans_b=True, epilogue="Y",
            epilogue_map=lambda n, *rest: (self._ravel(n, rest[:-1]), rest[-1]), space=space,
            sm_count=target.get("sm_count", hl.DEFAULT_SM_COUNT))
        self.space = self.matmul_space(mm.vec_constraint(
            "vec_divides_c", f"fetch vectors stay inside one tap's run of C={self.C} input "
                             f"channels (contiguous and aligned in X and W)", (self.C,)))

    # ------------------------------------------------------------------ space v3 (Hopper)
    def matmul_space(self, vec):
        if self.matmul.space != "v3":
            return super().matmul_space(vec)
        if not self.hopper_v3:
            raise WorkloadError(f"{self.name}: space v3 (Hopper TMA + wgmma) does not "
                                "implement this operator; use space v2")
        mm.check_size(self.matmul, self.name)
        return self._v3().space(self)

    def _v3(self):
        """Space v3's module: the phase decomposition for a transposed convolution, else the
        implicit GEMM of the direct ones."""
        return _hopper_tconv if self.transposed else _hopper_conv

    def apply(self, config):
        if self.matmul.space == "v3":
            return self._v3().schedule(self, config)
        return super().apply(config)

    def build_options(self, config):
        if self.matmul.space == "v3":
            return self._v3().build_options(config)
        return super().build_options(config)

    # ------------------------------------------------------------------------- shape syntax
    @classmethod
    def fields(cls) -> tuple[str, ...]:
        tail = ("stride", "pad", "dilation") + (("output_padding",) if cls.transposed else ())
        return ("N", *cls.spatial, "C", "K", *cls.kernel, *tail)

    @classmethod
    def min_fields(cls) -> int:
        return 3 + len(cls.spatial) + len(cls.kernel)

    @classmethod
    def syntax(cls) -> str:
        f = cls.fields()
        return f"{','.join(f[:cls.min_fields()])}[,{','.join(f[cls.min_fields():])}]"

    @classmethod
    def from_args(cls, shape=None, **options: Any) -> Conv:
        shape = tuple(shape) if shape is not None else cls.default_shape
        mm.check_options(cls.name, options, cls.option_names)
        return cls(shape, **options)

    def _out_extent(self, n: int, r: int) -> int:
        s, p, d = self.stride, self.pad, self.dilation
        if self.transposed:
            return (n - 1) * s - 2 * p + d * (r - 1) + self.output_padding + 1
        return (n + 2 * p - d * (r - 1) - 1) // s + 1

    def _source(self, o, r, n: int):
        """Index into an input extent ``n`` read by output index ``o`` through tap ``r`` (numpy
        arrays or TE expressions), and the conditions under which it is a real input element
        rather than padding."""
        s, p, d = self.stride, self.pad, self.dilation
        if not self.transposed:
            i = o * s - p + r * d
            return i, [i >= 0, i < n]
        t = o + p - r * d
        return _floordiv(t, s), [t >= 0, _floormod(t, s) == 0, t < s * n]

    def _ravel(self, n, o):
        i = n
        for extent, x in zip(self.out, o):
            i = i * extent + x
        return i

    # ------------------------------------------------------------------------------ workload
    @property
    def flops(self) -> int:
        taps = 1
        for n, r, o in zip(self.size, self.ksize, self.out):
            oo, rr = np.meshgrid(np.arange(o), np.arange(r), indexing="ij")
            _, conds = self._source(oo, rr, n)
            taps *= int(np.logical_and.reduce(conds).sum())  # (output, tap) pairs reading input
        return 2 * self.N * self.C * self.K * taps

    def tensors(self) -> list[TensorSpec]:
        return [TensorSpec("X", (self.N, *self.size, self.C), self.in_dtype, "input"),
                TensorSpec("W", (self.K, *self.ksize, self.C), self.in_dtype, "input"),
                TensorSpec("Y", (self.N, *self.out, self.K), self.out_dtype, "output")]

    def _torch_args(self, x, w):
        """Channels-last tensors as the channels-first views torch's convolutions take (no copy:
        cuDNN runs its NHWC kernels on them), and the keyword arguments."""
        dims = len(self.spatial)
        first = (0, dims + 1, *range(1, dims + 1))
        x = x.permute(*first)
        # torch's transposed convolution takes [C, K, *kernel]; the direct one [K, C, *kernel]
        w = w.permute(dims + 1, 0, *range(1, dims + 1)) if self.transposed else w.permute(*first)
        kw = dict(stride=self.stride, padding=self.pad, dilation=self.dilation)
        if self.transposed:
            kw["output_padding"] = self.output_padding
        return x, w, kw

    def _channels_last(self, y):
        dims = len(self.spatial)
        return y.permute(0, *range(2, dims + 2), 1)

    def reference(self, x, w):
        """The exact convolution of the inputs in float64 (every dtype's check, as GEMM's:
        each 16-bit product and the sums are exact there to far below any tolerance)."""
        import torch

        fn = getattr(torch.nn.functional, self.torch_fn)
        x, w, kw = self._torch_args(x.double(), w.double())
        return self._channels_last(fn(x, w, **kw))

    @property
    def reference_call(self) -> str:
        """The vendor call :meth:`reference_fast` makes, in words."""
        return f"torch.nn.functional.{self.torch_fn}"

    @property
    def reference_name(self) -> str:
        # torch's convolutions have no out_dtype: cuDNN's output is in the inputs' type, an
        # fp32 workload's too (the faster bar: it writes half the bytes of the kernel's Y)
        ins = {"float16": "fp16", "bfloat16": "bf16"}[self.in_dtype]
        return f"{self.reference_call} (cuDNN, {ins} channels-last, {ins} out)"

    def reference_fast(self, x, w):
        """The vendor's convolution as users call it, on the same channels-last inputs in
        their type (fp16 or bf16), its output in that type."""
        import torch

        x, w, kw = self._torch_args(x, w)
        return self._channels_last(getattr(torch.nn.functional, self.torch_fn)(x, w, **kw))

    def prim_func(self):
        import tvm
        from tvm import te

        # v3's 16-bit output: fp32 sums, rounded once as Y is written (v1/v2: acc is out)
        dims, C, acc, out = len(self.spatial), self.C, self.matmul.acc_dtype, self.out_dtype
        spec = self.matmul
        X = te.placeholder((self.N, *self.size, C), self.in_dtype, name="X")
        W = te.placeholder((self.K, *self.ksize, C), self.in_dtype, name="W")

        def unravel(x, extents):
            out = []
            for e in reversed(extents):
                out.append(x % e)
                x = x // e
            return [x, *reversed(out)]  # leading quotient first

        def gather(i, kr):
            n, *o = unravel(i, self.out)
            *r, c = unravel(kr, (*self.ksize, C))[1:]
            idx, conds = [], []
            for dim in range(dims):
                x, cond = self._source(o[dim], r[dim], self.size[dim])
                idx.append(x)
                conds += cond
            at = (n, *idx, c)  # X[n, *idx, c] would need Python 3.11
            return te.if_then_else(tvm.tirx.all(*conds), X[at],
                                   tvm.tirx.const(0, self.in_dtype))

        A = te.compute((spec.M, spec.K), gather, name="A")
        B = te.compute((self.K, spec.K),
                       lambda j, kr: W[tuple([j, *unravel(kr, (*self.ksize, C))[1:]])],
                       name="B")
        k = te.reduce_axis((0, spec.K), name="k")
        Cm = te.compute((spec.M, self.K), lambda i, j: te.sum(
            A[i, k].astype(acc) * B[j, k].astype(acc), axis=k), name="C")
        Y = te.compute((self.N, *self.out, self.K),
                       lambda n, *rest: Cm[self._ravel(n, rest[:-1]), rest[-1]].astype(out),
                       name="Y")
        return te.create_prim_func([X, W, Y])


# Floor division and modulo for numpy arrays (flops) and TE expressions (prim_func) alike.
def _floordiv(a, b):
    if isinstance(a, (np.ndarray, int, np.integer)):
        return np.floor_divide(a, b)
    import tvm

    return tvm.tirx.floordiv(a, b)


def _floormod(a, b):
    if isinstance(a, (np.ndarray, int, np.integer)):
        return np.mod(a, b)
    import tvm

    return tvm.tirx.floormod(a, b)
