"""The one path from proposed configurations to records.

Every live measurement goes through :meth:`Measurer.measure`: it rejects configurations that break a
known constraint (recorded as ``invalid`` without building), skips those already in the store,
builds the rest in parallel, runs the kernels that built, and appends each finished record to
the store before anyone else sees it. A run killed at any point therefore resumes from the store
with no finished row lost and none repeated.

:meth:`Measurer.prepare` (dedupe, validate, build) and :meth:`Measurer.run` (time what built) are
the two halves of a measurement, so that building one batch can overlap running another: the
next batch of the same run, or of another run that shares the builder and runner
(:func:`bocast.run.tuner.run_interleaved`).

A runner that answers whole records (:class:`~bocast.measure.runner.RecordRunner`: replay) has
:class:`RecordMeasurer` instead: nothing to validate or build, each record written as asked.
:func:`bocast.measure.parts.make_measurer` makes the one a runner needs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bocast import interrupt
from bocast.measure.builder import Builder, BuildResult
from bocast.measure.runner import RecordRunner, Runner, RunResult
from bocast.measure.telemetry import TELEMETRY, batch_telemetry
from bocast.records.provenance import provenance
from bocast.records.record import FEATURES, RUN_FIELDS, Record
from bocast.records.status import Status
from bocast.records.store import Store
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator
from bocast.space.space import Space


class Measurer:
    """``batch_reference``: after each batch that timed kernels, time the runner's reference
    again and record it with the batch's clock, power and temperature
    (:meth:`bocast.records.store.Store.add_batch`); :attr:`latest_reference` is then the newest
    reading, which the progress line divides by (a reference timed once at the start, on a
    cooler GPU, made the ratio overstate: issue 40)."""

    def __init__(self, op: Operator, store: Store, builder: Builder, runner: Runner | None, *,
                 session_info: dict | None = None,
                 on_record: Callable[[Record], None] | None = None,
                 batch_reference: bool = False):
        self.op, self.store, self.builder, self.runner = op, store, builder, runner
        self.on_record = on_record  # told every record as it is written (a progress meter)
        self.session = store.start_session(provenance(session_info))
        self.batch_reference = batch_reference
        self.latest_reference: float | None = None  # TFLOPS of the newest batch reference

    def measure(self, configs: Sequence[Config], *, source: str = "",
                on_record: Callable[[Record], None] | None = None) -> list[Record]:
        """Measure configurations not yet in the store (those already there, or repeated, are
        skipped); returns the new records in the order they were written."""
        return self.run(self.prepare(configs, source=source, on_record=on_record))

    def prepare(self, configs: Sequence[Config], *, source: str = "",
                on_record: Callable[[Record], None] | None = None) -> Prepared:
        """First half of a measurement, safe to overlap with :meth:`run` of another batch:
        skip what the store holds (and repeats), record invalid configurations and failed
        builds, and return what can run."""
        seen = self.store.keys()
        batch = Prepared(source, on_record or self.on_record)
        todo: list[tuple[str, Config]] = []
        for c in configs:
            key = Space.key(c)
            if key not in seen:
                seen.add(key)
                todo.append((key, c))
        violations = self.op.space.validate_many([c for _, c in todo])
        buildable = []
        for (key, c), v in zip(todo, violations):
            if v:
                self._keep(batch, Record(key, c, Status.INVALID, error=", ".join(v), source=source))
            else:
                buildable.append((key, c))
        if getattr(self.runner, "builds_on_servers", False):
            batch.on_servers = buildable  # built where they are timed: run() does both
            return batch
        builds = self.builder.build(self.op, [c for _, c in buildable]) if buildable else []
        for (key, c), b in zip(buildable, builds):
            if b.status is Status.OK and self.runner is not None:
                batch.runnable.append((c, b))
            else:
                self._keep(batch, to_record(key, c, b, None, source))
        return batch

    def run(self, batch: Prepared) -> list[Record]:
        """Second half: run what built (or, with a runner whose servers build, build and run
        there); returns every record of the batch in write order."""
        if batch.on_servers:
            def built_and_ran(i: int, b: BuildResult, r: RunResult | None) -> None:
                key, c = batch.on_servers[i]
                self._keep(batch, to_record(key, c, b, r, batch.source))

            self.runner.build_and_run(  # type: ignore[union-attr]
                self.op, [c for _, c in batch.on_servers], self.builder.options(),
                on_result=built_and_ran)
            if self.batch_reference:
                self._record_batch(batch)
        if batch.runnable:
            def ran(i: int, r: RunResult) -> None:
                c, b = batch.runnable[i]
                self._keep(batch, to_record(b.key, c, b, r, batch.source))

            assert self.runner is not None  # prepare() keeps builds runnable only with one
            self.runner.run(self.op, [b for _, b in batch.runnable], on_result=ran)
            if self.batch_reference:
                self._record_batch(batch)
        return batch.records

    @property
    def ahead(self) -> int:
        """How many batches the loop may propose ahead of the oldest one still measured
        (:mod:`bocast.run.pipeline`): the runner's ``ahead`` where it builds on its servers and
        takes configurations while it runs (:meth:`stream`); else 0, batch after batch."""
        if getattr(self.runner, "builds_on_servers", False) and hasattr(self.runner, "open_feed"):
            return int(getattr(self.runner, "ahead", 0))
        return 0

    def stream(self, source: str = "") -> Stream:
        """A measurement that takes configurations while it runs (:class:`Stream`); only where
        :attr:`ahead` is not 0."""
        return Stream(self, source)

    def _record_batch(self, batch: Prepared) -> None:
        """The batch's readings: the median clock, power and temperature of its timed kernels
        and the reference timed now (a failure to time it is recorded, never fatal)."""
        assert self.runner is not None
        try:
            ref, error = self.runner.reference(self.op), None
        except RuntimeError as e:  # the runner's worker failed on it: the batch stands
            ref, error = None, str(e)
        self._batch_row(batch.records, ref, error)

    def _batch_row(self, records: Sequence[Record], ref: dict[str, Any] | None,
                   error: str | None = None) -> None:
        info: dict[str, Any] = {"keys": [r.key for r in records], **batch_telemetry(records)}
        if error:
            info["reference_error"] = error[:300]
        if ref and ref.get("tflops"):
            info["reference"] = {k: ref[k] for k in ("tflops", "latency_ms", *TELEMETRY)
                                 if k in ref}
            self.latest_reference = float(ref["tflops"])
        self.store.add_batch(self.session, info)

    def _keep(self, batch: Prepared, rec: Record) -> None:
        self.store.append(rec, self.session)  # on disk before anyone sees it
        batch.records.append(rec)
        if batch.on_record is not None:
            batch.on_record(rec)


class Stream:
    """One run's measurement as a stream (the pipelined loop, :mod:`bocast.run.pipeline`):
    :meth:`submit` checks configurations as :meth:`Measurer.prepare` does (skips what the store
    holds or was submitted, records the invalid ones at once) and puts the rest on the runner's
    feed (:meth:`~bocast.measure.rpc.runner.RpcRunner.open_feed`), where the servers build and time
    them; every record, in the order written to the store, comes out of :meth:`get`."""

    def __init__(self, measurer: Measurer, source: str = ""):
        self.m = measurer
        self.batch = Prepared(source, measurer.on_record)
        self.out: queue.Queue[Record] = queue.Queue()
        self.seen = measurer.store.keys()
        self.queued: dict[int, tuple[str, Config]] = {}  # the feed's index -> configuration
        self._lock = threading.Lock()  # one record at a time: store order is get()'s order
        self.feed = measurer.runner.open_feed(  # type: ignore[union-attr]
            measurer.op, measurer.builder.options(), self._answered)

    def submit(self, configs: Sequence[Config]) -> set[str]:
        """Measure ``configs``; returns the keys skipped (the store holds them, or they were
        submitted before): no record of theirs will come."""
        todo, skipped = [], set()
        for c in configs:
            key = Space.key(c)
            if key in self.seen:
                skipped.add(key)
            else:
                self.seen.add(key)
                todo.append((key, c))
        buildable = []
        for (key, c), v in zip(todo, self.m.op.space.validate_many([c for _, c in todo])):
            if v:
                self._keep(Record(key, c, Status.INVALID, error=", ".join(v),
                                  source=self.batch.source))
            else:
                buildable.append((key, c))
        with self._lock:  # an answer cannot come before its index is known
            for i, kc in zip(self.feed.put([c for _, c in buildable]), buildable):
                self.queued[i] = kc
        return skipped

    def _answered(self, i: int, b: BuildResult, r: RunResult | None) -> None:
        with self._lock:
            key, c = self.queued.pop(i)
        self._keep(to_record(key, c, b, r, self.batch.source))

    def _keep(self, rec: Record) -> None:
        with self._lock:
            self.m._keep(self.batch, rec)
            self.out.put(rec)

    def get(self, timeout_s: float) -> Record | None:
        """The next record written, waiting up to ``timeout_s``; None if none came. Raises
        what stopped the feed (no server for ``server_wait_s``: RpcUnavailable)."""
        try:
            return self.out.get(timeout=timeout_s)
        except queue.Empty:
            if self.feed.error is not None:
                raise self.feed.error from None
            return None

    def told(self, records: Sequence[Record]) -> None:
        """The loop told a batch of ``records``: with the measurer's ``batch_reference``, the
        reference is timed once more through the feed (after the kernels queued now) and
        recorded with the batch's readings, as :meth:`Measurer.run` does after a batch."""
        if not self.m.batch_reference or not any(r.measured_on for r in records):
            return

        def answered(raw: dict[str, Any]) -> None:
            failure = raw.get("_failure")
            self.m._batch_row(records, None if failure else raw,
                              f"reference on the RPC server failed: {failure['detail']}"
                              if failure else None)

        self.feed.put_reference(answered)

    def close(self, *, wait: bool = True) -> None:
        """The end of the run: ``wait``, every configuration and reference submitted answered
        first; else those not answered are dropped unrecorded, as a batch cut short."""
        self.feed.close(wait=wait)


