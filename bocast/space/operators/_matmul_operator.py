"""A Tensor Core matmul operator and its space: the one place that picks the schedule
generation of a workload's ``space`` (``_generation``) and builds its knobs and constraints.

The generations, each one file: ``v3`` :mod:`._hopper_matmul` (TMA + wgmma, warp-specialized),
``v2`` :mod:`._pipelined_matmul` (cp.async pipelines, mma.sync or WMMA), ``v1``
:mod:`._wmma_matmul` (Heron's WMMA knob set). They build on :mod:`._matmul` (the matmul's
description and the schedule pieces they share); this module sits above all of them, so no
import runs back up from a generation to the operator that chooses it.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from bocast.space.knobs import Categorical, Constraint
from bocast.space.operators.operator import Operator, WorkloadError
from bocast.space.space import Space

from . import _hopper_matmul, _pipelined_matmul, _wmma_matmul
from ._matmul import GRID_Y_LIMIT, MatmulSpec, check_options, check_size, prepare

_Op = TypeVar("_Op", bound="MatmulOperator")


def _generation(spec: MatmulSpec):
    return {"v1": _wmma_matmul, "v3": _hopper_matmul}.get(spec.space, _pipelined_matmul)



def space(spec: MatmulSpec, vec: Constraint) -> Space:
    """The knobs and constraints of the spec's space generation, plus the batch binding when the
    matmul has a batch axis."""
    extra_k, extra_c = [], []
    if spec.batch and getattr(_generation(spec), "BATCH_KNOB", True):
        extra_k.append(Categorical(
            "batch_bind", ("y", "x"), doc="batch axis on blockIdx.y, or fused outermost with the "
                                          "block tiles into blockIdx.x"))
        batch = spec.batch
        extra_c.append(Constraint(
            "batch_grid_y_le_65535",
            f"batch on blockIdx.y needs batch ({batch}) <= 65535, the grid's y limit",
            lambda c: (c["batch_bind"] != "y") | (batch <= GRID_Y_LIMIT)))
    return _generation(spec).space(spec, vec, extra_k, extra_c)



class MatmulOperator(Operator):
    """An operator that runs as one Tensor Core matmul: subclasses set ``self.matmul`` (a
    :class:`MatmulSpec`) and build ``self.space`` with :meth:`matmul_space`.

    :meth:`from_args` takes a shape of exactly the extents named in ``extents`` (the
    constructor's positional arguments, in order) and the options in ``option_names``
    (``dtype``, ``layout``, ``space``, unless a subclass names others); operators whose shape
    has another syntax override it."""

    matmul: MatmulSpec
    extents: ClassVar[tuple[str, ...]]
    option_names: ClassVar[tuple[str, ...]] = ("dtype", "layout", "space")

    @classmethod
    def from_args(cls: type[_Op], shape=None, **options: Any) -> _Op:
        shape = tuple(shape) if shape is not None else cls.default_shape
        if len(shape) != len(cls.extents):
            raise WorkloadError(f"{cls.name}: shape needs {len(cls.extents)} extents "
                                f"{','.join(cls.extents)}, got {len(shape)}: {shape}")
        check_options(cls.name, options, cls.option_names)
        return cls(*shape, **options)

    def matmul_space(self, vec: Constraint) -> Space:
        check_size(self.matmul, self.name)
        return space(self.matmul, vec)

    def apply(self, config):
        gen = _generation(self.matmul)
        return gen.schedule(self.matmul, self.prim_func(), config,
                            lambda sch, m, n, k: prepare(sch, self.matmul, m, n, k))

    def build_options(self, config) -> dict[str, Any]:
        return _generation(self.matmul).build_options(config)
