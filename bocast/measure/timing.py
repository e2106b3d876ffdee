"""How the GPU worker times a kernel or the reference (:func:`time_callable`: CUDA events around
replays of a CUDA graph, the L2 warm or flushed) and reads the GPU's state beside each timing
(:class:`Nvml`). Runs inside the worker process that owns the CUDA context."""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from typing import Any


class _Graphed:
    """``fn`` (launching on torch's current stream) captured as a CUDA graph of ``number``
    calls of about ``target_ms`` in all, on ``stream``; with ``flush`` (a buffer of twice the
    L2) each call is preceded by a write of the buffer and a second graph holds the writes
    alone, whose time :meth:`sample` subtracts."""

    def __init__(self, fn, stream, flush, *, target_ms: float, max_number: int):
        import torch

        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

        def call():
            if flush is not None:
                flush.fill_(1)
            fn()

        call()  # one eager call outside the capture (lazy init of handles, modules)
        self.start.record()
        call()
        self.end.record()
        self.end.synchronize()
        single = max(self.start.elapsed_time(self.end), 1e-4)
        self.number = int(min(max_number, max(1, math.ceil(target_ms / single))))

        def captured(body):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(self.number):
                    body()
            return graph

        self.graph = captured(call)
        self.writes = captured(lambda: flush.fill_(1)) if flush is not None else None

    def _replay(self, graph) -> float:
        self.start.record()
        graph.replay()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / self.number

    def sample(self) -> float:
        """One per-call time (ms) of a replay."""
        t = self._replay(self.graph)
        if self.writes is not None:
            t = max(t - self._replay(self.writes), 1e-6)
        return t


def _flush_buffer(l2: str):
    import torch

    if l2 == "flushed":
        size = 2 * int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
        return torch.empty(max(size, 1 << 20), dtype=torch.uint8, device="cuda")
    if l2 != "warm":
        raise ValueError(f"l2: expected 'warm' or 'flushed', got {l2!r}")
    return None


def _stats(samples: list[float]) -> dict[str, Any]:
    samples = sorted(samples)
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {"latency_ms": statistics.median(samples), "latency_min_ms": samples[0],
            "latency_q25_ms": q[0], "latency_q75_ms": q[2], "latency_max_ms": samples[-1]}


def _method(l2: str) -> str:
    return "cuda-graph-events" + ("-l2-flushed" if l2 == "flushed" else "")


def _warm_up(graphs, warmup_ms: float) -> None:
    import torch

    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < warmup_ms:
        for g in graphs:
            g.graph.replay()
        torch.cuda.synchronize()


def time_callable(fn, *, warmup_ms: float, repeats: int, target_ms: float = 1.0,
                  max_number: int = 200, l2: str = "warm") -> dict[str, Any]:
    """Per-call milliseconds of ``fn`` (which launches on torch's current stream): CUDA events
    around replays of a CUDA graph of ``number`` calls, ``repeats`` samples after a warm-up.

    ``l2="flushed"``: before every call the graph writes a buffer of twice the L2 (evicting
    the inputs), and the time of a second graph holding the writes alone is subtracted from
    each sample, so the figure is the call's own from a cold L2. ``"warm"``: the calls follow
    one another, as in a loop of calls. The result names both (``method``, ``l2``) and the
    GPU's clock, power and temperature read right after the samples (:class:`Nvml`)."""
    import torch

    flush = _flush_buffer(l2)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        g = _Graphed(fn, stream, flush, target_ms=target_ms, max_number=max_number)
        _warm_up([g], warmup_ms)
        samples = [g.sample() for _ in range(repeats)]
    return {**_stats(samples), "repeats": repeats, "number": g.number, "l2": l2,
            "method": _method(l2), **Nvml.read()}


def time_pair(fn, reference, *, warmup_ms: float, repeats: int, target_ms: float = 1.0,
              max_number: int = 200, l2: str = "warm") -> dict[str, Any]:
    """``fn`` and ``reference`` timed as :func:`time_callable` times one, their replays
    alternating (which goes first alternates too), so that each of ``repeats`` pairs ran
    within a millisecond or two of the same clock: the GPU's clock moves on that scale under
    load (1380-1740 MHz within one re-timing on an H200), and a ratio of readings taken
    seconds apart carries that drift. Returns ``fn``'s result (as :func:`time_callable`),
    ``reference``: the reference's, and ``pair_ratios``: each pair's reference time over
    ``fn``'s (above 1: ``fn`` is faster), with ``ratio`` their median."""
    import torch

    flush = _flush_buffer(l2)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        a = _Graphed(fn, stream, flush, target_ms=target_ms, max_number=max_number)
        b = _Graphed(reference, stream, flush, target_ms=target_ms, max_number=max_number)
        _warm_up([a, b], warmup_ms)
        mine: list[float] = []
        theirs: list[float] = []
        for i in range(repeats):
            for g, out in ((a, mine), (b, theirs)) if i % 2 == 0 else ((b, theirs), (a, mine)):
                out.append(g.sample())
    ratios = [t / m for m, t in zip(mine, theirs)]
    return {**_stats(mine), "repeats": repeats, "number": a.number, "l2": l2,
            "method": _method(l2) + "-paired", **Nvml.read(),
            "reference": {**_stats(theirs), "number": b.number},
            "pair_ratios": ratios, "ratio": statistics.median(ratios)}


class Nvml:
    """The GPU's clocks, power and temperature through NVML (``libnvidia-ml.so.1``, which the
    driver installs; ctypes, no Python package needed), for the device torch calls cuda:0. NVML
    numbers GPUs on its own, ignoring ``CUDA_VISIBLE_DEVICES`` (an RPC server's ``--gpus``), so
    the device is found by its PCI bus id. Each reading takes microseconds, so every timed
    kernel and reference carries one (a clock that fell while the kernels ran is seen in the
    records, issue 40). Unavailable (no NVML, a call that fails): :meth:`read` returns {}."""

    _lib: Any = None
    _handle: Any = None
    _failed = False

    @classmethod
    def _open(cls) -> bool:
        if cls._handle is not None or cls._failed:
            return cls._handle is not None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit_v2 failed")
            # the PCI bus id of this process's device 0 (CUDA numbering) from the driver API
            # (initialised: torch timed on it before any reading is asked for)
            cu, dev = ctypes.CDLL("libcuda.so.1"), ctypes.c_int()
            buf = ctypes.create_string_buffer(32)
            bus = b""
            if cu.cuDeviceGet(ctypes.byref(dev), 0) == 0 and \
                    cu.cuDeviceGetPCIBusId(buf, 32, dev) == 0:
                bus = buf.value
            handle = ctypes.c_void_p()
            if (not bus or lib.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(handle)) != 0) \
                    and lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
                raise OSError("no NVML handle for the device")
            cls._lib, cls._handle = lib, handle
        except (OSError, AttributeError):
            cls._failed = True
        return cls._handle is not None

    @classmethod
    def read(cls) -> dict[str, float]:
        """``{"sm_clock_mhz", "power_w", "temperature_c"}`` now (those NVML answered)."""
        if not cls._open():
            return {}
        lib, h, v = cls._lib, cls._handle, ctypes.c_uint()
        out: dict[str, float] = {}
        if lib.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(v)) == 0:  # NVML_CLOCK_SM
            out["sm_clock_mhz"] = float(v.value)
        if lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(v)) == 0:  # milliwatts
            out["power_w"] = v.value / 1000.0
        if lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(v)) == 0:  # NVML_TEMPERATURE_GPU
            out["temperature_c"] = float(v.value)
        return out
