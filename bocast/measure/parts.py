"""The measuring parts of a run, made in one place (as MetaSchedule's ``Runner.create``): every
entry point (``bocast tune``/``bocast.tune``, ``bocast compare``, ``bocast measure``) asks here
for its runner, builder and measurer instead of constructing them itself.

Runner kinds: ``local`` (the local GPU, in a worker process), ``rpc`` (GPU servers behind a
tracker), ``standin`` (synthetic timings on the CPU) and ``replay`` (a recorded dataset's
timings). The old names ``tvm`` (configurations) and ``gpu`` (``bocast measure``) still work and
say once that they are now ``local`` (:func:`runner_kind`). A replay runner answers whole records
(:class:`~bocast.measure.runner.RecordRunner`: a dataset row holds the build outcome, features
and timing together), so it takes no builder and :func:`make_measurer` gives it its own
measurer; the API also takes runner and builder objects (:func:`runner_argument`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bocast.errors import InputError
from bocast.measure.builder import Builder
from bocast.measure.replay import ReplayRunner
from bocast.measure.runner import GpuRunner, RecordRunner, Runner
from bocast.measure.standin import StandinRunner
from bocast.progress import say

if TYPE_CHECKING:
    from bocast.measure.engine import Measurer, RecordMeasurer
    from bocast.measure.replay import ReplayDataset
    from bocast.records.record import Record
    from bocast.records.store import Store
    from bocast.space.operators.operator import Operator

#: every runner kind a configuration or a command names
RUNNER_KINDS = ("local", "rpc", "replay", "standin")
#: kinds that time kernels as they are built (the others read recorded timings)
LIVE_KINDS = ("local", "rpc", "standin")
#: the names the local runner had before 2026-11-26
OLD_NAMES = {"tvm": "local", "gpu": "local"}
_told: set[str] = set()


def runner_kind(name: Any) -> Any:
    """``name`` with an old spelling replaced (one line on stderr the first time); anything
    else as given, for the caller's check to refuse by name."""
    if isinstance(name, str) and name in OLD_NAMES:
        if name not in _told:
            _told.add(name)
            say(f"note: runner {name!r} is now called {OLD_NAMES[name]!r} (the old name still "
                "works)")
        return OLD_NAMES[name]
    return name


def make_runner(kind: str, *, timeout_s: float | None = None, repeats: int | None = None,
                seed: int = 0, rpc: Mapping[str, Any] | None = None,
                dataset: ReplayDataset | None = None, l2: str = "warm") -> Runner:
    """The runner of ``kind``. A live kind: ``timeout_s`` bounds one kernel's run, ``repeats``
    timed replays, ``seed`` the input data; ``rpc``: the tracker, key and GPU model (kind rpc).
    ``replay``: ``dataset``, a :class:`~bocast.measure.replay.ReplayDataset` (it has no other
    option). ``l2``: warm or flushed before each timed launch (live kinds). A ValueError for a
    kind or an option that does not fit."""
    kind = runner_kind(kind)
    if kind == "replay":
        if dataset is None:
            raise ValueError("runner kind 'replay' needs dataset (a ReplayDataset)")
        return ReplayRunner(dataset)
    if kind not in LIVE_KINDS:
        raise ValueError(f"runner kind {kind!r}: make_runner makes {', '.join(RUNNER_KINDS)}")
    if dataset is not None or timeout_s is None or repeats is None:
        raise ValueError(f"runner kind {kind!r} needs timeout_s and repeats, and no dataset")
    live: dict[str, Any] = {"timeout_s": timeout_s, "repeats": repeats, "seed": seed, "l2": l2}
    if kind == "local":
        return GpuRunner(**live)
    if kind == "rpc":
        from bocast.measure.rpc.runner import RpcRunner

        return RpcRunner(**dict(rpc or {}), **live)
    return StandinRunner(**live)


def make_builder(*, workers: int | None, timeout_s: float, reject_spills: bool = False,
                 compile: bool = True) -> Builder:
    """The builder: ``workers`` processes (None: the machine's cores), ``timeout_s`` per build,
    ``reject_spills`` the ptxas filter, ``compile`` False for the stand-in (no nvcc)."""
    return Builder(workers=workers, timeout_s=timeout_s, reject_spills=reject_spills,
                   compile=compile)


def make_measurer(op: Operator, store: Store | None, runner: Runner | None,
                  builder: Builder | None = None, *, session_info: dict | None = None,
                  on_record: Callable[[Record], None] | None = None,
                  batch_reference: bool = False) -> Measurer | RecordMeasurer:
    """The measurer of any runner, what :class:`bocast.run.tuner.Tuner` drives. A runner that
    answers whole records (replay) gets a :class:`~bocast.measure.engine.RecordMeasurer`: no
    builder, ``store`` optional, its session ``{"runner", "dataset"}`` and ``session_info``; a
    live one (or None: build only) a :class:`~bocast.measure.engine.Measurer` that validates,
    builds with ``builder`` and times with ``runner`` into ``store``, its session the
    provenance with ``session_info``. ``on_record`` is told every record as it is written;
    ``batch_reference`` (live): the reference re-timed after every batch and recorded with it."""
    from bocast.measure.engine import Measurer, RecordMeasurer

    if isinstance(runner, RecordRunner):
        if builder is not None:
            raise ValueError(f"runner {runner.name} answers whole records: it takes no builder")
        return RecordMeasurer(runner, store, session_info=session_info, on_record=on_record)
    if store is None or builder is None:
        raise ValueError("a live measurement needs a store and a builder")
    return Measurer(op, store, builder, runner, session_info=session_info, on_record=on_record,
                    batch_reference=batch_reference)


def runner_argument(runner: Any, builder: Any = None) -> tuple[str | None, Runner | None]:
    """The API's ``runner`` and ``builder`` arguments checked (:func:`bocast.tune`,
    :func:`bocast.compare`): (the kind the run is, the runner object or None). A kind's name, or
    None for the configuration's, gives no object. A :class:`~bocast.measure.runner.Runner`
    object gives the kind it runs as: ``replay`` for a
    :class:`~bocast.measure.replay.ReplayRunner`, ``standin`` for one named so (its builder
    lowers without compiling), else ``local`` (kernels built with nvcc for the object to time,
    wherever it times them; its ``name`` is what the run records). ``builder``, where given, is a
    :class:`~bocast.measure.builder.Builder` (a replay run builds nothing). Anything else is
    one InputError."""
    if builder is not None and not isinstance(builder, Builder):
        raise InputError(f"builder: expected a bocast.measure.builder.Builder, got "
                         f"{type(builder).__name__}")
    if runner is None or isinstance(runner, str):
        return runner_kind(runner), None
    if not isinstance(runner, Runner):
        raise InputError(f"runner: expected a kind ({', '.join(RUNNER_KINDS)}) or a "
                         f"bocast.measure.runner.Runner, got {type(runner).__name__}")
    if isinstance(runner, RecordRunner):
        if not isinstance(runner, ReplayRunner):
            raise InputError(f"runner: {type(runner).__name__} answers whole records; the "
                             "API replays a ReplayRunner (make_runner('replay', dataset=...))")
        if builder is not None:
            raise InputError("builder: a replay run builds nothing (its runner answers whole "
                             "records)")
        return "replay", runner
    return ("standin" if runner.name == "standin" else "local"), runner
