"""The loop: ask the strategy, measure, record, tell, until the budget is spent."""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bocast import interrupt
from bocast.records.record import Record, best_record, ranks_by_ratio
from bocast.run import pipeline
from bocast.space.knobs import Config
from bocast.space.space import Space
from bocast.strategies.base import Strategy


@runtime_checkable
class SupportsMeasure(Protocol):
    """What :class:`Tuner` calls on its measurer: the live engine
    (:class:`bocast.measure.engine.Measurer`) and the measurer of a runner that answers whole
    records, replay's (:class:`bocast.measure.engine.RecordMeasurer`), both made by
    :func:`bocast.measure.parts.make_measurer`. A ``clock_s`` attribute, where present,
    is the simulated time of the trials (replay: their recorded build and run seconds)."""

    def measure(self, configs: Sequence[Config], *, source: str = "") -> list[Record]:
        """Measure ``configs``; their records, each already in the store (where there is one),
        in the order they were written."""
        ...


@runtime_checkable
class SupportsPrepareRun(SupportsMeasure, Protocol):
    """A measurer whose measurement has two halves (:func:`run_interleaved`): ``prepare``
    (dedupe, build; may run in another thread while ``run`` of another batch runs) and
    ``run`` (time what built, record, return every record of the batch)."""

    def prepare(self, configs: Sequence[Config], *, source: str = "") -> Any:
        ...

    def run(self, batch: Any) -> list[Record]:
        ...


