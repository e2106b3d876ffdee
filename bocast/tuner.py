"""The loop: ask the strategy, measure, record, tell, until the budget is spent."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from bocast.records import Record
from bocast.strategies.base import Strategy


@dataclass
class TuneResult:
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
        ok = [r for r in self.records if r.ok and r.tflops]
        return max(ok, key=lambda r: r.tflops) if ok else None

    @property
    def best_tflops(self) -> float | None:
        return self.best.tflops if self.best else None

    def trials_to(self, fraction: float, target: float | None = None) -> int | None:
        """First trial (1-based) whose best-so-far reaches ``fraction`` of ``target``
        (default: the known optimum)."""
        target = target if target is not None else self.optimum
        if not target:
            return None
        for i, b in enumerate(self.best_so_far):
            if b >= fraction * target:
                return i + 1
        return None

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
            out["best_vs_reference"] = self.best_tflops / self.reference
        if self.best:
            out["best_config"] = self.best.config
        return out


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


class Tuner:
    """Drives ``strategy`` with ``measurer`` (anything with ``measure(configs) -> records``)
    under a budget of trials and, optionally, wall seconds."""

    def __init__(self, strategy: Strategy, measurer, *, trials: int, seconds: float | None = None,
                 batch_size: int = 32, optimum: float | None = None,
                 reference: float | None = None, progress: bool = False):
        if trials < 1:
            raise ValueError("budget must allow at least one trial")
        self.strategy, self.measurer = strategy, measurer
        self.trials, self.seconds, self.batch_size = trials, seconds, batch_size
        self.optimum, self.reference, self.progress = optimum, reference, progress

    def run(self, previous: Sequence[Record] = ()) -> TuneResult:
        records: list[Record] = []
        best: list[float] = []

        def add(rs: Sequence[Record]) -> None:
            for r in rs:
                records.append(r)
                prev = best[-1] if best else 0.0
                best.append(max(prev, r.tflops or 0.0) if r.ok else prev)

        if previous:  # resume: the strategy learns the finished trials first
            add(previous)
            self.strategy.tell(list(previous))
        t0 = time.perf_counter()
        proposal_s = []
        while len(records) < self.trials:
            if self.seconds is not None and time.perf_counter() - t0 > self.seconds:
                break
            n = min(self.batch_size, self.trials - len(records))
            t = time.perf_counter()
            configs = self.strategy.ask(n)
            proposal_s.append(time.perf_counter() - t)
            if not configs:
                break  # the candidate set is exhausted
            new = self.measurer.measure(configs, source=self.strategy.name)
            add(new)
            self.strategy.tell(new)
            if self.progress:
                self._show(records, best, proposal_s[-1])
        if self.progress:
            print(file=sys.stderr)
        return TuneResult(records, best, time.perf_counter() - t0,
                          getattr(self.measurer, "clock_s", None), proposal_s, self.optimum,
                          self.reference)

    def _show(self, records, best, proposal_s) -> None:
        b = best[-1] if best else 0.0
        line = f"trial {len(records)}/{self.trials}  best {b:.1f} TFLOPS"
        if self.reference:
            line += f" ({b / self.reference:.2f}x reference)"
        if self.optimum:
            line += f" ({b / self.optimum:.0%} of dataset best)"
        line += f"  proposal {proposal_s:.1f} s"
        end = "\r" if sys.stderr.isatty() else "\n"
        print(line.ljust(90), end=end, file=sys.stderr, flush=True)
