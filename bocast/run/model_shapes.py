"""A torch model's matmul and convolution shapes from one forward pass (:func:`shapes_of`,
``bocast shapes MODULE:FN``), as the workloads of a shapes file (:mod:`bocast.run.shapes_file`) that
``bocast tune --shapes FILE`` tunes.

The pass runs under a :class:`torch.utils._python_dispatch.TorchDispatchMode`, which sees every
ATen call below autograd, after ``nn.Linear``, ``matmul`` and ``conv2d`` have been lowered to
the calls that do the work: ``mm``/``addmm`` (gemm M,N,K: a linear layer on a batch of tokens is
one GEMM with M = the tokens; an ``addmm`` adding a length-N vector, as ``nn.Linear`` with a bias
calls it, is the GEMM with ``fuse: bias``, the bias added in its epilogue, where bocast takes
that workload, else the plain GEMM, saying why in :attr:`ModelShapes.unfused`),
``bmm``/``baddbmm`` (bmm B,M,N,K), ``convolution`` (conv1d,
conv2d, conv2d_dilated, conv3d; conv2d_transpose). The layout is read from the right operand's
strides (NT: a transposed view of an [N, K] weight, as ``nn.Linear`` passes it; NN: [K, N] in
rows). The dtype is the inputs' (float16: fp16:fp16, bfloat16: bf16:bf16; float32: fp16:fp32, as
Tensor Cores take half inputs). Each distinct workload is listed once, in the order first seen,
with ``count`` (calls in the pass) and ``name`` (the modules that called it, their layer numbers
written ``*``). Calls bocast has no operator for (a grouped convolution, uneven strides, a fused
attention kernel, which never reaches ``bmm``) are listed in :attr:`ModelShapes.skipped`.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bocast.errors import InputError
from bocast.run.shapes_file import Shape, write

#: the tensor dtype's name -> bocast's dtype (input:output)
DTYPES = {"float16": "fp16:fp16", "bfloat16": "bf16:bf16", "float32": "fp16:fp32"}


@dataclass
class ModelShapes:
    """The workloads of one forward pass (:func:`shapes_of`), de-duplicated with counts."""

    entries: list[Shape]
    skipped: list[str] = field(default_factory=list)  # "what (n calls): why"
    #: biased GEMMs listed as the plain GEMM: "what fuse=bias (n calls): why not fused"
    unfused: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Shape]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def write(self, path: str) -> None:
        """Write the shapes file (CSV or YAML by the extension) that ``bocast tune --shapes``
        reads."""
        write(path, self.entries)


def shapes_of(model: Any, *inputs: Any, **kwargs: Any) -> ModelShapes:
    """Run ``model(*inputs, **kwargs)`` once (no gradients) and list its matmul and convolution
    workloads (see the module docstring). Runs where the model and inputs are (the CPU will
    do: only the shapes matter)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: collections.Counter[tuple] = collections.Counter()
    names: dict[tuple, list[str]] = {}
    skipped: collections.Counter[str] = collections.Counter()
    stack: list[str] = []

    class Listen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            got = _workload(str(func.overloadpacket.__name__), args, kwargs or {})
            if isinstance(got, str):
                skipped[got] += 1
            elif got is not None:
                calls[got] += 1
                where = names.setdefault(got, [])
                if stack and stack[-1] not in where:
                    where.append(stack[-1])
            return func(*args, **(kwargs or {}))

    hooks = []
    for qualified, module in (model.named_modules() if isinstance(model, torch.nn.Module)
                              else []):
        if qualified:
            label = re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", qualified)  # layers.3.q -> layers.*.q
            hooks.append(module.register_forward_pre_hook(
                lambda m, a, label=label: stack.append(label)))
            hooks.append(module.register_forward_hook(_pop(stack)))
    try:
        with torch.no_grad(), Listen():
            model(*inputs, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    entries, more, unfused = _checked(calls, names)
    return ModelShapes(entries, [f"{what} ({n} calls)" for what, n in skipped.items()] + more,
                       unfused)


def _pop(stack: list[str]):
    def hook(module, args, out) -> None:  # None: the module's output stays its own
        stack.pop()
    return hook


def _workload(name: str, args: tuple, kwargs: dict | None = None) -> tuple | str | None:
    """(op, shape, dtype, layout, fuse) of one ATen call; a line saying why where bocast has no
    operator for it; None for a call that is not a matmul or a convolution."""
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = args[-2:] if name in ("mm", "bmm") else args[1:3]
        dtype = DTYPES.get(str(a.dtype).replace("torch.", ""))
        if dtype is None:
            return f"{name} of {a.dtype}: no bocast dtype"
        layout = "NT" if b.stride(-2) == 1 and b.shape[-2] > 1 else "NN"
        if name in ("mm", "addmm"):
            (m, k), n = a.shape, b.shape[1]
            fuse = "bias" if name == "addmm" and _is_bias(args, kwargs or {}, n) else None
            return ("gemm", (m, n, k), dtype, layout, fuse)
        (batch, m, k), n = a.shape, b.shape[2]
        return ("bmm", (batch, m, n, k), dtype, layout, None)
    if name != "convolution":
        return None
    x, w, _, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    dims = w.dim() - 2
    dtype = DTYPES.get(str(x.dtype).replace("torch.", ""))
    what = f"conv{dims}d {tuple(x.shape)} * {tuple(w.shape)}"
    if dtype is None:
        return f"{what} of {x.dtype}: no bocast dtype"
    if groups != 1:
        return f"{what} groups={groups}: grouped convolutions have no bocast operator"
    if len({*stride}) > 1 or len({*padding}) > 1 or len({*dilation}) > 1 \
            or len({*output_padding}) > 1:
        return f"{what}: uneven stride, padding or dilation (bocast takes one of each)"
    s, p, d, o = stride[0], padding[0], dilation[0], output_padding[0]
    n, c, *space = x.shape
    if transposed:
        if dims != 2:
            return f"{what}: transposed conv{dims}d has no bocast operator"
        return ("conv2d_transpose", (n, *space, c, w.shape[1], *w.shape[2:], s, p, d, o),
                dtype, None, None)
    op = {1: "conv1d", 2: "conv2d_dilated" if d >= 2 else "conv2d", 3: "conv3d"}.get(dims)
    if op is None:
        return f"{what}: no bocast operator"
    return (op, (n, *space, c, w.shape[0], *w.shape[2:], s, p, d), dtype, None, None)


def _is_bias(args: tuple, kwargs: dict, n: int) -> bool:
    """Whether ``addmm(input, a, b)`` is ``a @ b`` plus a bias: ``input`` a vector of the N
    output columns ([N], or [1, N]; nn.Linear's), ``beta`` and ``alpha`` 1. A full [M, N]
    ``input`` is a sum of two matrices, which no fused epilogue of bocast's computes."""
    beta, alpha = (kwargs.get(k, args[i] if len(args) > i else 1) for k, i in (("beta", 3),
                                                                                ("alpha", 4)))
    bias = args[0]
    shape = tuple(getattr(bias, "shape", ()))
    return beta == 1 and alpha == 1 and shape in ((n,), (1, n))


def _checked(calls: collections.Counter,
             names: dict) -> tuple[list[Shape], list[str], list[str]]:
    """The entries bocast's operators take (the space auto picks), why the others not, and
    the biased GEMMs bocast cannot fuse (no space of it takes that workload: the NN layout),
    each listed as the plain GEMM, and why."""
    from bocast.space.operators.operator import make_named

    listed: dict[tuple, tuple[int, list[str]]] = {}  # workload -> (calls, modules), in order
    skipped, unfused = [], []
    for key, n in calls.items():
        op, shape, dtype, layout, fuse = key
        dims = tuple(int(x) for x in shape)
        options = {"dtype": dtype, **({"layout": layout} if layout else {})}
        what = f"{op} {'x'.join(map(str, dims))} {dtype}"
        try:
            if fuse is not None:
                try:
                    make_named(op, dims, **options, fuse=fuse)
                except InputError as e:
                    unfused.append(f"{what} fuse={fuse} ({n} calls): {e}")
                    fuse = None
            make_named(op, dims, **options)
        except InputError as e:
            skipped.append(f"{what} ({n} calls): {e}")
            continue
        # an unfused biased GEMM joins the plain GEMM of its shape, if the model has one too
        count, where = listed.setdefault((op, dims, dtype, layout, fuse), (0, []))
        listed[(op, dims, dtype, layout, fuse)] = (
            count + n, where + [m for m in names.get(key, []) if m not in where])
    entries = [Shape(op, dims, dtype, layout, n, " ".join(where) or None, fuse=fuse)
               for (op, dims, dtype, layout, fuse), (n, where) in listed.items()]
    return entries, skipped, unfused
