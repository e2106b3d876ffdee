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

import contextlib
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bocast.measure import build_cache
from bocast.measure.nvcc import compile_cubin, why_no_compiler
from bocast.measure.pool import TaskFailure, TimedPool
from bocast.records.status import Status, tail
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator, from_workload
from bocast.space.space import Space
from bocast.space.tensorcore import lower, lower_tirx, source_only


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
    # a failure of the machine that built it (over the time limit, a crashed worker, nvcc
    # killed): a later build may succeed, so the build cache never keeps it
    transient: bool = False
    cached: bool = False  # taken from the build cache, not built now

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
#: failures of the machine a build ran on, not of the configuration: never kept in the build
#: cache (memory, files, an import that failed), so another attempt may build it
_MACHINE_ERRORS = (MemoryError, OSError, ImportError)


def build_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """Build one configuration; runs inside a pool worker. Returns ``BuildResult.to_dict``
    (``{"kind": "warm"}``: only import TVM, so that the first build does not wait for it)."""
    source_only()
    if task.get("kind") == "warm":
        import tvm  # noqa: F401

        return {"warm": True}
    return build_one(task).result.to_dict(with_cubin=True)


@dataclass
class Built:
    """What :func:`build_one` made: the result, and for a configuration that got so far its
    schedule and lowering (the runtime module included; ``bocast.export`` writes them)."""

    result: BuildResult
    schedule: Any = None
    lowered: Any = None


def build_one(task: Mapping[str, Any], cache: build_cache.BuildCache | None = None) -> Built:
    """Build one task (``{"workload", "config" | "key" + "module", "compile", ...}``) in this
    process: the stages and failure classes of the module docstring. With ``cache`` (export,
    which needs the schedule and lowering and so lowers anyway), nvcc's cubin and report are
    taken from the build cache where it holds them, and stored there otherwise."""
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
            res.transient = isinstance(e, _MACHINE_ERRORS)  # the machine's, not the config's
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
        res.transient = isinstance(e, _MACHINE_ERRORS)
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
    key = cache_key(cache, op, task) if cache is not None else ""
    hit = cache.get(key) if cache is not None else None
    if hit is not None and hit.get("status") == "ok" and hit.get("cubin"):
        res.cubin, res.cached = hit["cubin"], True
        res.features.update(hit.get("features") or {})
        res.times["compile_s"] = (hit.get("times") or {}).get("compile_s", 0.0)
        res.times["total_s"] = time.perf_counter() - t0
        return Built(res, sch, low)
    cr = compile_cubin(low.source, timeout_s=task.get("compile_timeout_s", 120.0), arch=low.arch)
    res.times["compile_s"] = cr.seconds
    res.features.update(cr.features)
    if cr.timed_out:
        res.status, res.stage, res.error = Status.BUILD_TIMEOUT, "compile", tail(cr.log)
        res.transient = True
    elif not cr.ok:
        res.status, res.stage, res.error = Status.BUILD_ERROR, "compile", tail(cr.log)
        res.transient = cr.fault
    else:
        res.cubin = cr.cubin
    res.times["total_s"] = time.perf_counter() - t0
    if cache is not None:
        cache.put(key, res.to_dict(with_cubin=True))
    return Built(res, sch, low)


def from_dict(d: Mapping[str, Any]) -> BuildResult:
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
    launch failures of v1's conv3d kernels). Use as a context manager, or call :meth:`close`.

    ``cache``: the build cache (:mod:`bocast.measure.build_cache`): a folder, False for none,
    None for the default (``$BOCAST_BUILD_CACHE``, else the user's cache folder). A build found
    there is not built again; :attr:`built` counts the builds this builder made (sent to its
    workers), ``self.cache.hits`` those it took from the cache."""

    def __init__(self, *, workers: int | None = None, timeout_s: float = 180.0,
                 compile: bool = True, reject_spills: bool = False,
                 cache: str | bool | None = None):
        self.workers = workers or os.cpu_count() or 1
        self.timeout_s = timeout_s
        self.compile = compile
        self.reject_spills = reject_spills
        self.cache = build_cache.from_setting(cache)
        self.built = 0
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
        return self._build(op, [{"config": jsonable(c)} for c in configs],
                           [Space.key(c) for c in configs], on_result)

    def build_modules(self, op: Operator, modules: Sequence[tuple[str, str]],
                      on_result=None, *, pass_config: dict | None = None) -> list[BuildResult]:
        """Build scheduled IRModules of ``op``'s workload, given as (key, ``tvm.ir.save_json``
        text): the lowering, nvcc, limits and failure classes of :meth:`build`.
        ``pass_config``: extra TVM pass options for the lowering of these modules."""
        return self._build(op, [{"key": k, "module": m, "pass_config": pass_config}
                                for k, m in modules],
                           [k for k, _ in modules], on_result)

    def warm(self) -> None:
        """Start the workers and import TVM in each (a GPU server, before its first batch)."""
        self._pool.map([{"kind": "warm"}] * self.workers, self.timeout_s + 30)

    def options(self) -> dict[str, Any]:
        """What this builder does to a task besides building it (a GPU server that builds for
        the RPC runner is sent these: :meth:`bocast.measure.rpc.runner.RpcRunner.build_and_run`)."""
        return {"compile": self.compile, "compile_timeout_s": self.timeout_s,
                "reject_spills": self.reject_spills}

    def _build(self, op: Operator, items: list[dict], keys: list[str],
               on_result) -> list[BuildResult]:
        tasks = [{"workload": op.workload, **item, "compile": self.compile,
                  "compile_timeout_s": self.timeout_s} for item in items]
        results: list[BuildResult | None] = [None] * len(tasks)

        def finish(i: int, res: BuildResult) -> None:
            results[i] = rejected(res) if self.reject_spills else res
            if on_result is not None:
                on_result(i, results[i])

        cache_keys = [cache_key(self.cache, op, t) for t in tasks] if self.cache else []
        todo = []
        for i in range(len(tasks)):
            hit = self.cache.get(cache_keys[i]) if self.cache else None
            if hit is not None:
                finish(i, from_dict({**hit, "key": keys[i], "cached": True}))
            else:
                todo.append(i)

        def collect(j: int, raw: Any) -> None:
            i = todo[j]
            if isinstance(raw, TaskFailure):
                status = Status.BUILD_TIMEOUT if raw.kind == "timeout" else Status.BUILD_ERROR
                finish(i, BuildResult(key=keys[i], status=status, stage="worker",
                                      error=tail(f"{raw.kind}: {raw.detail}"),
                                      times={"total_s": raw.seconds}, transient=True))
                return
            if self.cache:
                self.cache.put(cache_keys[i], raw)
            finish(i, from_dict(raw))

        self.built += len(todo)
        if todo:
            self._pool.map([tasks[i] for i in todo], self.timeout_s + 30, on_result=collect)
        return results  # type: ignore[return-value]


def cache_key(cache: build_cache.BuildCache, op: Operator, task: Mapping[str, Any]) -> str:
    """``task``'s key in ``cache``, with the target arch the operator asks for."""
    arch = None
    if "config" in task:
        with contextlib.suppress(Exception):  # a configuration it refuses: built, and failed
            options = op.build_options(op.space.from_json(task["config"]))
            arch = (options.get("target") or {}).get("arch")
    return cache.key(task, arch)


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


def jsonable(config: Config) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}
