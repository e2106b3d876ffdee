"""One assembly of a run: a strategy, a measurer, a budget and the callbacks, put together into
the :class:`~bocast.run.tuner.Tuner` that drives them. Every loop bocast runs is made here: a
tune (:mod:`bocast.run.tune_run`), each run of a comparison (:mod:`bocast.run.comparison`),
``bocast measure``, a study's ``optimize`` (:mod:`bocast.run.study`) and the RPC check
(:mod:`bocast.tools.rpc_check`), so an option of a runner, a measurer or a strategy is wired
once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bocast.measure.parts import make_measurer
from bocast.run.tuner import SupportsMeasure, Tuner
from bocast.strategies import make_strategy
from bocast.strategies.base import Strategy

if TYPE_CHECKING:
    from bocast.measure.builder import Builder
    from bocast.measure.runner import Runner
    from bocast.records.record import Record
    from bocast.records.store import Store
    from bocast.space.operators.operator import Operator


def assemble(strategy: Strategy | str, *, trials: int, batch_size: int,
             seconds: float | None = None,
             candidates: Any = None, seed: int = 0, options: Mapping[str, Any] | None = None,
             op: Operator | None = None, store: Store | None = None,
             runner: Runner | None = None, builder: Builder | None = None,
             measurer: SupportsMeasure | None = None, session_info: dict | None = None,
             on_record: Callable[[Record], None] | None = None, batch_reference: bool = False,
             optimum: float | None = None, reference: float | None = None,
             reference_label: str = "reference", meter: Any = None,
             source: str | None = None) -> Tuner:
    """The Tuner of one run, not yet started on a store's records (:meth:`Tuner.run` or
    :meth:`Tuner.start` with them resumes).

    The strategy: an object, or a name made here over ``candidates`` with ``seed`` and
    ``options`` (:func:`bocast.strategies.make_strategy`). The measurer: ``measurer`` where the
    caller has one of its own (a study's objective), else the one of ``runner``
    (:func:`bocast.measure.parts.make_measurer`: ``op``, ``store``, ``builder``,
    ``session_info``, ``on_record``, ``batch_reference``). The budget: ``trials``, ``seconds``
    (None: no limit) and ``batch_size``. What the run reports against: ``optimum`` (replay: the
    dataset's best), ``reference`` and its ``reference_label``; ``meter`` a progress line told
    after every batch; ``source`` the records' source column (default: the strategy's name)."""
    if isinstance(strategy, str):
        strategy = make_strategy(strategy, candidates, seed=seed, **dict(options or {}))
    if measurer is None:
        if op is None:
            raise ValueError("assemble: give a measurer, or the operator (and store, runner, "
                             "builder) to measure with")
        measurer = make_measurer(op, store, runner, builder, session_info=session_info,
                                 on_record=on_record, batch_reference=batch_reference)
    return Tuner(strategy, measurer, trials=trials, seconds=seconds, batch_size=batch_size,
                 optimum=optimum, reference=reference, reference_label=reference_label,
                 meter=meter, source=source)