class RecordMeasurer:
    """The measurer of a :class:`~bocast.measure.runner.RecordRunner` (replay): each
    configuration's record is the runner's, appended to the store (where there is one) in the
    order asked, with no validation, build or skip (the Tuner's strategies never ask a
    configuration twice; the store refuses one it holds). ``clock_s``, the simulated time of
    the trials, advances by each record's build and run seconds."""

    def __init__(self, runner: RecordRunner, store: Store | None = None, *,
                 session_info: dict | None = None,
                 on_record: Callable[[Record], None] | None = None):
        self.runner, self.store, self.on_record = runner, store, on_record
        self.clock_s = 0.0
        self.session = store.start_session({"runner": runner.name, **runner.origin(),
                                            **(session_info or {})}) \
            if store is not None else None

    def prepare(self, configs: Sequence[Config], *, source: str = "",
                on_record: Callable[[Record], None] | None = None):
        """The engine's two halves (:func:`bocast.run.tuner.run_interleaved`): a lookup has
        nothing to build, so all the work happens in :meth:`run`."""
        return list(configs), source, on_record

    def run(self, batch) -> list[Record]:
        configs, source, on_record = batch
        return self.measure(configs, source=source, on_record=on_record)

    def measure(self, configs: Sequence[Config], *, source: str = "",
                on_record: Callable[[Record], None] | None = None) -> list[Record]:
        out, on_record = [], on_record or self.on_record
        for c in configs:
            interrupt.check()  # between records (replay job processes stop here)
            rec = self.runner.record(c, source)
            self.clock_s += (rec.build_s or 0.0) + (rec.run_s or 0.0)
            if self.store is not None:
                self.store.append(rec, self.session)
            out.append(rec)
            if on_record is not None:
                on_record(rec)
        return out


@dataclass
class Prepared:
    """A batch between :meth:`Measurer.prepare` and :meth:`Measurer.run`."""

    source: str
    on_record: Callable[[Record], None] | None
    records: list[Record] = field(default_factory=list)
    runnable: list[tuple[Config, BuildResult]] = field(default_factory=list)
    on_servers: list[tuple[str, Config]] = field(default_factory=list)  # to build and run there


def to_record(key: str, config: Config, b: BuildResult, r: RunResult | None, source: str) -> Record:
    """The record of one build and, if it ran, its run."""
    # a record keeps the FEATURES of the binary; the build's other figures (ptxas's compile
    # time) are no column of the store, which refuses a record carrying them (check_record)
    rec = Record(key, config, b.status, build_s=b.times.get("total_s"),
                 features={k: v for k, v in b.features.items() if k in FEATURES},
                 stage=b.stage, error=b.error, source=source)
    if b.status is Status.OK and r is not None:
        rec.status = r.status
        rec.error = r.error
        rec.stage = "run" if r.status is not Status.OK else None
        for k in RUN_FIELDS:
            setattr(rec, k, getattr(r, k))
        rec.measured_on = r.extra.get("measured_on")
    return rec
