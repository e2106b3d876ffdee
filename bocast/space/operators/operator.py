"""The contract between the engine and an operator space file in ``bocast/space/operators/``.

An operator file defines one subclass of :class:`Operator` decorated with :func:`register`. The
engine only talks to that interface, so adding an operator is adding one file to
``bocast/space/operators/``.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from bocast.errors import InputError
from bocast.registry import load_plugins, lookup
from bocast.space.knobs import MAX_EXTENT, Config
from bocast.space.space import Space

_REGISTRY: dict[str, type[Operator]] = {}

#: Input/output element types the Tensor Core spaces accept, with their size in bytes, and the
#: tolerance of the relative error ||out - ref|| / ||ref|| used by correctness checks, by the
#: output's type (the reference computes from the same fp16 or bf16 inputs, so what is left is
#: the kernel's accumulation and the output's rounding: an fp32 output is accumulated in fp32;
#: an fp16 one may be accumulated in fp16 (space v2); a bf16 one is rounded to bf16's 8-bit
#: significand, a relative RMS error near 2e-3 alone). docs/operators.md states them.
DTYPES = {"float8_e4m3fn": 1, "float8_e5m2": 1, "float16": 2, "bfloat16": 2, "float32": 4}
TOLERANCE = {"float32": 1e-3, "float16": 5e-3, "bfloat16": 1e-2}
#: fp8 operands (space v3's fp8 GEMM), whatever the output: the reference takes the same fp8
#: values, dequantized, exactly; what is left is Hopper's fp8 wgmma accumulation, which keeps
#: fewer bits than fp32 (DeepSeek-V3's report: about 14; a biased truncation that grows with
#: K, estimated near 3e-3 at K = 4096 and 1e-2 at 16384) and the output's rounding. cuBLASLt's
#: fast-accumulation mode (the reference's) has the same. experiments/device/fp8_check.sh
#: records both errors.
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
FP8_TOLERANCE = 2e-2


#: Elements of one tensor, at most: the kernels index tensors with 32-bit integers (TVM's
#: default), and the GPU's memory would not hold much more anyway (2^31 fp16 = 4 GB).
MAX_ELEMENTS = 2**31 - 1


class WorkloadError(InputError):
    """A workload definition (shape, dtype, layout) that an operator cannot accept."""


def check_tensor(op: str, name: str, shape: tuple[int, ...]) -> None:
    """Refuse a tensor of more than :data:`MAX_ELEMENTS` elements, by name and size."""
    n = math.prod(int(x) for x in shape)
    if n > MAX_ELEMENTS:
        raise WorkloadError(f"{op}: {name} {list(shape)} would have {n:,} elements; at most "
                            f"{MAX_ELEMENTS:,} (2^31 - 1: kernels index with 32-bit integers)")


@dataclass(frozen=True)
class TensorSpec:
    """One kernel argument, in the order the kernel takes them."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str  # "input" | "output"
    #: the interval an input's random values are drawn from (uniformly) by the runner; an fp8
    #: GEMM's per-tensor scales have their own, away from 1 (a kernel that skipped one would
    #: be off by 16x at least)
    values: tuple[float, float] = (-1.0, 1.0)