@dataclass
class Trajectory:
    """One run's trials in the order they were measured, with its best-so-far curve (what
    :class:`Tuner` returns; :class:`bocast.TuneResult` is the public summary of a tune run)."""

    records: list[Record]
    best_so_far: list[float]          # best TFLOPS after each trial (0 until the first success)
    seconds: float                    # wall time
    simulated_seconds: float | None   # replay: recorded build + run time of the trials
    proposal_seconds: list[float] = field(default_factory=list)
    optimum: float | None = None      # best TFLOPS the runner knows of (replay datasets)
    reference: float | None = None    # vendor library TFLOPS

    @property
    def trials(self) -> int:
        return len(self.records)

    @property
    def best(self) -> Record | None:
        return best_record(self.records)

    @property
    def best_tflops(self) -> float | None:
        return self.best.tflops if self.best else None

    @property
    def best_vs_reference(self) -> float | None:
        """The best kernel's ratio to the reference: the one timed beside it where the run ranks
        by that (:func:`~bocast.records.record.ranks_by_ratio`), else its TFLOPS over the
        reference of the run's start; None without either."""
        if self.best is not None and ranks_by_ratio(self.records):
            return self.best.vs_reference
        return self.best_tflops / self.reference if self.reference and self.best_tflops else None

    def trials_to(self, fraction: float, target: float | None = None) -> int | None:
        """First trial (1-based) whose best-so-far reaches ``fraction`` of ``target``
        (default: the known optimum)."""
        target = target if target is not None else self.optimum
        if not target:
            return None
        return first_reaching(self.best_so_far, fraction * target)

    def summary(self) -> dict[str, Any]:
        out = {"trials": self.trials, "best_tflops": self.best_tflops,
               "seconds": round(self.seconds, 2),
               "status": _count(r.status.value for r in self.records),
               "median_proposal_s": (sorted(self.proposal_seconds)[len(self.proposal_seconds) // 2]
                                     if self.proposal_seconds else None)}
        if self.simulated_seconds is not None:
            out["simulated_seconds"] = round(self.simulated_seconds, 1)
        if self.optimum:
            out["optimum_tflops"] = self.optimum
            out["trials_to_95pct"] = self.trials_to(0.95)
        if self.reference and self.best_tflops:
            out["reference_tflops"] = self.reference
            out["best_vs_reference"] = self.best_vs_reference
        if self.best:
            out["best_config"] = self.best.config
        return out


def best_so_far(records: Sequence[Record], *, start: float = 0.0) -> list[float]:
    """Best TFLOPS after each record (``start`` until the first success): ``start`` continues
    the curve of earlier records."""
    out, best = [], start
    for r in records:
        best = max(best, r.tflops or 0.0) if r.ok else best
        out.append(best)
    return out


def first_reaching(curve: Sequence[float], target: float) -> int | None:
    """The first trial (1-based) at which a best-so-far ``curve`` reaches ``target``; None if
    it never does."""
    return next((i + 1 for i, b in enumerate(curve) if b >= target), None)


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


class Tuner:
    """Drives ``strategy`` with ``measurer`` (:class:`SupportsMeasure`) under a budget of
    trials and, optionally, wall seconds. The strategy sees only configurations and records.

    :meth:`run` is the whole loop; :meth:`start`, :meth:`ask`, :meth:`tell`, :meth:`done` and
    :meth:`result` are its steps, for drivers that interleave several tuners
    (:func:`run_interleaved`)."""

    def __init__(self, strategy: Strategy, measurer: SupportsMeasure, *, trials: int,
                 seconds: float | None = None,
                 batch_size: int = 32, optimum: float | None = None,
                 reference: float | None = None, reference_label: str = "reference",
                 meter=None, source: str | None = None):
        if trials < 1:
            raise ValueError("budget must allow at least one trial")
        self.strategy, self.measurer = strategy, measurer
        self.trials, self.seconds, self.batch_size = trials, seconds, batch_size
        self.optimum, self.reference = optimum, reference
        self.reference_label = reference_label  # what the ratio is to, e.g. "cuBLAS"
        self.meter = meter  # a bocast.progress.Progress, told after every batch
        self.source = source or strategy.name  # the records' source column
        self.start()

    def start(self, previous: Sequence[Record] = ()) -> None:
        """Begin, or resume after the finished ``previous`` trials (the store's, in order) as
        the uninterrupted run would have gone on (:meth:`_resume`)."""
        self.records: list[Record] = []
        self.best: list[float] = []
        self.proposal_s: list[float] = []
        self.exhausted = False
        self._held: list[Record] = []    # stored trials of a batch cut short by the stop ...
        self._pending: list[Config] = []  # ... and its configurations still to measure
        self._asked: collections.deque[int] = collections.deque()  # sizes of untold batches
        if previous:
            self._resume(previous)
        self.t0 = time.perf_counter()
        if self.meter is not None:
            self._show()

    def _resume(self, previous: Sequence[Record]) -> None:
        """Replay the run that wrote ``previous``: ask each of its batches again (the same
        sizes as :meth:`ask`) and tell the stored trials of that batch, so that the strategy
        is in the state the uninterrupted run was in, not merely told the same trials. That
        state is more than the trials: the GP's hyperparameters warm-start from the previous
        round's, the CGA's population carries over from round to round, and a batch asked
        after 20 trials is not the one asked after 16 (the RNG of a round is seeded by the
        history). A batch the stop cut short is completed with the configurations it was
        asked with (:meth:`ask` returns the rest).

        A batch's trials are the next stored ones that it asked for; fewer than asked and not
        the last means some were never recorded (a refused RPC run), as in the uninterrupted
        run. A stored trial that the batch did not ask for means the store was not written
        by this run's asks (another version of the strategy, another batch size): the rest is
        then told at once, which is all a resume could do before."""
        i = 0
        while i < len(previous):
            n = min(self.batch_size, self.trials - i)
            t = time.perf_counter()
            configs = self.strategy.ask(n) if n > 0 else []
            asked_s = time.perf_counter() - t
            asked = {Space.key(c) for c in configs}
            j = i
            while j < len(previous) and j - i < len(configs) and previous[j].key in asked:
                j += 1
            if j == i:
                self._add(previous[i:])
                self.strategy.tell(list(previous[i:]))
                return
            batch = list(previous[i:j])
            self._add(batch)
            if j == len(previous) and len(batch) < len(configs):
                stored = {r.key for r in batch}
                self._held = batch
                self._pending = [c for c in configs if Space.key(c) not in stored]
                self.proposal_s.append(asked_s)  # the proposal of the batch being completed
                return
            self.strategy.tell(batch)
            i = j

    def _add(self, rs: Sequence[Record]) -> None:
        self.records += rs
        self.best += best_so_far(rs, start=self.best[-1] if self.best else 0.0)

    def done(self) -> bool:
        return (self.exhausted or len(self.records) >= self.trials
                or (self.seconds is not None and time.perf_counter() - self.t0 > self.seconds))

    def can_ask(self) -> bool:
        """Whether another batch may be asked before the ones asked are told (a strategy that
        is not :attr:`~bocast.strategies.base.Strategy.adaptive`): budget not all asked for."""
        return (not self.done()
                and len(self.records) + sum(self._asked) + len(self._pending) < self.trials)

    def ask(self) -> list[Config]:
        """The next batch (at most what the budget has left, counting batches asked and not
        yet told); empty once the candidates are exhausted. After a resume inside a batch: the
        rest of that batch."""
        if self._pending:
            configs, self._pending = self._pending, []
        else:
            n = min(self.batch_size, self.trials - len(self.records) - sum(self._asked))
            t = time.perf_counter()
            configs = self.strategy.ask(n)
            self.proposal_s.append(time.perf_counter() - t)
            self.exhausted = not configs
        self._asked.append(len(configs))
        return configs

    def tell(self, records: Sequence[Record]) -> None:
        """The records of the oldest batch asked and not yet told (fewer than asked where
        some were never recorded: a refused RPC run, a configuration already in the store)."""
        if self._asked:
            self._asked.popleft()
        if not records and not self._held:
            return  # an empty batch: the candidates ran out
        self._add(records)
        # a batch completed after a resume is told whole, as the uninterrupted run told it
        told, self._held = self._held + list(records), []
        self.strategy.tell(told)
        if self.meter is not None:
            self._show()

    def result(self) -> Trajectory:
        return Trajectory(self.records, self.best, time.perf_counter() - self.t0,
                          getattr(self.measurer, "clock_s", None), self.proposal_s, self.optimum,
                          self.reference)

    def run(self, previous: Sequence[Record] = ()) -> Trajectory:
        """The whole run, resumed after ``previous`` (:meth:`start`): the one loop,
        :func:`run_interleaved`, with this tuner alone; or, with a measurer that streams
        (``ahead`` > 0: GPU servers that build), the pipelined loop
        (:func:`bocast.run.pipeline.run_pipelined`: later batches proposed while earlier ones are
        measured, with them as pending points)."""
        ahead = pipeline.ahead_of(self, previous)
        if ahead:
            self.start()
            return pipeline.run_pipelined(self, ahead, previous)
        self.start(previous)
        return run_interleaved([self])[0]

    def _show(self) -> None:
        b = self.best[-1] if self.best else 0.0
        note = []
        # the reference re-timed after the last batch, where the measurer times one
        reference = getattr(self.measurer, "latest_reference", None) or self.reference
        paired = best_record(self.records)
        if paired is not None and ranks_by_ratio(self.records):  # its best by it, with it
            b = paired.tflops or 0.0
            note.append(f"{paired.vs_reference:.2f}x {self.reference_label} (paired)")
        elif reference:
            note.append(f"{b / reference:.2f}x {self.reference_label}")
        if self.optimum:
            note.append(f"{b / self.optimum:.0%} of dataset best")
        note.append(f"proposal {self.proposal_s[-1]:.1f} s" if self.proposal_s else "")
        self.meter.update(len(self.records), best=b, note=", ".join(n for n in note if n))


def run_interleaved(tuners: Sequence[Tuner], *, on_batch=None, ahead: int = 2) -> list[Trajectory]:
    """Run several tuners round-robin, one batch at a time, as a three-stage pipeline: while
    one tuner's batch runs on the GPU (this thread), the next one's is built and the one after
    is proposed (one thread each; ``ahead`` batches are prepared ahead of the one running).
    This is the one loop: a comparison's live arms take turns in it, and every other run is
    one tuner in it (:meth:`Tuner.run`: ``bocast tune``, replay, an API study's ``optimize``,
    ``bocast measure`` with a strategy that lists the sample or the sub-space).

    A measurer that offers ``prepare``/``run`` (:class:`SupportsPrepareRun`: the live engine,
    replay) builds one batch while another runs; one with ``measure`` alone (an API study's
    objective) measures in ``run``. Measurers may share one builder and one runner: the
    runner times one batch at a time and the builder builds one batch at a time. A tuner
    proposes only after it has been told its previous batch, so each trajectory is what it
    would be alone; only wall time is shared. Tuners should be freshly started (or resumed
    with :meth:`Tuner.start`) before the call. ``on_batch(tuner)`` is called after each
    finished batch.

    A strategy that is not :attr:`~bocast.strategies.base.Strategy.adaptive` is asked again as
    soon as its batch is asked, so its next batch builds while this one runs."""
    halves = {id(t): t.measurer if isinstance(t.measurer, SupportsPrepareRun)
              else _OnePhase(t.measurer) for t in tuners}
    waiting = collections.deque(t for t in tuners if not t.done())
    inflight: collections.deque = collections.deque()

    with ThreadPoolExecutor(max_workers=1) as asker, ThreadPoolExecutor(max_workers=1) as builder:
        def launch(t: Tuner):
            asked = asker.submit(t.ask)

            def prepare():
                configs = asked.result()
                return t, (halves[id(t)].prepare(configs, source=t.source) if configs else None)

            return asked, builder.submit(prepare)

        while waiting or inflight:
            while waiting and len(inflight) < ahead + 1:
                interrupt.check()  # between batches: every record told so far is in the store
                t = waiting.popleft()
                if not t.strategy.adaptive and not t.can_ask():
                    continue  # budget asked for, or time up: its batches in flight finish
                asked, prepared = launch(t)
                inflight.append(prepared)
                if not t.strategy.adaptive:
                    asked.result()  # such an ask takes no time
                    waiting.append(t)
            tuner, batch = inflight.popleft().result()
            tuner.tell(halves[id(tuner)].run(batch) if batch is not None else [])
            if batch is not None and on_batch is not None:
                on_batch(tuner)
            if tuner.strategy.adaptive and not tuner.done():
                waiting.append(tuner)
    return [t.result() for t in tuners]


class _OnePhase:
    """A measurer with ``measure`` alone, seen as the two halves (nothing is done ahead)."""

    def __init__(self, measurer: SupportsMeasure):
        self.measurer = measurer

    def prepare(self, configs: Sequence[Config], *, source: str = "") -> Any:
        return list(configs), source

    def run(self, batch: Any) -> list[Record]:
        configs, source = batch
        return self.measurer.measure(configs, source=source)
