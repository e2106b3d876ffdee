"""A run of many workloads (issue 41): ``bocast tune OP --shape A --shape B ...``, ``bocast tune
--shapes FILE`` (:mod:`bocast.run.shapes_file`), :func:`tune_many`.

- **One store per workload**: each workload is the run ``bocast tune OP --shape ...`` would be,
  with the command's other options, in ``OUTPUT/NN_OP_SHAPE[_DTYPE][_LAYOUT]/`` (records.db,
  summary.json). ``OUTPUT/summary.json`` and ``summary.md`` hold one table of them all
  (workload, best TFLOPS, ratio to the reference, trials, time), rewritten as each workload
  ends and printed at the end.
- **Warm start from the workloads before**: with ``warm_start: auto`` (the default) the stores of
  the run's finished workloads are candidate sources beside the records library, ranked by the
  same closeness (:func:`bocast.run.warm_sources.choose`). Workload *i* (0-based, in the list's
  order) may start from workloads 0 .. i - W, W the run's *window*: its parallel width as it
  began (1 with the local runner: every workload before). It starts only once those have
  finished, so its sources never depend on which of the workloads running beside it ends
  first: the same list and seed give the same sources and the same trials whatever the timing.
  The run's other workloads (and their library copies) are never its sources. ``none`` starts
  each cold; a list of sources is used as given.
- **Spread over the fleet**: with ``--runner rpc`` up to W workloads run at once, W the number of
  GPU servers of the runner's GPU model registered under the key as the run begins (or
  ``--parallel N``), each in a thread with a runner and a builder of its own (the threads share
  the servers through the tracker, :mod:`bocast.measure.rpc.runner`; the host's cores are shared out
  among the builders unless runner_options.workers is set). The local runner runs them one
  after another, on one GPU worker and one builder for the whole run.
- **Resumed as one run**: ``OUTPUT/plan.json`` holds the list, the options and W; the same command
  resumes it (another list or other options in the same OUTPUT are refused; a larger budget is
  the same run). A finished workload (its summary.json of this budget, its store's trials)
  prints its figure and measures nothing; an interrupted one resumes from its store as a
  single run does (:mod:`bocast.run.tune_run`).
- **Failures**: a workload that fails (the fleet gone: :class:`bocast.errors.RpcUnavailable`)
  starts no further one; those running end, the table is written, the error is raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from bocast import api
from bocast.files import atomic_write
from bocast.many_plan import PLAN, Item, Plan, prepare_many, read_json
from bocast.progress import say
from bocast.run.tune_run import TuneRun

SUMMARY, TABLE = "summary.json", "summary.md"


@dataclass(frozen=True)
class ManyResult:
    """What a run of many found: ``workloads`` one row per workload (as the table), ``table``
    the table's text, ``summary`` the run's summary.json."""

    output: str
    workloads: list[dict[str, Any]]
    table: str
    summary: dict[str, Any] = dataclasses.field(repr=False)


def tune_many(op: str | None = None, shapes: Sequence[Any] | str | os.PathLike = (), *,
              runner: str | None = None, parallel: int | None = None,
              rpc: Mapping[str, Any] | None = None, records: str | os.PathLike | None = None,
              progress: bool = False, **settings: Any) -> ManyResult:
    """``bocast tune OP --shape A --shape B ...`` (``op`` and ``shapes`` a list of shapes:
    tuples, or text as ``--shape`` takes it) or ``bocast tune --shapes FILE`` (``shapes`` the
    file's path; each entry names its operator): every workload tuned in one run (see the
    module docstring). ``settings``: the options of :func:`bocast.tune`'s quick form for every
    workload (``trials``, ``seed``, ``warm_start``, ``"strategy.acquisition"``, ...;
    ``output`` the run's folder); ``parallel``: the window (workloads at once; default 1, with
    rpc the fleet's servers); ``rpc``: the tracker and key (as ``--tracker``, ``--key``)."""
    return ManyRun(prepare_many(op, shapes, runner=runner, parallel=parallel, rpc=rpc,
                                records=records, **settings)).execute(progress=progress)


class _Lane:
    """A runner and a builder that serve one workload after another (made on first use, from
    the first workload's configuration: every workload of a run has the same options)."""

    def __init__(self, workers: int | None):
        self.workers, self.runner, self.builder = workers, None, None

    def serve(self, run: TuneRun) -> TuneRun:
        cfg = run.cfg
        if cfg.runner_class.answers_records:  # each workload replays its own dataset
            return run
        if self.runner is None:
            self.runner = cfg.make_runner(seed=cfg.seed)
        if self.builder is None:
            self.builder = cfg.make_builder(workers=self.workers)
        return dataclasses.replace(run, runner=self.runner, builder=self.builder)

    def close(self) -> None:
        for part in (self.runner, self.builder):
            if part is not None:
                part.close()


class ManyRun:
    """A run of many as :func:`bocast.many_plan.prepare_many` checked it; :meth:`execute`
    runs it (resuming what its output holds)."""

    def __init__(self, plan: Plan):
        self.items, self.output, self.window = plan.items, plan.output, plan.window
        self.runner, self.rpc, self.records = plan.runner, plan.rpc, plan.records
        self.budget, self.plan = plan.budget, plan.plan

    def execute(self, *, progress: bool = True) -> ManyResult:
        """Run every workload not finished before (see the module docstring); write and
        return the table, also when a workload fails or the run is interrupted (then raised)."""
        self.t0 = t0 = time.perf_counter()
        note = say if progress else (lambda _: None)
        os.makedirs(self.output, exist_ok=True)
        plan_path = os.path.join(self.output, PLAN)
        if not os.path.exists(plan_path):
            with atomic_write(plan_path) as f:
                json.dump(self.plan, f, indent=1, sort_keys=True)
        before = read_json(os.path.join(self.output, SUMMARY)) or {}
        self.seconds = {int(r["index"]) - 1: float(r.get("seconds") or 0.0)  # time so far
                        for r in before.get("workloads", [])
                        if isinstance(r, dict) and isinstance(r.get("index"), int)}
        self.rows: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        for it in self.items:
            if (s := self._finished(it)) is not None:
                self.rows[it.index] = self._row(it, s)
                note(f"{self._label(it)}: finished before, nothing measured: "
                     f"{_figure_text(self.rows[it.index])}")
        todo = [it.index for it in self.items if it.index not in self.rows]
        lanes = max(1, min(self.window, len(todo)))
        note(f"{len(self.items)} workloads ({len(self.rows)} finished before) into "
             f"{self.output}; up to {lanes} at once; workload i may warm-start from "
             f"workloads 1 .. i - {self.window} of the list (warm start auto)")
        cores = os.cpu_count() or 1
        pool = [_Lane(max(1, cores // lanes) if lanes > 1 else None) for _ in range(lanes)]
        try:
            self._schedule(todo, pool, progress)
        finally:
            for lane in pool:
                lane.close()
            result = self._write(time.perf_counter() - t0)
        return result

    def _schedule(self, todo: list[int], lanes: list[_Lane], progress: bool) -> None:
        """Start each workload in the list's order once those it may warm-start from have
        finished and a lane is free; one lane: in this thread, one after another."""
        free, failed = list(lanes), None
        running: dict[Future, _Lane] = {}

        def ready(i: int) -> bool:  # its possible sources (0 .. i - window) have finished
            return all(j in self.rows for j in range(i - self.window + 1))

        with (ThreadPoolExecutor(len(lanes), thread_name_prefix="bocast-workload")
              if len(lanes) > 1 else contextlib.nullcontext()) as threads:
            while todo or running:
                while todo and free and failed is None and ready(todo[0]):
                    i, lane = todo.pop(0), free.pop(0)
                    if threads is None:
                        self._one(i, lane, progress, meter=True)
                        free.append(lane)
                    else:
                        running[threads.submit(self._one, i, lane, progress, False)] = lane
                if not running:
                    break
                ended, _ = wait(running, return_when=FIRST_COMPLETED)
                for f in ended:
                    free.append(running.pop(f))
                    failed = failed or f.exception()
        if failed is not None:
            raise failed

    def _one(self, i: int, lane: _Lane, progress: bool, meter: bool) -> None:
        it = self.items[i]
        also = [self.items[j].store for j in range(i - self.window + 1)]
        never = [x.store for x in self.items if x.index != i and x.store not in also]
        label = self._label(it)
        t0 = time.perf_counter()
        try:
            run = api.prepare(it.config, rpc=self.rpc, records=self.records, warm_also=also,
                              warm_never=never)
            summary, lines = lane.serve(run).execute(progress=progress, label=label,
                                                     meter=meter)
        finally:
            with self._lock:
                self.seconds[i] = self.seconds.get(i, 0.0) + time.perf_counter() - t0
        with self._lock:  # when it ran in this session (seconds since it began)
            self.rows[i] = {**self._row(it, summary), "started_s": round(t0 - self.t0, 1),
                            "ended_s": round(time.perf_counter() - self.t0, 1)}
        if progress:
            say(f"{label}: {lines[0]}")

    def _label(self, it: Item) -> str:
        return f"[{it.index + 1}/{len(self.items)}] {it.text}"

    def _finished(self, it: Item) -> dict[str, Any] | None:
        """The workload's summary where it finished this budget: its summary.json names it and
        as many trials as its store holds."""
        from bocast.records.store import Store

        s = read_json(os.path.join(it.folder, "summary.json"))
        if not isinstance(s, dict) or s.get("budget") != self.budget \
                or not os.path.isfile(it.store):
            return None
        with Store.open(it.store) as store:
            return s if s.get("trials") == len(store) else None

    def _row(self, it: Item, s: Mapping[str, Any]) -> dict[str, Any]:
        from bocast.records import library

        mine = {os.path.abspath(x.store): x.index + 1 for x in self.items}
        sources = [mine.get(os.path.abspath(library.local(p))) for p in
                   s.get("warm_start_sources") or []]
        own = [f"#{j}" for j in sources if j]
        other = sum(j is None for j in sources)
        return {"index": it.index + 1, "workload": it.text, **it.workload,
                "name": it.entry.name, "count": it.entry.count, "where": it.where,
                "folder": it.folder, "store": it.store, "status": "finished",
                **{k: s.get(k) for k in ("best_tflops", "best_vs_reference", "reference_tflops",
                                         "figure")},
                "trials": s.get("trials"), "seconds": round(self.seconds.get(it.index, 0.0), 1),
                "warm_start": " ".join(own + ([f"+{other} library"] if other else []))
                or "cold", "warm_start_sources": list(s.get("warm_start_sources") or [])}

    def _write(self, seconds: float) -> ManyResult:
        """OUTPUT/summary.json and summary.md: every workload's row (those not finished named
        so, with the time they took so far)."""
        from bocast.records.public import provenance

        rows = [self.rows.get(it.index) or {
            "index": it.index + 1, "workload": it.text, **it.workload, "where": it.where,
            "folder": it.folder, "store": it.store, "status": "not finished",
            "seconds": round(self.seconds.get(it.index, 0.0), 1)} for it in self.items]
        table = format_table(rows)
        summary = {"output": self.output, "runner": self.runner, "window": self.window,
                   "budget": self.budget, "workloads": rows, "seconds": round(seconds, 1),
                   "finished": sum(r["status"] == "finished" for r in rows),
                   "table": os.path.join(self.output, TABLE), "provenance": provenance({})}
        with atomic_write(os.path.join(self.output, SUMMARY)) as f:
            json.dump(summary, f, indent=1, sort_keys=True, default=str)
        with atomic_write(os.path.join(self.output, TABLE)) as f:
            f.write(table + "\n")
        return ManyResult(self.output, rows, table, summary)


def _figure_text(row: Mapping[str, Any]) -> str:
    best, ratio = row.get("best_tflops"), row.get("best_vs_reference")
    return (f"best {best:.1f} TFLOPS" if best else "nothing succeeded") + \
        (f" = {ratio:.2f}x reference ({row.get('figure')})" if ratio else "") + \
        f", {row.get('trials')} trials"


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The run's table: one line per workload (its figure: re-timed, with the reference timed
    in turn with the best kernels; in-run; recorded, replay's dataset), every column as wide
    as its widest value."""
    head = ["#", "workload", "best TFLOPS", "x reference", "figure", "trials", "time s",
            "warm start from"]
    cells = [[str(r["index"]), str(r["workload"]),
              f"{r['best_tflops']:.1f}" if r.get("best_tflops") else "-",
              f"{r['best_vs_reference']:.2f}x" if r.get("best_vs_reference") else "-",
              str(r.get("figure") or r["status"]), str(r.get("trials", "-")),
              f"{r['seconds']:.0f}", str(r.get("warm_start", "-"))] for r in rows]
    width = [max(len(c) for c in col) for col in zip(head, *cells)]
    left = {1, 4, 7}
    return "\n".join(" ".join(c.ljust(w) if k in left else c.rjust(w)
                              for k, (c, w) in enumerate(zip(line, width))).rstrip()
                     for line in [head, *cells])
