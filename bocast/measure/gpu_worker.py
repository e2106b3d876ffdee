"""The GPU side of the runner: runs inside a worker process that owns the CUDA context.

Kernels are cubins loaded through the CUDA driver API (ctypes on libcuda, no TVM needed) and
launched on torch's stream, so our kernels and the cuBLAS reference are timed the same way:
CUDA events around replays of a CUDA graph holding ``number`` back-to-back launches (the graph
removes the CPU launch gaps that would otherwise dominate microsecond kernels), after a warm-up,
``repeats`` times; the per-launch time of each replay is one sample.

Inputs are uniform in [-1, 1) (never zeros; an fp8 GEMM's scales in [1/64, 1/16):
``TensorSpec.values``), redrawn for every configuration from a seed derived from its key; the
output is poisoned with NaN before the first launch, so an element the kernel never writes
fails the check. A kernel that adds into its output (space v3's split K: the task's
``zeroed``) has it zeroed before every launch instead, the correctness launch's and each timed
one's (the zeroing is part of the time, as a user's launch needs it); an element such a kernel
never adds to stays 0 and fails the check against the reference of random inputs. A fault that
leaves the context unusable (illegal address, ...) returns its result with ``_restart`` so the
pool replaces this process.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from bocast.measure import tensor_maps
from bocast.measure.tensor_maps import TensorMap
from bocast.measure.timing import time_callable, time_pair
from bocast.space.operators.operator import from_workload

_CU = None
_OPS: dict[str, Any] = {}
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
# errors after which the context is unusable (sticky): the worker must be replaced
_STICKY = {700, 701, 702, 703, 704, 705, 710, 714, 715, 716, 717, 718, 719, 720, 999}


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int):
        self.code = code
        super().__init__(f"{call} failed: {_error_name(code)} ({code})")


def _driver():
    global _CU
    if _CU is None:
        import torch

        torch.cuda.init()
        torch.zeros(1, device="cuda")  # makes the primary context current on this thread
        _CU = ctypes.CDLL("libcuda.so.1")
        _CU.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return _CU


def _error_name(code: int) -> str:
    name = ctypes.c_char_p()
    if _CU is not None and _CU.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return "CUDA_ERROR"


def _check(call: str, code: int) -> None:
    if code != 0:
        raise CudaError(call, code)


def encode_tensor_map(spec: Mapping[str, Any], pointer: int, dtype: str) -> TensorMap:
    """The TMA descriptor of the tensor at ``pointer`` as ``spec`` describes it (a tiled map,
    or an im2col one: :func:`bocast.measure.tensor_maps.encode_at`); a driver error raises
    :class:`CudaError`."""
    tmap = TensorMap()
    _check(*tensor_maps.encode_at(_driver(), tmap.address, spec, pointer, dtype))
    return tmap


def launch_params(pointers) -> tuple[list, Any]:
    """cuLaunchKernel's ``kernelParams`` for ``pointers`` (device pointers or TensorMaps): an
    array of each parameter's address, and the values it points into (which must stay alive
    until the launch returns)."""
    values = [p if isinstance(p, TensorMap) else ctypes.c_void_p(p) for p in pointers]
    params = (ctypes.c_void_p * len(values))(*[
        v.address if isinstance(v, TensorMap) else ctypes.addressof(v) for v in values])
    return values, params


class _Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _LaunchAttributeValue(ctypes.Union):
    """CUlaunchAttributeValue: a 64-byte union; a cluster launch sets its clusterDim."""

    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", _Dim3)]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): the id, padding to 8 bytes, the value (72 bytes in all)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h), cuLaunchKernelEx's first argument (56 bytes)."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def launch_config(grid, block, dynamic_smem: int, stream: int, cluster) -> tuple[Any, Any]:
    """cuLaunchKernelEx's CUlaunchConfig of a launch of ``grid`` x ``block`` with ``cluster``
    dims (one CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION attribute, as TVM's CUDA runtime passes
    it), and the attribute array it points to (alive as long as the config is used)."""
    attrs = (LaunchAttribute * 1)()
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attrs[0].value.clusterDim = _Dim3(*cluster)
    config = LaunchConfig(*grid, *block, int(dynamic_smem), ctypes.c_void_p(stream),
                          ctypes.cast(attrs, ctypes.POINTER(LaunchAttribute)), 1)
    return config, attrs


class Kernel:
    """A cubin loaded into the current context. ``cluster``: thread-block cluster dims; other
    than (1, 1, 1) the kernel is launched with cuLaunchKernelEx and that cluster attribute (the
    grid a whole number of clusters), else with cuLaunchKernel."""

    def __init__(self, cubin: bytes, name: str, grid, block, dynamic_smem: int,
                 cluster=(1, 1, 1)):
        cu = _driver()
        self.module = ctypes.c_void_p()
        _check("cuModuleLoadData", cu.cuModuleLoadData(ctypes.byref(self.module), cubin))
        self.func = ctypes.c_void_p()
        _check("cuModuleGetFunction",
               cu.cuModuleGetFunction(ctypes.byref(self.func), self.module, name.encode()))
        if dynamic_smem > 0:  # needed as soon as static + dynamic exceed 48 KB; harmless below
            _check("cuFuncSetAttribute", cu.cuFuncSetAttribute(
                self.func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(dynamic_smem)))
        self.grid, self.block, self.dynamic_smem = tuple(grid), tuple(block), int(dynamic_smem)
        self.cluster = tuple(int(x) for x in cluster)

    def max_active_clusters(self) -> int:
        """cuOccupancyMaxActiveClusters of this kernel's cluster launch: how many of its
        clusters the GPU holds at once (a persistent grid of more clusters runs a tail wave)."""
        config, _attrs = launch_config(self.grid, self.block, self.dynamic_smem, 0, self.cluster)
        n = ctypes.c_int()
        _check("cuOccupancyMaxActiveClusters", _driver().cuOccupancyMaxActiveClusters(
            ctypes.byref(n), self.func, ctypes.byref(config)))
        return n.value

    def launch(self, pointers, stream: int) -> None:
        """``pointers``: one value per kernel parameter, a device pointer or a TensorMap."""
        values, params = launch_params(pointers)  # values: alive until the launch returns
        if self.cluster != (1, 1, 1):
            config, _attrs = launch_config(self.grid, self.block, self.dynamic_smem, stream,
                                           self.cluster)
            _check("cuLaunchKernelEx", _driver().cuLaunchKernelEx(
                ctypes.byref(config), self.func, params, None))
            return
        _check("cuLaunchKernel", _driver().cuLaunchKernel(
            self.func, *[ctypes.c_uint(x) for x in self.grid],
            *[ctypes.c_uint(x) for x in self.block],
            ctypes.c_uint(self.dynamic_smem), ctypes.c_void_p(stream), params, None))

    def unload(self) -> None:
        if self.module:
            _driver().cuModuleUnload(self.module)
            self.module = ctypes.c_void_p()


def _operator(workload: Mapping[str, Any]):
    import json

    key = json.dumps(workload, sort_keys=True)
    if key not in _OPS:
        _OPS[key] = from_workload(workload)
    return _OPS[key]


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & (2**63 - 1)


def make_inputs(op, seed: int):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtypes = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
              "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    out = {}
    for t in op.tensors():
        if t.role == "input":  # uniform in t.values, rounded to the tensor's type
            low, high = t.values
            x = torch.rand(t.shape, generator=gen, device="cuda", dtype=torch.float32)
            out[t.name] = (x * (high - low) + low).to(dtypes[t.dtype])
        else:
            out[t.name] = torch.full(t.shape, float("nan"), device="cuda", dtype=dtypes[t.dtype])
    return out


def rel_error(out, ref) -> float:
    import torch

    out64, ref64 = out.double(), ref.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64))


def output_error(op, inputs) -> float:
    """Relative error of the output among ``inputs`` (:func:`make_inputs`, after the kernel
    ran) against ``op.reference`` of its inputs: the correctness check of every kernel."""
    out = inputs[next(t.name for t in op.tensors() if t.role == "output")]
    return rel_error(out, op.reference(*[inputs[t.name] for t in op.tensors()
                                         if t.role == "input"]))


def run_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """One task: {"kind": "kernel" | "paired" (a kernel with the reference alternating:
    :func:`bocast.measure.timing.time_pair`) | "reference" | "device", ...}; a plain dict."""
    kind = task.get("kind", "kernel")
    if kind == "device":
        return device_info()
    if kind == "reference":
        return _run_reference(task)
    return _run_kernel(task)


def kernel_args(op, task: Mapping[str, Any], inputs) -> list:
    """The kernel's parameters: a tensor's device pointer, or for a parameter named in
    ``task["tensor_maps"]`` the TMA descriptor of its tensor (encoded once: the tensors stay)."""
    maps = task.get("tensor_maps") or {}
    dtypes = {t.name: t.dtype for t in op.tensors()}
    out: list = []
    for name in task["args"]:
        if name in maps:
            tensor = maps[name]["tensor"]
            out.append(encode_tensor_map(maps[name], inputs[tensor].data_ptr(), dtypes[tensor]))
        else:
            out.append(inputs[name].data_ptr())
    return out


def _run_kernel(task: Mapping[str, Any]) -> dict[str, Any]:
    import torch

    t0 = time.perf_counter()
    op = _operator(task["workload"])
    res: dict[str, Any] = {"key": task["key"], "status": "ok"}
    inputs = make_inputs(op, _seed(task["key"] + str(task.get("seed", 0))))
    kernel = None
    zeroed = [inputs[name] for name in task.get("zeroed") or ()]

    def zero_then_launch(stream: int) -> None:
        assert kernel is not None
        for t in zeroed:
            t.zero_()
        kernel.launch(args, stream)

    try:
        args = kernel_args(op, task, inputs)
        kernel = Kernel(task["cubin"], task["kernel"], task["grid"], task["block"],
                        task.get("dynamic_smem", 0), task.get("cluster") or (1, 1, 1))
        if kernel.cluster != (1, 1, 1):  # what the launch can hold at once (a diagnostic)
            try:
                res["max_active_clusters"] = kernel.max_active_clusters()
            except CudaError as e:
                res["max_active_clusters_error"] = str(e)
        stream = torch.cuda.current_stream().cuda_stream
        zero_then_launch(stream)
    except CudaError as e:
        res.update(status="launch_error", error=str(e), run_s=time.perf_counter() - t0)
        if e.code in _STICKY:
            res["_restart"] = True
        return res
    code = _driver().cuCtxSynchronize()
    if code != 0:
        res.update(status="runtime_error", error=str(CudaError("kernel", code)),
                   run_s=time.perf_counter() - t0, _restart=code in _STICKY or code > 0)
        return res
    err = output_error(op, inputs)
    res["rel_error"] = err
    if not err <= task.get("tolerance", op.tolerance):
        res.update(status="wrong_result", error=f"relative error {err:.3g} > {op.tolerance:g}"
                   + (" (NaN/unwritten elements)" if math.isinf(err) else ""),
                   run_s=time.perf_counter() - t0)
        kernel.unload()
        return res
    launch = lambda: zero_then_launch(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    how = {"warmup_ms": task.get("warmup_ms", 20), "repeats": task.get("repeats", 10),
           "l2": task.get("l2", "warm")}
    try:
        if task.get("kind") == "paired":  # the reference's replays alternating with the kernel's
            ins = [inputs[t.name] for t in op.tensors() if t.role == "input"]
            timing = time_pair(launch, lambda: op.reference_fast(*ins), **how)
            ref = timing["reference"]
            ref["tflops"] = op.flops / (ref["latency_ms"] * 1e-3) / 1e12
            ref["what"] = getattr(op, "reference_name", "torch reference")
        else:
            timing = time_callable(launch, **how)
    except (CudaError, RuntimeError) as e:
        res.update(status="runtime_error", error=f"while timing: {e}",
                   run_s=time.perf_counter() - t0, _restart=True)
        return res
    kernel.unload()
    res.update(timing)
    res["tflops"] = op.flops / (res["latency_ms"] * 1e-3) / 1e12
    res["run_s"] = time.perf_counter() - t0
    return res


def _run_reference(task: Mapping[str, Any]) -> dict[str, Any]:
    op = _operator(task["workload"])
    inputs = make_inputs(op, task.get("seed", 0))
    ins = [inputs[t.name] for t in op.tensors() if t.role == "input"]
    out = op.reference_fast(*ins)
    err = rel_error(out, op.reference(*ins))
    timing = time_callable(lambda: op.reference_fast(*ins), warmup_ms=task.get("warmup_ms", 50),
                           repeats=task.get("repeats", 20), l2=task.get("l2", "warm"))
    return {**timing, "rel_error": err, "tflops": op.flops / (timing["latency_ms"] * 1e-3) / 1e12,
            "what": getattr(op, "reference_name", "torch reference"), "out_dtype": str(out.dtype)}


def device_info() -> dict[str, Any]:
    import torch

    _driver()
    props = torch.cuda.get_device_properties(0)
    info = {"gpu": props.name, "sm_count": props.multi_processor_count,
            "memory_gb": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,"
                            "clocks.max.sm,temperature.gpu,power.draw", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20).stdout.strip().split(", ")
        info.update(dict(zip(("driver", "sm_clock", "mem_clock", "max_sm_clock", "temperature",
                              "power"), q)))
    except (OSError, subprocess.SubprocessError):
        info["driver"] = "unknown"
    return info
