"""A stand-in GPU worker for machines without a GPU: exercises the runner's process isolation,
time limits, crash handling and resume on a CPU. Its timings are SYNTHETIC (a deterministic
function of the configuration key) and must never be reported as measurements.

Faults are requested through the build's kernel name, so tests can inject each failure kind:
``hang`` (never returns), ``crash`` (the process dies), ``sticky`` (a sticky CUDA error: result
returned, then the worker is replaced), ``wrong`` (wrong result), ``launch`` (launch refused).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from typing import Any

from bocast.measure.runner import WorkerRunner
from bocast.records.record import STANDIN_GPU


def run_task(task: Mapping[str, Any]) -> dict[str, Any]:
    kind = task.get("kind", "kernel")
    if kind == "device":
        return {"gpu": STANDIN_GPU, "driver": "none", "pid": os.getpid()}
    if kind == "reference":
        return {"latency_ms": 1.0, "tflops": 1.0, "what": "stand-in", "synthetic": True}
    fault = task.get("kernel", "")
    if fault == "hang":
        time.sleep(3600)
    if fault == "crash":
        os._exit(139)
    res: dict[str, Any] = {"key": task["key"], "status": "ok", "pid": os.getpid()}
    if fault == "launch":
        return {**res, "status": "launch_error", "error": "cuLaunchKernel failed (stand-in)"}
    if fault == "sticky":
        return {**res, "status": "runtime_error", "error": "CUDA_ERROR_ILLEGAL_ADDRESS (stand-in)",
                "_restart": True}
    if fault == "wrong":
        return {**res, "status": "wrong_result", "rel_error": 0.5, "error": "relative error 0.5"}
    h = int.from_bytes(hashlib.sha256(task["key"].encode()).digest()[:4], "little")
    latency = 0.05 + (h % 1000) / 1000.0
    time.sleep(float(os.environ.get("BOCAST_STANDIN_SLEEP", "0")))
    out = {**res, "latency_ms": latency, "latency_min_ms": latency, "latency_q25_ms": latency,
           "latency_q75_ms": latency, "latency_max_ms": latency, "repeats": 1,
           "tflops": 1.0 / latency, "rel_error": 0.0, "run_s": 0.0}
    if kind == "paired":  # the reference alternating with it: the stand-in's reference
        out.update(reference={"latency_ms": 1.0, "tflops": 1.0, "what": "stand-in"},
                   pair_ratios=[1.0 / latency], ratio=1.0 / latency)
    return out


class StandinRunner(WorkerRunner):
    """Synthetic timings in an isolated worker process (tests and CPU demos only)."""

    name = "standin"
    compiles, synthetic = False, True  # its builder lowers only; SYNTHETIC timings

    def __init__(self, **kwargs):
        super().__init__(worker="bocast.measure.standin:run_task", **kwargs)
