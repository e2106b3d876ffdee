"""The measuring parts of a run, made in one place (as MetaSchedule's ``Runner.create``): every
entry point (``bocast tune``/``bocast.tune``, ``bocast compare``, ``bocast measure``) asks here
for its runner, builder and measurer instead of constructing them itself.

Runner kinds (:mod:`bocast.measure.kinds`, the one table of them): ``local`` (the local GPU, in
a worker process), ``rpc`` (GPU servers behind a tracker), ``standin`` (synthetic timings on
the CPU), ``replay`` (a recorded dataset's timings), an installed package's runner (entry-point
group ``bocast.runners``) and ``package.module:ClassName``. A runner that answers whole records
(:class:`~bocast.measure.runner.RecordRunner`: a dataset row holds the build outcome, features
and timing together) takes no builder and :func:`make_measurer` gives it its own measurer; the
API also takes runner and builder objects (:func:`runner_argument`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bocast.errors import InputError
from bocast.measure.builder import Builder
from bocast.measure.kinds import RUNNER_KINDS, kind_of, runner_class, runner_kind
from bocast.measure.replay import ReplayRunner
from bocast.measure.runner import RecordRunner, Runner

if TYPE_CHECKING:
    from bocast.measure.engine import Measurer, RecordMeasurer
    from bocast.measure.replay import ReplayDataset
    from bocast.records.record import Record
    from bocast.records.store import Store
    from bocast.space.operators.operator import Operator

__all__ = ["RUNNER_KINDS", "kind_of", "make_builder", "make_measurer", "make_runner",
           "runner_argument", "runner_class", "runner_kind"]


def make_runner(kind: str, *, timeout_s: float | None = None, repeats: int | None = None,
                seed: int = 0, rpc: Mapping[str, Any] | None = None,
                dataset: ReplayDataset | None = None, l2: str = "warm",
                paired: bool = True) -> Runner:
    """The runner of ``kind`` (:func:`bocast.measure.kinds.runner_class`). A live kind:
    ``timeout_s`` bounds one kernel's run, ``repeats`` timed replays, ``seed`` the input data,
    ``l2`` warm or flushed before each timed launch, ``paired`` each kernel timed alternating
    with the reference (runner classes that declare ``pairs``; others time alone); ``rpc``: the
    tracker, key and GPU model (kind rpc). ``replay``: ``dataset``, a
    :class:`~bocast.measure.replay.ReplayDataset` (it has no other option). A kind of one's
    own is made as ``cls(timeout_s=, repeats=, seed=, l2=)`` (a runner that answers whole
    records only as replay). A ValueError for a kind or an option that does not fit."""
    kind = runner_kind(kind)
    try:
        cls = runner_class(kind)
    except InputError as e:
        raise ValueError(str(e)) from None
    if cls.answers_records:
        if cls is not ReplayRunner:
            raise ValueError(f"runner {kind}: it answers whole records; bocast replays "
                             "recorded datasets with runner replay")
        if dataset is None:
            raise ValueError("runner kind 'replay' needs dataset (a ReplayDataset)")
        return ReplayRunner(dataset)
    if dataset is not None or timeout_s is None or repeats is None:
        raise ValueError(f"runner kind {kind!r} needs timeout_s and repeats, and no dataset")
    live: dict[str, Any] = {"timeout_s": timeout_s, "repeats": repeats, "seed": seed, "l2": l2}
    if cls.pairs:
        live["paired"] = paired
    # rpc: the configuration's rpc section (tracker, key, ...; bocast.measure.rpc.options),
    # empty for every other kind
    return cls(**dict(rpc or {}), **live)


def make_builder(*, workers: int | None, timeout_s: float, reject_spills: bool = False,
                 compile: bool = True) -> Builder:
    """The builder: ``workers`` processes (None: the machine's cores), ``timeout_s`` per build,
    ``reject_spills`` the ptxas filter, ``compile`` False for a runner that does not compile
    (:attr:`~bocast.measure.runner.Runner.compiles`: the stand-in; no nvcc)."""
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
    object gives its kind (:func:`bocast.measure.kinds.kind_of`: ``replay`` for a
    :class:`~bocast.measure.replay.ReplayRunner`, ``standin`` for the stand-in, else the kind
    its class is registered as); what the run needs of it (a GPU here, nvcc) its class
    declares, and its ``name`` is what the run records. ``builder``, where given, is a
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
    if runner.answers_records:
        if not isinstance(runner, ReplayRunner):
            raise InputError(f"runner: {type(runner).__name__} answers whole records; the "
                             "API replays a ReplayRunner (make_runner('replay', dataset=...))")
        if builder is not None:
            raise InputError("builder: a replay run builds nothing (its runner answers whole "
                             "records)")
        return "replay", runner
    return kind_of(runner), runner
