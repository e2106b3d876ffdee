"""Builder: configuration -> TensorIR schedule -> CUDA source -> cubin, in parallel, with limits.

Each build goes through three stages, and a failure names the stage:

- ``apply``: the operator's schedule function; a refusal is ``schedule_error`` with the TensorIR
  primitive that refused (``compute-at``, ``tensorize``, ...);
- ``lower``: ``tvm.compile`` to CUDA source; a failure is ``build_error`` (stage ``lower``);
- ``compile``: nvcc to an sm_90 cubin; a failure is ``build_error`` (stage ``compile``) with the
  tail of nvcc's message; the resource report (registers, shared memory, spills) is kept.

A build over its time limit, or one that crashes its worker process, costs only itself.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bocast.knobs import Config
from bocast.measure.nvcc import compile_cubin, why_no_compiler
from bocast.measure.pool import TaskFailure, TimedPool
from bocast.measure.status import Status, tail
from bocast.operator import Operator, from_workload
from bocast.space import Space
from bocast.tensorcore import lower, lower_tirx, source_only


@dataclass
class BuildResult:
    key: str
    status: Status
    stage: str | None = None       # apply | lower | compile (where it failed)
    primitive: str | None = None   # the schedule primitive that refused
    error: str = ""
    kernel: str = ""
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    args: tuple[str, ...] = ()
    features: dict[str, float] = field(default_factory=dict)
    tensor_maps: dict[str, dict[str, Any]] = field(default_factory=dict)  # see tensorcore.Lowered
    cluster: tuple[int, int, int] = (1, 1, 1)  # a cluster launch's dims (tensorcore.Lowered)
    zeroed: tuple[str, ...] = ()  # outputs each launch zeroes first (tensorcore.Lowered)
    times: dict[str, float] = field(default_factory=dict)
    cubin: bytes | None = field(default=None, repr=False)

    @property
    def failure_class(self) -> str | None:
        if self.status is Status.OK:
            return None
        if self.status is Status.SCHEDULE_ERROR:
            return f"schedule_error:{self.primitive or 'unknown'}"
        if self.status is Status.BUILD_ERROR:
            return f"build_error:{self.stage}"
        return str(self.status)

    def to_dict(self, with_cubin: bool = False) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = str(self.status)
        if not with_cubin:
            d.pop("cubin")
        return d


# ------------------------------------------------------------------- work done in a worker

_OPS: dict[str, Operator] = {}


def _operator(workload: Mapping[str, Any]) -> Operator:
    key = Space.key(workload)
    if key not in _OPS:
        _OPS[key] = from_workload(workload)
    return _OPS[key]


_PRIMITIVE = re.compile(r"schedule primitive '([\w-]+)'")


def build_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """Build one configuration; runs inside a pool worker. Returns ``BuildResult.to_dict``."""
    source_only()
    return build_one(task).result.to_dict(with_cubin=True)


@dataclass
class Built:
    """What :func:`build_one` made: the result, and for a configuration that got so far its
    schedule and lowering (the runtime module included; ``bocast.export`` writes them)."""

    result: BuildResult
    schedule: Any = None
    lowered: Any = None


def build_one(task: Mapping[str, Any]) -> Built:
    """Build one task (``{"workload", "config" | "key" + "module", "compile", ...}``) in this
    process: the stages and failure classes of the module docstring."""
    op = _operator(task["workload"])
    t0 = time.perf_counter()
    sch = None
    if "module" in task:  # an already scheduled IRModule (another tuner's candidate)
        import tvm

        res = BuildResult(key=task["key"], status=Status.OK)
        mod = tvm.ir.load_json(task["module"])
    else:
        config = op.space.from_json(task["config"])
        res = BuildResult(key=Space.key(config), status=Status.OK)
        try:
            sch = op.apply(config)
            mod = sch.mod
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            m = _PRIMITIVE.search(msg)
            res.status, res.stage, res.error = Status.SCHEDULE_ERROR, "apply", tail(msg)
            res.primitive = m.group(1) if m else type(e).__name__
            res.times["apply_s"] = time.perf_counter() - t0
            return Built(res)
    t1 = time.perf_counter()
    res.times["apply_s"] = t1 - t0
    options = {} if "module" in task else op.build_options(config)
    try:
        if options.get("pipeline") == "tirx":  # a kernel template (space v3), not a schedule
            low = lower_tirx(sch, target_overrides=options.get("target"))
        else:
            low = lower(mod, pass_config=task.get("pass_config", options.get("pass_config")),
                        target_overrides=options.get("target"))
        tensor_names = {t.name for t in op.tensors()}
        maps = low.tensor_maps
        if not (set(low.args) - set(maps)) | {m["tensor"] for m in maps.values()} \
                <= tensor_names:
            raise RuntimeError(f"kernel arguments {low.args} do not match tensors {tensor_names}")
        outputs = {t.name for t in op.tensors() if t.role == "output"}
        if not set(getattr(low, "zeroed", ())) <= outputs:
            raise RuntimeError(f"the launch would zero {low.zeroed}, not outputs {outputs}")
    except Exception as e:  # noqa: BLE001
        res.status, res.stage, res.error = Status.BUILD_ERROR, "lower", tail(str(e))
        res.times["lower_s"] = time.perf_counter() - t1
        return Built(res, sch)
    res.times["lower_s"] = time.perf_counter() - t1
    res.kernel, res.args, res.grid, res.block = low.kernel, low.args, low.grid, low.block
    res.features["dynamic_smem_bytes"] = float(low.dynamic_smem)
    res.tensor_maps = low.tensor_maps
    res.cluster = tuple(getattr(low, "cluster", (1, 1, 1)))
    res.zeroed = tuple(getattr(low, "zeroed", ()))
    if not task.get("compile", True):
        res.times["total_s"] = time.perf_counter() - t0
        return Built(res, sch, low)
    cr = compile_cubin(low.source, timeout_s=task.get("compile_timeout_s", 120.0), arch=low.arch)
    res.times["compile_s"] = cr.seconds
    res.features.update(cr.features)
    if cr.timed_out:
        res.status, res.stage, res.error = Status.BUILD_TIMEOUT, "compile", tail(cr.log)
    elif not cr.ok:
        res.status, res.stage, res.error = Status.BUILD_ERROR, "compile", tail(cr.log)
    else:
        res.cubin = cr.cubin
    res.times["total_s"] = time.perf_counter() - t0
    return Built(res, sch, low)


def _from_dict(d: Mapping[str, Any]) -> BuildResult:
    d = dict(d)
    d["status"] = Status(d["status"])
    d["grid"], d["block"], d["args"] = tuple(d["grid"]), tuple(d["block"]), tuple(d["args"])
    d["cluster"] = tuple(d.get("cluster", (1, 1, 1)))
    d["zeroed"] = tuple(d.get("zeroed", ()))
    return BuildResult(**d)


# ------------------------------------------------------------------------------ the builder


class Builder:
    """Builds batches of configurations of one operator in a pool of worker processes.

    ``workers`` defaults to the machine's cores; ``timeout_s`` bounds one whole build (apply,
    lower, nvcc). ``reject_spills`` is a build-time filter: a kernel whose ptxas report shows
    register spills, a stack frame or serialized wgmma instructions (space v3: ptxas's
    "Potential Performance Loss") is recorded as ``build_rejected`` and never runs (those
    figures are free before a GPU run; a stack frame also marks local arrays, the cause of the
    launch failures of v1's conv3d kernels). Use as a context manager, or call :meth:`close`."""

    def __init__(self, *, workers: int | None = None, timeout_s: float = 180.0,
                 compile: bool = True, reject_spills: bool = False):
        self.workers = workers or os.cpu_count() or 1
        self.timeout_s = timeout_s
        self.compile = compile
        self.reject_spills = reject_spills
        if compile and why_no_compiler():
            raise RuntimeError(why_no_compiler())
        # tvm_ffi imports torch whenever it is installed (1-1.5 s and 200 MB a worker here);
        # lowering and nvcc never use it
        self._pool = TimedPool("bocast.measure.builder:build_task", self.workers,
                               hide=("torch",))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._pool.close()

    def build(self, op: Operator, configs: Sequence[Config],
              on_result=None) -> list[BuildResult]:
        return self._build(op, [{"config": _jsonable(c)} for c in configs],
                           [Space.key(c) for c in configs], on_result)

    def build_modules(self, op: Operator, modules: Sequence[tuple[str, str]],
                      on_result=None, *, pass_config: dict | None = None) -> list[BuildResult]:
        """Build scheduled IRModules of ``op``'s workload, given as (key, ``tvm.ir.save_json``
        text): the lowering, nvcc, limits and failure classes of :meth:`build`.
        ``pass_config``: extra TVM pass options for the lowering of these modules."""
        return self._build(op, [{"key": k, "module": m, "pass_config": pass_config}
                                for k, m in modules],
                           [k for k, _ in modules], on_result)

    def _build(self, op: Operator, items: list[dict], keys: list[str],
               on_result) -> list[BuildResult]:
        tasks = [{"workload": op.workload, **item, "compile": self.compile,
                  "compile_timeout_s": self.timeout_s} for item in items]

        def convert(i: int, raw: Any) -> BuildResult:
            if isinstance(raw, TaskFailure):
                status = Status.BUILD_TIMEOUT if raw.kind == "timeout" else Status.BUILD_ERROR
                return BuildResult(key=keys[i], status=status, stage="worker",
                                   error=tail(f"{raw.kind}: {raw.detail}"),
                                   times={"total_s": raw.seconds})
            res = _from_dict(raw)
            return rejected(res) if self.reject_spills else res

        results: list[BuildResult | None] = [None] * len(tasks)

        def collect(i: int, raw: Any) -> None:
            results[i] = convert(i, raw)
            if on_result is not None:
                on_result(i, results[i])

        self._pool.map(tasks, self.timeout_s + 30, on_result=collect)
        return results  # type: ignore[return-value]


def rejected(res: BuildResult) -> BuildResult:
    """``res``, or ``build_rejected`` if ptxas reported spills, a stack frame or serialized
    wgmma instructions (the ``reject_spills`` filter)."""
    f = res.features
    local = {k: f.get(k, 0) for k in ("spill_stores", "spill_loads", "stack_bytes")}
    serialized = bool(f.get("wgmma_serialized"))
    if res.status is not Status.OK or not (any(local.values()) or serialized):
        return res
    res.status, res.stage, res.cubin = Status.BUILD_REJECTED, "filter", None
    res.error = "reject_spills: ptxas reports " + ", ".join(
        [f"{int(v)} bytes {k.replace('_', ' ')}" for k, v in local.items() if v]
        + (["wgmma.mma_async instructions serialized"] if serialized else []))
    return res


def _jsonable(config: Config) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
