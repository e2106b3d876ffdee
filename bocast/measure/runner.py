"""Runners: time built kernels and return one typed result per configuration.

``GpuRunner`` runs kernels in a separate worker process (:mod:`bocast.measure.gpu_worker`): a
kernel that hangs is killed at its time limit (``run_timeout``), one that crashes the process or
leaves a sticky CUDA error is recorded (``runtime_error``) and the worker is replaced; the tuner
goes on either way. The worker function is a parameter, so tests run the same machinery with a
stand-in worker on a CPU.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bocast.measure.builder import BuildResult
from bocast.measure.pool import TaskFailure, TimedPool
from bocast.records.record import RUN_FIELDS, Measurement, Record
from bocast.records.status import Status, tail
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator


@dataclass
class RunResult(Measurement):
    """A runner's answer for one kernel: its :class:`~bocast.records.record.Measurement` (keyword
    arguments), the status, and ``extra`` details (``number``, ``method``; rpc:
    ``measured_on``)."""

    key: str
    status: Status
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


#: ``on_result(i, result)``: the result of ``builds[i]``, as soon as it is known
OnResult = Callable[[int, RunResult], None]


class Runner(ABC):
    """Times built kernels of one operator. This is everything the engine
    (:meth:`bocast.measure.engine.Measurer.run`) and the commands that set a run up (``bocast
    tune``/``measure``/``compare``) call on a runner; ``name`` is recorded with the session.
    Implementations: :class:`GpuRunner` (this machine's GPU),
    :class:`bocast.measure.standin.StandinRunner` (synthetic timings, for tests on a CPU) and
    :class:`bocast.measure.rpc.runner.RpcRunner` (GPU servers); :class:`RecordRunner` for a runner
    that answers whole records (replay). :func:`bocast.measure.parts.make_runner` makes each kind,
    :func:`bocast.measure.parts.make_measurer` the measurer of any runner; a user's own subclass may
    be passed to :func:`bocast.tune` instead of a kind, or named by ``--runner``
    (:mod:`bocast.measure.kinds`).

    What a runner is, its class declares; the commands ask these, never its name. A subclass of
    one's own is by default a live runner that needs no GPU here and whose builds are compiled
    with nvcc here."""

    name: str = "runner"
    #: it times kernels as they are built (False: it reads recorded timings, replay)
    live: bool = True
    #: it times on this machine's CUDA GPU (a command refuses it, before writing, without one)
    needs_gpu: bool = False
    #: the kernels it is given are compiled here (nvcc, checked first); False: lowered only
    #: (grid, registers: the stand-in, a cost model) or not built at all (replay)
    compiles: bool = True
    #: it answers whole records (:class:`RecordRunner`): no builder, no built kernel
    answers_records: bool = False
    #: its timings are synthetic: its stores are kept out of the records library unless a
    #: library is named, and a live run's figure does not call them measured
    synthetic: bool = False
    #: it runs on a fleet of GPU servers: the configuration's ``rpc`` section holds its options
    #: (tracker, key, ...: :mod:`bocast.measure.rpc.options`), and its batch follows the
    #: fleet's size unless the configuration fixes one
    fleet: bool = False
    #: it takes ``paired=`` (runner option ``paired``): each trial timed alternating with the
    #: reference, its result's ``vs_reference`` the ratio; a class without it times alone
    pairs: bool = False

    @abstractmethod
    def run(self, op: Operator, builds: Sequence[BuildResult], *,
            on_result: OnResult | None = None) -> list[RunResult]:
        """Time ``builds`` (each of status ``ok``, else ValueError before anything runs).

        Returns ``len(builds)`` results, ``result[i]`` for ``builds[i]``; a kernel that hangs,
        crashes or computes a wrong result is a result with that status, not an exception.
        ``on_result(i, result)`` is called in the calling thread as each result is known (in
        any order), so the engine records it before the batch ends. Raises only what stops
        the whole batch (:class:`bocast.interrupt.Interrupted`; rpc: no server); results not
        yet passed to ``on_result`` are then dropped, and a resumed run measures them again."""

    def reference(self, op: Operator) -> dict[str, Any] | None:
        """The vendor library (cuBLAS/cuDNN through torch) on the same workload, timed the
        same way: ``{"tflops", "latency_ms", ... (Measurement fields), "what"}``; None where
        the runner has none."""
        return None

    def device(self) -> dict[str, Any]:
        """What the kernels run on, for the session's provenance: ``{"gpu": model name,
        "driver", clocks, ...}`` (empty where unknown)."""
        return {}

    def described(self) -> dict[str, Any]:
        """:meth:`device` as a run's session records it: with ``synthetic: True`` where the
        class declares synthetic timings, so that the records library keeps the store out of
        warm starts and suggestions whoever's runner made it (:attr:`Entry.synthetic
        <bocast.records.library.Entry.synthetic>`)."""
        return {**self.device(), **({"synthetic": True} if self.synthetic else {})}

    def timing(self) -> dict[str, Any]:
        """How this runner times (recorded with every figure a run reports): ``{"method",
        "l2", "repeats", ...}``; empty where it times nothing itself."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional: runners that hold nothing need no close
        """Stop worker processes or sessions; the runner is not used after."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RecordRunner(Runner):
    """A runner whose answer for a configuration is its whole record: build outcome, features
    and timing together, as a recorded dataset's row holds them (Kernel Tuner's simulation
    mode; :class:`bocast.measure.replay.ReplayRunner`). It needs no builder, and it times no
    built kernel (:meth:`run` refuses): its measurer
    (:class:`bocast.measure.engine.RecordMeasurer`, from
    :func:`bocast.measure.parts.make_measurer`) writes its records in the order asked and
    charges their recorded build and run seconds to a simulated clock."""

    live, compiles, answers_records = False, False, True

    @abstractmethod
    def record(self, config: Config, source: str = "") -> Record:
        """The record of ``config`` (its ``source`` column: ``source``); an InputError for a
        configuration it holds no record of."""

    def origin(self) -> dict[str, Any]:
        """Where the records come from, for the session's provenance (replay: the dataset)."""
        return {}

    def run(self, op: Operator, builds: Sequence[BuildResult], *,
            on_result: OnResult | None = None) -> list[RunResult]:
        raise TypeError(f"runner {self.name} answers whole records, not runs of built kernels: "
                        "measure through bocast.measure.parts.make_measurer")


def kernel_task(op: Operator, b: BuildResult, *, seed: int, repeats: int,
                warmup_ms: float, l2: str = "warm", paired: bool = False) -> dict[str, Any]:
    """The worker task that times one built kernel (the local and the RPC runner send the same);
    ``paired``: its replays alternating with the reference's (the result's ``ratio``)."""
    return {"kind": "paired" if paired else "kernel", "key": b.key, "workload": op.workload,
            "cubin": b.cubin, "kernel": b.kernel, "grid": b.grid, "block": b.block, "args": b.args,
            "dynamic_smem": int(b.features.get("dynamic_smem_bytes", 0)),
            "tensor_maps": b.tensor_maps, "cluster": b.cluster, "zeroed": b.zeroed,
            "seed": seed, "repeats": repeats, "warmup_ms": warmup_ms, "tolerance": op.tolerance,
            "l2": l2}


def timing_method(repeats: int, warmup_ms: float, l2: str, *,
                  paired: bool = False) -> dict[str, Any]:
    """The timing of the GPU worker (:func:`bocast.measure.gpu_worker.time_callable`, paired:
    :func:`~bocast.measure.timing.time_pair`), as a run records it."""
    return {"method": "CUDA events around replays of a CUDA graph of back-to-back launches "
                      "(about 1 ms per replay), the median of the repeats"
                      + ("; each replay alternating with one of the reference's (the record's "
                         "vs_reference: the median over those pairs of the reference's time "
                         "over the kernel's)" if paired else ""),
            "repeats": repeats, "warmup_ms": warmup_ms, "l2": l2, "paired": paired,
            "l2_means": "warm: launches follow one another; flushed: twice the L2 written "
                        "before each launch, its time subtracted"}


#: pairs a paired trial times at least: with 10, a 20 us kernel's trial ratio (GEMM
#: 128x6144x4096, H200) read up to 0.19 above its re-timed one, and the run's first-ranked
#: kernels re-timed 0.924-0.960 of cuBLAS in four runs; with 30, 0.962-0.982 in three, and
#: conv2d 8x56x56 256 -> 256 1.336 against 1.152-1.195 (results/paired_twins_h200). About
#: 0.02 s more GPU time a trial.
TRIAL_PAIRS = 30


def trial_repeats(repeats: int, paired: bool) -> int:
    """A trial's timed repeats (paired: pairs, at least :data:`TRIAL_PAIRS`)."""
    return max(TRIAL_PAIRS, repeats) if paired else repeats


class WorkerRunner(Runner):
    """Runs each kernel as one task of a single-process :class:`TimedPool`."""

    pairs = True

    def __init__(self, *, worker: str, timeout_s: float = 30.0, repeats: int = 10,
                 warmup_ms: float = 20.0, seed: int = 0, startup_timeout_s: float = 300.0,
                 l2: str = "warm", paired: bool = True):
        self.timeout_s, self.repeats = timeout_s, repeats
        self.warmup_ms, self.seed, self.l2, self.paired = warmup_ms, seed, l2, paired
        self.trial_repeats = trial_repeats(repeats, paired)
        self._pool = TimedPool(worker, 1, startup_timeout_s=startup_timeout_s)

    def timing(self) -> dict[str, Any]:
        return timing_method(self.trial_repeats, self.warmup_ms, self.l2, paired=self.paired)

    def close(self) -> None:
        self._pool.close()

    def _task(self, op: Operator, b: BuildResult) -> dict[str, Any]:
        return kernel_task(op, b, seed=self.seed, repeats=self.trial_repeats,
                           warmup_ms=self.warmup_ms, l2=self.l2, paired=self.paired)

    def run(self, op: Operator, builds: Sequence[BuildResult], *,
            on_result: OnResult | None = None) -> list[RunResult]:
        for b in builds:
            if b.status is not Status.OK:
                raise ValueError(f"cannot run {b.key}: build status {b.status}")
        out: list[RunResult | None] = [None] * len(builds)

        def collect(i: int, raw: Any) -> None:
            out[i] = res = self._convert(builds[i].key, raw)
            if on_result is not None:
                on_result(i, res)

        self._pool.map([self._task(op, b) for b in builds], self.timeout_s, on_result=collect)
        return out  # type: ignore[return-value]

    @staticmethod
    def _convert(key: str, raw: Any) -> RunResult:
        if isinstance(raw, TaskFailure):
            status = {"timeout": Status.RUN_TIMEOUT}.get(raw.kind, Status.RUNTIME_ERROR)
            return RunResult(key, status, run_s=raw.seconds,
                             error=tail(f"{raw.kind}: {raw.detail}"))
        res = RunResult(key, Status(raw["status"]), error=tail(raw.get("error", "")),
                        **{k: raw.get(k) for k in RUN_FIELDS if k != "vs_reference"},
                        vs_reference=raw.get("ratio") if raw["status"] == "ok" else None)
        res.extra = {k: raw[k] for k in ("number", "method", "l2") if k in raw}
        return res

    def _single(self, task: Mapping[str, Any], timeout_s: float) -> Any:
        (raw,) = self._pool.map([dict(task)], timeout_s)
        if isinstance(raw, TaskFailure):
            raise RuntimeError(f"runner worker {raw.kind}: {raw.detail}")
        return raw

    def reference(self, op: Operator) -> dict[str, Any]:
        return self._single({"kind": "reference", "workload": op.workload, "seed": self.seed,
                             "repeats": max(20, self.repeats), "l2": self.l2}, 120.0)

    def run_paired(self, op: Operator, build: BuildResult) -> tuple[RunResult, dict[str, Any]]:
        """``build`` timed with the reference, their replays alternating in one task
        (:func:`bocast.measure.timing.time_pair`): its result, and ``{"reference": the
        reference's timing, "pair_ratios", "ratio"}`` (empty where it failed)."""
        task = {**self._task(op, build), "kind": "paired",
                "repeats": max(20, self.repeats)}  # pairs: the reference's repeats
        (raw,) = self._pool.map([task], self.timeout_s * 2)
        res = self._convert(build.key, raw)
        extra = {k: raw[k] for k in ("reference", "pair_ratios", "ratio")} \
            if isinstance(raw, dict) and "ratio" in raw else {}
        return res, extra

    def device(self) -> dict[str, Any]:
        return self._single({"kind": "device"}, 120.0)


def why_no_gpu() -> str | None:
    """None when this machine has a CUDA GPU for the runner, else why not: a command that needs
    one asks before it writes anything. Without a CUDA driver it answers before importing
    torch (1.5 s), so such a refusal stays well under a second."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "this machine has no CUDA driver (libcuda.so.1 cannot be loaded)"
    try:
        import torch
    except ImportError:
        return "torch is not installed, so no GPU can be used"
    if not torch.cuda.is_available():
        return "this machine has no CUDA GPU (torch.cuda.is_available() is False)"
    return None


class GpuRunner(WorkerRunner):
    """Kernels on the local CUDA GPU, in an isolated worker process."""

    name = "local"
    needs_gpu = True

    def __init__(self, **kwargs):
        super().__init__(worker="bocast.measure.gpu_worker:run_task", **kwargs)
