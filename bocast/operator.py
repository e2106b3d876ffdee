"""The contract between the engine and an operator space file in ``spaces/``.

An operator file defines one subclass of :class:`Operator` decorated with :func:`register`. The
engine only talks to that interface, so adding an operator is adding one file to ``spaces/``.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from bocast.space import Config, Space

_REGISTRY: dict[str, type["Operator"]] = {}

#: Input/output element types the Tensor Core spaces accept, with the tolerance of the relative
#: error ||out - ref|| / ||ref|| used by correctness checks (fp16 inputs, fp32 reference).
DTYPES = {"float16": 2, "float32": 4}
TOLERANCE = {"float32": 1e-3, "float16": 5e-3}


class WorkloadError(ValueError):
    """A workload definition (shape, dtype, layout) that an operator cannot accept."""


@dataclass(frozen=True)
class TensorSpec:
    """One kernel argument, in the order the kernel takes them."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str  # "input" | "output"


class Operator(ABC):
    """A tensor operator with its schedule space.

    Subclasses set ``name``, ``shape_help`` and ``default_shape`` and implement the abstract
    methods. ``workload`` is a JSON-able dict that identifies the task (it is stored with every
    record, and a record store refuses rows of another workload).
    """

    name: ClassVar[str]
    shape_help: ClassVar[str]
    default_shape: ClassVar[tuple[int, ...] | None] = None

    workload: dict[str, Any]
    space: Space

    @classmethod
    @abstractmethod
    def from_args(cls, shape: tuple[int, ...] | None = None, **options: Any) -> "Operator":
        """Build from a CLI-style shape tuple and options; raise WorkloadError naming the problem."""

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
        """The exact result for torch inputs, computed in float32 (cuBLAS/cuDNN through torch)."""

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
        out = [t for t in self.tensors() if t.role == "output"][0]
        return TOLERANCE[out.dtype]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workload})"


def register(cls: type[Operator]) -> type[Operator]:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"operator {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    import spaces  # the package of operator files

    for mod in pkgutil.iter_modules(spaces.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"spaces.{mod.name}")


def operators() -> dict[str, type[Operator]]:
    _discover()
    return dict(sorted(_REGISTRY.items()))


def get_operator(name: str) -> type[Operator]:
    ops = operators()
    if name not in ops:
        raise WorkloadError(f"unknown operator {name!r}; known: {', '.join(ops)}")
    return ops[name]


def canonical_workload(workload: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded workload (of a store or a dataset) as this version spells it: those recorded
    before schedule spaces had versions carry no ``space``; they are space ``v1``. (A workload
    written in a configuration without ``space`` gets the operator's default, v2.)"""
    return {"space": "v1", **workload}


def from_workload(workload: Mapping[str, Any]) -> Operator:
    """Rebuild an operator from a ``workload`` dict (an operator's, or a configuration's)."""
    w = dict(workload)
    op = get_operator(w.pop("op"))
    shape = tuple(w.pop("shape"))
    return op.from_args(shape, **w)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.replace("x", ",").split(",") if x.strip())
    except ValueError:
        raise WorkloadError(f"shape {text!r} is not a comma-separated list of integers") from None
    if not dims:
        raise WorkloadError("empty shape")
    return dims