class Operator(ABC):
    """A tensor operator with its schedule space.

    Subclasses set ``name``, ``shape_help`` and ``default_shape`` and implement the abstract
    methods. ``workload`` is a JSON-able dict that identifies the task (it is stored with every
    record, and a record store refuses rows of another workload).
    """

    name: ClassVar[str]
    shape_help: ClassVar[str]
    default_shape: ClassVar[tuple[int, ...] | None] = None
    #: the space ``space: auto`` chose and why, "v3 (auto: ...)" (:func:`make`); None: named
    space_choice: str | None = None
    #: ``space: auto``'s rule for this operator, in words (None: no v3 rule, auto is v2)
    v3_rule: ClassVar[str | None] = None

    @classmethod
    def prefers_v3(cls, shape: tuple[int, ...]) -> bool:
        """Whether space v3 beat v2 at workloads like ``shape`` where it was measured
        (:attr:`v3_rule` in words); ``space: auto`` takes v3 where this holds and the template
        accepts the workload."""
        return False

    workload: dict[str, Any]
    space: Space

    @classmethod
    @abstractmethod
    def from_args(cls, shape: tuple[int, ...] | None = None, **options: Any) -> Operator:
        """Build from a CLI-style shape tuple and options; raise WorkloadError naming the
        problem."""

    @abstractmethod
    def prim_func(self):
        """The unscheduled TensorIR PrimFunc (arguments in ``tensors()`` order)."""

    @abstractmethod
    def apply(self, config: Config):
        """Apply a feasible configuration; returns a ``tvm.s_tir.Schedule``."""

    @abstractmethod
    def tensors(self) -> list[TensorSpec]:
        """Kernel arguments in order."""

    @abstractmethod
    def reference(self, *inputs):
        """The exact result for torch inputs, computed in float32 (cuBLAS/cuDNN through torch),
        or float64 (GEMM and bmm)."""

    @property
    @abstractmethod
    def flops(self) -> int:
        """Useful floating-point operations of one run (padding excluded)."""

    def build_options(self, config: Config) -> dict[str, Any]:
        """How to lower ``config``: ``{"pass_config": TVM pass options, "target": overrides of
        the sm_90 target's attributes}``, either may be left out (TVM's defaults)."""
        return {}

    def reference_fast(self, *inputs):
        """What the same-run vendor baseline runs (defaults to ``reference``)."""
        return self.reference(*inputs)

    @property
    def tolerance(self) -> float:
        """The relative error a correct kernel stays under: by the output's type, or fp8's
        (:data:`FP8_TOLERANCE`) where an input is fp8."""
        tensors = self.tensors()
        if any(t.dtype in FP8_DTYPES for t in tensors if t.role == "input"):
            return FP8_TOLERANCE
        return TOLERANCE[[t for t in tensors if t.role == "output"][0].dtype]

    @property
    def arithmetic_intensity(self) -> float:
        """Useful flops per byte of the operands and the result, each moved once: below the
        GPU's ridge point (peak flops over memory bandwidth) a kernel's time is its traffic."""
        moved = sum(math.prod(t.shape) * DTYPES[t.dtype] for t in self.tensors())
        return self.flops / moved

    def once_for(self, what: str, tensors, make: Callable[[], Any]) -> Any:
        """``make()``, made once for these input ``tensors`` (told apart by their storage) and
        kept on the operator under ``what``: a vendor call's one-time setup (a weight laid out,
        a choice among calls), outside what the runner times again and again on the same
        tensors."""
        key = tuple(t.data_ptr() for t in tensors)
        held = self.__dict__.setdefault("_once", {})
        if what not in held or held[what][0] != key:
            held[what] = (key, make())
        return held[what][1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workload})"


def register(cls: type[Operator]) -> type[Operator]:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"operator {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    spaces = importlib.import_module("bocast.space.operators")  # the package of operator files

    for mod in pkgutil.iter_modules(spaces.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"bocast.space.operators.{mod.name}")
    load_plugins("bocast.operators", WorkloadError)  # installed packages' own (extending.md)


def operators() -> dict[str, type[Operator]]:
    _discover()
    return dict(sorted(_REGISTRY.items()))


def get_operator(name: str) -> type[Operator]:
    return lookup(operators(), name, "operator", WorkloadError)


