"""The pipelined loop: batches proposed ahead of the measurement, measured as one stream.

The plain loop (:func:`bocast.run.tuner.run_interleaved`) asks a batch, measures it, tells it, and
asks the next: every batch waits for its slowest kernel, and the next proposal waits for the
batch. On a fleet of GPU servers that build what they time (``runner: rpc``), that barrier
cost a third of the throughput (experiments/results/fleet_scaling_h200x2: a kernel's build
takes 1.4 s at the median and up to 3.5 s, and the servers idle while the slowest builds and
while the next batch is proposed). Here, with a measurer that streams
(:meth:`bocast.measure.engine.Measurer.stream`, ``ahead`` > 0):

- up to ``ahead + 1`` batches are asked and not yet told (the *window*); batch ``i + ahead`` is
  asked as soon as batch ``i - 1`` is told, with the configurations of the batches in the
  window as the strategy's pending points (``Strategy.ask(n, pending)``; BO conditions on them
  as a Kriging believer, the others never propose them again);
- every asked configuration goes at once to the stream, where the servers take the next one
  as soon as a build worker is free: batch ``i + 1`` fills the workers that batch ``i``'s fast
  kernels leave, so nothing waits for a straggler, and the proposal of the next batch runs
  while the servers measure;
- a batch is told when all its records are in, oldest batch first, its records in the order
  they were asked: the strategy sees the same history and the same pending points at every
  ask whatever order the kernels finish in, on whichever servers. A run is a function of its
  seed, its batch and ``ahead``, not of timing, so a resumed run is the same run:
  :func:`replay` asks the batches again in the same order, tells each once the store holds all
  of it, and submits what the store lacks (kernels in flight when the run stopped).

Records reach the store as they are measured (one transaction each, as always), so a stop at
any moment loses no finished kernel; kernels in flight are not recorded and are measured again
on resume. A store that the plain loop began is resumed by the plain loop
(``meta["pipeline"]`` holds the ``ahead`` a pipelined run began with; a resume keeps it).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bocast import interrupt
from bocast.records.record import Record
from bocast.space.knobs import Config
from bocast.space.space import Space

#: a :class:`bocast.run.tuner.Tuner` (whose ``run`` calls this module: not imported here)
Tuner = Any
#: store meta key of a pipelined run: {"ahead": k}
META = "pipeline"


@dataclass
class Asked:
    """One batch asked and not yet told: its configurations and the records in so far."""

    configs: list[Config]
    keys: list[str] = field(default_factory=list)
    got: dict[str, Record] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.keys = [Space.key(c) for c in self.configs]

    def complete(self) -> bool:
        return all(k in self.got for k in self.keys)

    def records(self) -> list[Record]:
        """Its records in the order asked (what the strategy is told)."""
        return [self.got[k] for k in self.keys if k in self.got]


class Window:
    """The batches asked and not yet told, oldest first, for one
    :class:`~bocast.run.tuner.Tuner`."""

    def __init__(self, tuner: Tuner, ahead: int):
        self.t, self.ahead = tuner, ahead
        self.batches: collections.deque[Asked] = collections.deque()
        self.told = 0  # records told to the strategy
        self.told_keys: set[str] = set()
        self.stored: dict[str, Record] = {}  # a replay's records: each batch asked finds its own

    def asked(self) -> int:
        return self.told + sum(len(a.keys) for a in self.batches)

    def can_ask(self) -> bool:
        t = self.t
        return (not t.exhausted and len(self.batches) <= self.ahead
                and self.asked() < t.trials
                and (t.seconds is None or time.perf_counter() - t.t0 <= t.seconds))

    def ask(self, *, timed: bool = True) -> Asked | None:
        """The next batch, asked with the window's configurations pending; None (and the
        tuner exhausted) when the strategy has none left."""
        n = min(self.t.batch_size, self.t.trials - self.asked())
        pending = [c for a in self.batches for c in a.configs]
        t0 = time.perf_counter()
        configs = self.t.strategy.ask(n, pending)
        if timed:
            self.t.proposal_s.append(time.perf_counter() - t0)
        if not configs:
            self.t.exhausted = True
            return None
        batch = Asked(configs)
        batch.got = {k: self.stored[k] for k in batch.keys if k in self.stored}
        self.batches.append(batch)
        return batch

    def arrived(self, rec: Record) -> bool:
        """A record of a batch in the window; False if none asked it."""
        for a in self.batches:
            if rec.key in a.keys:
                a.got[rec.key] = rec
                return True
        return False

    def drop(self, keys: set[str]) -> None:
        """Configurations the measurement skipped (the store held them): no record will come."""
        for a in self.batches:
            a.keys = [k for k in a.keys if k not in keys or k in a.got]

    def tell_one(self) -> list[Record] | None:
        """Tell the oldest batch if all of it is in: its records, in the order asked (None if
        it is not complete). One batch at a time, each followed by the asks it allows
        (:func:`advance`), so every ask sees the same history and pending points whatever order
        the batches complete in."""
        if not (self.batches and self.batches[0].complete()):
            return None
        records = self.batches.popleft().records()
        self.t.strategy.tell(records)
        self.told += len(records)
        self.told_keys.update(r.key for r in records)
        return records


def advance(window: Window, stream: Any = None) -> None:
    """Ask while the window has room, tell the oldest batch if it is complete, and again until
    neither can be done; each batch asked goes to ``stream`` (none: a replay), which is told
    each batch told."""
    while True:
        while window.can_ask():
            if stream is not None:
                interrupt.check()  # between batches: every record so far is in the store
            batch = window.ask(timed=stream is not None)
            if batch is None:
                break
            if stream is not None:
                window.drop(stream.submit(batch.configs))
        told = window.tell_one()
        if told is None:
            return
        if stream is not None:
            stream.told(told)
            if window.t.meter is not None:
                window.t._show()


def replay(t: Tuner, window: Window, previous: Sequence[Record]) -> list[Config]:
    """Put the strategy where the run that wrote ``previous`` (the store's records, in order)
    was: ask its batches in the same order with the same pending points, tell each once all of
    it is stored; returns the configurations asked and not stored (measured again). A stored
    record that none of those asks asked means another loop or strategy wrote the store: what
    is left is then told at once and nothing is pending (as :meth:`Tuner._resume` does)."""
    t._add(previous)
    window.stored = {r.key: r for r in previous}
    advance(window)
    window.stored = {}
    if window.told + sum(len(a.got) for a in window.batches) != len(previous):
        # stored records that the replayed asks did not ask for
        t.strategy.tell([r for r in previous if r.key not in window.told_keys])
        window.batches.clear()
        window.told = len(previous)
        return []
    return [c for a in window.batches for c, k in zip(a.configs, a.keys) if k not in a.got]


def ahead_of(t: Tuner, previous: Sequence[Record]) -> int:
    """How many batches ``t`` proposes ahead: its measurer's ``ahead`` for a new run (kept in
    the store's meta), the one the run began with for a resumed one (0, the plain loop, for a
    store the plain loop began), 0 where the measurer does not stream."""
    m: Any = t.measurer
    ahead, store = int(getattr(m, "ahead", 0)), getattr(m, "store", None)
    if ahead <= 0 or store is None or not hasattr(m, "stream"):
        return 0
    if previous:
        held = store.get_meta(META)
        return int(held.get("ahead") or 0) if isinstance(held, dict) else 0
    store.set_meta(META, {"ahead": ahead})
    return ahead


def run_pipelined(t: Tuner, ahead: int, previous: Sequence[Record] = ()) -> Any:
    """The whole run of ``t`` (freshly started) through its measurer's stream, ``ahead``
    batches proposed ahead (:func:`ahead_of`), resumed after ``previous``; see the module
    docstring."""
    m: Any = t.measurer
    window = Window(t, ahead)
    resubmit = replay(t, window, previous) if previous else []
    stream = m.stream(t.source)
    try:
        if resubmit:
            window.drop(stream.submit(resubmit))
        while True:
            advance(window, stream)
            if not window.batches:
                break
            rec = stream.get(0.5)
            interrupt.check()
            if rec is not None:
                t._add([rec])
                window.arrived(rec)
    except BaseException:
        stream.close(wait=False)  # kernels in flight: not recorded, measured on resume
        raise
    stream.close()
    return t.result()
