"""A checked tune configuration run to its budget (:class:`TuneRun`, made by
:func:`bocast.api.prepare`): the runner started before the store is written, the loop resumed
from the store's trials, ``summary.json`` written, a live run's store copied into the records
library. Everything heavy is imported on first use, as in :mod:`bocast.api`."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bocast.errors import InputError
from bocast.measure.telemetry import clock_summary, flag_line
from bocast.progress import Progress, reference_label, say
from bocast.records.record import ranks_by_ratio
from bocast.run import figures

if TYPE_CHECKING:
    from bocast.measure.builder import Builder
    from bocast.measure.runner import Runner
    from bocast.run.config import TuneConfig
    from bocast.strategies.base import Strategy


def figure_prefix(cfg: TuneConfig) -> str:
    """A run's figure is this prefix and .png, .pdf, .svg: beside its summary."""
    if cfg.store:
        return os.path.splitext(cfg.store)[0] + ".convergence"
    return f"{cfg.output}/convergence"


@dataclass
class TuneRun:
    """A checked tune configuration with its strategy and the store it will write
    (:func:`bocast.api.prepare`)."""

    cfg: TuneConfig
    op: Any
    dataset: Any
    strategy: Strategy
    store_path: str
    identity: dict[str, Any]
    # bocast.run.warm_sources.Choice of warm_start: auto (None: the option as given)
    warm: Any = None
    records: str = ""  # the records library's folder
    records_named: bool = False  # the run named that folder (--records, records=, its config's)
    plot: bool = False  # draw the run's figure (figure_prefix.png/.pdf/.svg)
    runner: Runner | None = None  # the caller's runner object (bocast.tune), never closed here
    builder: Builder | None = None  # the caller's builder object, never closed here
    batch_note: str | None = None  # how the batch followed the fleet (runner rpc)

    @property
    def runner_name(self) -> str:
        """The runner the run records (identity, sessions, summary): the object's name, or the
        configuration's kind."""
        return self.runner.name if self.runner is not None else self.cfg.runner

    @property
    def summary_path(self) -> str:
        if self.cfg.store:
            return os.path.splitext(self.cfg.store)[0] + ".summary.json"
        return f"{self.cfg.output}/summary.json"

    @property
    def figure_prefix(self) -> str:
        return figure_prefix(self.cfg)

    @property
    def warm_start_sources(self) -> list[str]:
        from bocast.records import library
        from bocast.strategies.bo.transfer import source_paths

        return [library.portable(p) for p in source_paths(self.strategy.hyper.get("warm_start"))]

    def execute(self, *, progress: bool = True, label: str = "",
                meter: bool = True) -> tuple[dict[str, Any], list[str]]:
        """Run to the budget (resuming the store's trials), write summary.json; return the
        summary and the command's result lines. ``progress``: status lines on stderr, led by
        ``label`` where given (a workload of a run of many), and with ``meter`` the progress
        line (off where several runs share the terminal)."""
        from bocast.records.public import atomic_write, provenance
        from bocast.run import identity
        from bocast.run.assembly import assemble

        cfg, op, dataset = self.cfg, self.op, self.dataset
        note = (lambda text: say(f"{label}: {text}" if label else text)) if progress \
            else (lambda _: None)
        closers: list[Any] = []  # the runner, store and builder it made: closed when it ends
        ref: dict[str, Any] = {}  # a live run's reference (the vendor library's timing)
        final: dict[str, Any] | None = None  # a live run's figure: its best kernels re-timed
        clocks: dict[str, Any] | None = None  # a live run's clocks per batch, flagged
        timing: dict[str, Any] = {}  # how the runner timed
        if op.space_choice:  # space auto: which space, and why
            note(f"space {op.space_choice}; --space names one")
        if self.batch_note:
            note(self.batch_note)
        try:
            runner, builder, session = self.runner, self.builder, None
            if runner is None:
                runner = cfg.make_runner(seed=cfg.seed, dataset=dataset)
                closers.append(runner)
            device = runner.described()
            # the run can start: only now is its store created (or opened for writing), so a
            # runner that fails to start leaves no store stamped with this run behind
            store = identity.open_store(self.store_path, op.workload, self.identity)
            closers.append(store)
            previous = store.records()
            if dataset is not None:
                reference = (dataset.reference or {}).get("tflops")
                what = reference_label(dataset.reference, recorded=True)
                note(f"runner: replay of {cfg.dataset} ({len(dataset.configs)} recorded "
                     "configurations; no GPU is used)")
            else:
                ref = store.get_meta("reference") or runner.reference(op) or {}
                if builder is None:
                    builder = cfg.make_builder()
                    closers.append(builder)
                store.set_meta("reference", ref)
                reference = ref.get("tflops")
                what = reference_label(ref)
                session = {"device": device, "runner": self.runner_name, "config": cfg.raw,
                           "warm_start_sources": self.warm_start_sources}
                gpu = device.get("gpu") or "a device the runner does not name"
                note(f"runner: live on {gpu}; " + (
                    f"reference {reference:.1f} TFLOPS" if reference else "no reference"))
            for line in self.warm.notes if self.warm is not None else []:
                note(line)
            if previous:
                note(f"resuming: {len(previous)} trials already in {self.store_path}")
            with (Progress(f"{label or 'tune'} {cfg.strategy} seed {cfg.seed}", cfg.trials)
                  if progress and meter else contextlib.nullcontext()) as bar:
                tuner = assemble(self.strategy, trials=cfg.trials, seconds=cfg.seconds,
                                 batch_size=cfg.batch_size, op=op, store=store, runner=runner,
                                 builder=builder, session_info=session,
                                 batch_reference=dataset is None,
                                 optimum=dataset.best_tflops if dataset else None,
                                 reference=reference, reference_label=what, meter=bar)
                result = tuner.run(previous)
                if dataset is None:
                    final = self._final_figure(runner, builder, store, result, note)
                    clocks = clock_summary(store.batches())
                    timing = runner.timing()
                    best = final.get("best") if final else None
                    if bar is not None and best:  # the progress line ends on the figure
                        bar.update(best=best["tflops"]["median"], note=(
                            f"{best['vs_reference']:.2f}x {what}, re-timed"))
        finally:
            for c in closers:
                c.close()
            copy = self._to_library(note)
        sources = self.warm_start_sources
        gpu = device.get("gpu")  # replay: the dataset's recorded device
        drawn = self._draw(result, gpu=gpu, reference=reference, label=what) \
            if self.plot else []
        figure = self._figure(result, final, reference, what_ref=ref)
        summary = {**result.summary(), **figure, "config": cfg.path, "config_sha256": cfg.digest,
                   "budget": {"trials": cfg.trials, "seconds": cfg.seconds},
                   "strategy": cfg.strategy, "strategy_options": self.strategy.hyper,
                   "seed": cfg.seed, "runner": self.runner_name, "dataset": cfg.dataset,
                   "output": cfg.output, "store": self.store_path,
                   "warm_start_sources": sources, "library_copy": copy, "gpu": gpu,
                   **({"figures": drawn} if drawn else {}),
                   **({"timing": timing} if timing else {}),
                   **({"clocks": clocks} if clocks else {}),
                   "export": f"bocast export {self.store_path} --best --out "
                             f"{os.path.join(os.path.dirname(self.store_path), 'kernel')}",
                   "provenance": provenance({"warm_start_sources": sources})}
        with atomic_write(self.summary_path) as f:
            json.dump(summary, f, indent=1, sort_keys=True, default=str)
        lines = [f"{cfg.strategy} ({self.strategy.hyper.get('acquisition', '')}) seed "
                 f"{cfg.seed}: {result.trials} trials, " + self._figure_text(summary, dataset)]
        if flagged := flag_line(clocks):
            lines.append(flagged)
        if result.optimum:
            lines.append(f"dataset best {result.optimum:.1f} TFLOPS; 95% reached at trial "
                         f"{result.trials_to(0.95)}")
        if sources:
            lines.append(f"warm start from {', '.join(sources)}")
        lines.append(f"records: {self.store_path}; summary: {self.summary_path}"
                     + (f"; library copy: {copy}" if copy else ""))
        if drawn:
            lines.append(f"figure: {self.figure_prefix}.png/.pdf/.svg")
        lines.append(f"export the best kernel: {summary['export']}")
        return summary, lines

    def _final_figure(self, runner, builder, store, result, note) -> dict[str, Any] | None:
        """The run's figure (:func:`bocast.measure.retime.final_figure`): its best
        ``retime_top`` kernels timed with the reference in turn, kept in the store's meta
        (``retimed``) and reused while the run's trials and best kernels are the same (a
        finished run run again times nothing). None when it is off, when nothing succeeded,
        or when the runner times no reference (said in one line)."""
        from bocast.measure.retime import final_figure, method_of, top_configs

        ro = self.cfg.runner_options
        top, rounds = ro["retime_top"], ro["retime_rounds"]
        picks = [r.key for r in top_configs(result.records, top)] if top else []
        if not picks:
            return None
        method = method_of(runner)
        kept = store.get_meta("retimed")
        if isinstance(kept, dict) and kept.get("keys") == picks \
                and kept.get("trials") == result.trials and kept.get("rounds") == rounds \
                and kept.get("method") == method:  # not a figure of another method
            return kept
        note(f"re-timing the best {len(picks)} kernels with the reference in turn, "
             f"{rounds} rounds")
        try:
            final = final_figure(runner, builder, self.op, result.records, top=top,
                                 rounds=rounds, seed=self.cfg.seed)
        except RuntimeError as e:  # no reference, or the worker failed on it
            note(f"re-timing: not done ({' '.join(str(e).split())[:300]}); the in-run figure "
                 "stands")
            return None
        if final is not None:
            final["trials"] = result.trials
            store.set_meta("retimed", final)
        return final

    @staticmethod
    def _figure(result: Any, final: dict[str, Any] | None, reference: float | None,
                what_ref: dict[str, Any]) -> dict[str, Any]:
        """The summary's figure: the re-timed best (``figure: retimed``) where the run ended
        with a re-timing, else the in-run one (``in-run``; replay: ``recorded``). The in-run
        figure is kept under ``in_run`` either way."""
        paired = result.best is not None and ranks_by_ratio(result.records)
        in_run = {"best_tflops": result.best_tflops, "reference_tflops": reference,
                  "best_vs_reference": result.best_vs_reference,
                  "ratio": "paired" if paired else "to the reference timed at the start"}
        best = final.get("best") if final else None
        if final is None or not best:
            return {"figure": "in-run" if what_ref else "recorded", "in_run": in_run}
        ref = final["reference"]
        return {"figure": "retimed", "in_run": in_run,
                "best_tflops": best["tflops"]["median"], "best_config": best["config"],
                "reference_tflops": ref["tflops"]["median"],
                "best_vs_reference": best["vs_reference"],
                "retimed": {"kernels": [{k: v for k, v in x.items() if k != "config"}
                                        for x in final["kernels"]],
                            "reference": ref, "rounds": final["rounds"],
                            "method": final["method"], "best_key": best["key"]}}

    @staticmethod
    def _figure_text(summary: dict[str, Any], dataset: Any) -> str:
        """The result line's figure: best TFLOPS, its ratio, and what the ratio is."""
        best, ratio = summary.get("best_tflops") or 0.0, summary.get("best_vs_reference")
        text = f"best {best:.1f} TFLOPS"
        if summary.get("figure") == "retimed":
            r = summary["retimed"]
            what = r["reference"].get("what") or "reference"
            in_run = summary["in_run"]
            return (text + f" = {ratio:.2f}x {what} (re-timed: the best "
                    f"{len(r['kernels'])} and {what} in turn, {r['rounds']} rounds, one "
                    f"process; in-run figure {in_run['best_tflops']:.1f} TFLOPS"
                    + (f" = {in_run['best_vs_reference']:.2f}x" if in_run["best_vs_reference"]
                       else "") + ")")
        if not ratio:
            return text
        what = ((dataset.reference if dataset is not None else None) or {}).get("what")
        return (text + f" = {ratio:.2f}x " + (what or "reference")
                + (" (recorded in the dataset)" if dataset is not None else " (in-run)"))

    def _draw(self, result: Any, *, gpu: str | None, reference: float | None,
              label: str) -> list[str]:
        """The run's figure (:func:`bocast.run.figures.run_trials`), titled with the workload, the
        space, the strategy and seed, the runner and GPU, and the reference's name."""
        cfg, w = self.cfg, self.op.workload
        how = "replay" if self.dataset is not None else \
            self.runner_name if cfg.runner_class.synthetic else "live"
        title = (f"{self.op.name} {'x'.join(map(str, w['shape']))}, space {w.get('space', 'v1')}, "
                 f"{w.get('dtype')}\n{cfg.strategy} seed {cfg.seed}, {how} on "
                 f"{gpu or 'GPU not recorded'}; reference " + (label if reference else "none"))
        fig = figures.run_trials(
            [r.tflops for r in result.records], [r.status.value for r in result.records],
            title=title, reference=reference,
            reference_label=f"{label} {figures.tflops_text(reference)} TFLOPS" if reference else "",
            optimum=result.optimum)
        return figures.save(fig, self.figure_prefix)

    def _to_library(self, note) -> str | None:
        """A live run's store copied into the records library (also when interrupted); a
        failure is one line, never fatal. None for replay (its rows are a dataset's), and for
        the stand-in unless the run named the library: synthetic timings would otherwise
        reach the user's library, whose warm starts and suggestions stand for a GPU's."""
        import sqlite3

        from bocast.records import library

        if not self.cfg.runner_class.live or not os.path.isfile(self.store_path):
            return None
        if self.cfg.runner_class.synthetic and not self.records_named:
            note(f"records library: a synthetic runner's store ({self.runner_name}) is not added; "
                 "--records FOLDER (records=) adds it there, `bocast records add` by hand")
            return None
        try:
            path, what = library.add(self.store_path, self.records)
        except (InputError, OSError, sqlite3.Error) as e:
            note(f"records library: not added ({' '.join(str(e).split())[:300]})")
            return None
        note(f"records library: {what} {path}")
        return path