def canonical_workload(workload: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded workload (of a store or a dataset) as this version spells it: those recorded
    before schedule spaces had versions carry no ``space``; they are space ``v1``. (A workload
    written in a configuration without ``space`` gets the operator's default, v2.)"""
    return {"space": "v1", **workload}


def make(name: str, shape: tuple[int, ...] | None = None, **options: Any) -> Operator:
    """The operator ``name`` on ``shape`` (its default if None): the one way the CLI and the
    configurations build an operator, so every workload passes the same bounds. Every extent
    is checked by the operator's own rules (``WorkloadError``), the matmul's size before its
    space is built, and each tensor's size here."""
    op_cls = get_operator(name)
    if shape is not None:
        for x in shape:  # a cheap bound first: nothing below may loop over a huge extent
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_EXTENT:
                raise WorkloadError(f"{name}: extent {x!r} in shape {list(shape)} is not an "
                                    f"integer between 0 and {MAX_EXTENT} (2^31 - 1)")
    for key, value in options.items():
        if not isinstance(value, str) and key not in INT_OPTIONS:
            raise WorkloadError(f"{name}: {key} must be a string, got {value!r}")
    if options.get("space") == AUTO_SPACE:
        return _auto_space(name, shape, options)
    op = op_cls.from_args(shape, **options)
    for t in op.tensors():
        check_tensor(name, t.name, t.shape)
    return op


#: workload options whose value is an integer (the operator checks it), not a string: the
#: target GPU's SM count (space v3's GEMM and bmm, ``_matmul.sm_count_entry``)
INT_OPTIONS = ("sm_count",)

#: the space value that lets the workload choose its space generation (:func:`make`)
AUTO_SPACE = "auto"


def make_named(name: str, shape: tuple[int, ...] | None = None, **options: Any) -> Operator:
    """The operator a user names by ``name`` and ``shape`` (``bocast space/measure/suggest OP
    --shape``, :func:`bocast.suggest`): an unknown operator is named before its shape, and the
    space is ``auto`` unless ``options`` name one (a configuration's workload, read by
    :func:`from_workload`, keeps the operator's default, v2)."""
    get_operator(name)
    return make(name, shape, **{"space": AUTO_SPACE, **options})


#: dtypes both spaces take whose v3-against-v2 rule has not been measured: auto keeps v2
UNMEASURED_V3_DTYPES = ("fp16:fp16",)


def _auto_space(name: str, shape: tuple[int, ...] | None, options: dict[str, Any]) -> Operator:
    """``space: auto``: v3 where the operator's measured rule prefers it (``prefers_v3``) and
    the template takes the workload, else v2; the choice and its reason in ``space_choice``.
    The workload records the space chosen, so a store never holds "auto"."""
    op_cls = get_operator(name)
    full = tuple(shape) if shape is not None else op_cls.default_shape
    rule = op_cls.v3_rule
    why = f"v3 only where {rule}" if rule else "no v3 rule for this operator"
    v3_error: WorkloadError | None = None
    tried_v3 = full is not None and op_cls.prefers_v3(full)
    if tried_v3 and options.get("dtype") in UNMEASURED_V3_DTYPES:
        # v3 takes an fp16 output since bf16 came (fp32 accumulation, rounded once), v2 too
        # (fp16 accumulation): no measurement compares them yet, so the older choice stands
        tried_v3, why = False, f"v3 against v2 not measured for dtype {options['dtype']}"

    def v3(choice: str) -> Operator:
        op = make(name, shape, **{**options, "space": "v3"})
        op.space_choice = choice
        return op

    if tried_v3:
        try:
            return v3(f"v3 (auto: {rule})")
        except WorkloadError as e:
            v3_error = e
            why = f"v3 does not take this workload: {e}"
    try:
        op = make(name, shape, **{**options, "space": "v2"})
    except WorkloadError as v2_error:
        # a workload only v3 implements (a bf16 GEMM of M < 64): v3, where it takes it
        if not tried_v3:
            try:
                return v3(f"v3 (auto: v2 does not take this workload: {v2_error})")
            except WorkloadError as e:
                v3_error = e
        if v3_error is None or str(v3_error) == str(v2_error):  # one refusal (a bad dtype)
            raise v2_error from None
        raise WorkloadError(f"{v2_error} (space auto: v3 does not take this workload "
                            f"either: {v3_error})") from None
    op.space_choice = f"v2 (auto: {why})"
    return op


def on_gpu(op: Operator, sm_count: int | None) -> Operator:
    """``op`` for the GPU a live run measures on, of ``sm_count`` SMs: rebuilt with the
    workload option ``sm_count`` where its operator takes one and its workload names none (the
    operator records it where its kernels depend on it: space v3's grid and waves); ``op``
    itself otherwise, and when the count is not known (None)."""
    takes = "sm_count" in getattr(type(op), "option_names", ())
    if sm_count is None or not takes or "sm_count" in op.workload:
        return op
    choice = op.space_choice
    op = from_workload({**op.workload, "sm_count": sm_count})
    op.space_choice = choice
    return op


def from_workload(workload: Mapping[str, Any]) -> Operator:
    """Rebuild an operator from a ``workload`` dict (an operator's, or a configuration's)."""
    if not isinstance(workload, Mapping):
        raise WorkloadError(f"expected a mapping with op and shape, got {workload!r}")
    w = dict(workload)
    for key in ("op", "shape"):
        if key not in w:
            raise WorkloadError(f"{key}: missing")
    name, shape = w.pop("op"), w.pop("shape")
    if not isinstance(name, str):
        raise WorkloadError(f"op: expected the name of an operator, got {name!r}")
    if not isinstance(shape, (list, tuple)) or not shape:
        raise WorkloadError(f"shape: expected a list of integers, got {shape!r}")
    return make(name, tuple(shape), **w)


def parse_shape(text: str) -> tuple[int, ...]:
    """``--shape``: comma-separated integers (an ``x`` separates too)."""
    parts = [x.strip() for x in text.replace("x", ",").split(",")]
    if not text.strip() or not all(parts):
        raise WorkloadError(f"shape {text!r}: expected comma-separated integers, "
                            "e.g. 1024,1024,1024")
    try:
        return tuple(int(x) for x in parts)
    except ValueError:
        raise WorkloadError(f"shape {text!r} is not a comma-separated list of integers") from None
