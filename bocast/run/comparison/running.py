"""Running a comparison: every strategy x seed on replay (in parallel job processes) or live
(interleaved on one builder and one runner, MetaSchedule after), each run resuming its record
store; a live comparison may be split over sessions (``only``) and read back without a GPU."""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bocast import interrupt
from bocast.measure.replay import ReplayDataset
from bocast.measure.retime import method_of, retime, top_configs
from bocast.progress import Progress, reference_label
from bocast.records.store import Store
from bocast.run import identity, metaschedule
from bocast.run.assembly import assemble
from bocast.run.comparison.config import (
    METASCHEDULE,
    CompareConfig,
    _hyper,
    entry_batch,
    plan,
    run_identity,
    validate,
)
from bocast.run.comparison.summary import summarize
from bocast.run.config import ConfigError
from bocast.run.tuner import Trajectory, Tuner, best_so_far, first_reaching, run_interleaved
from bocast.space.candidates import SpaceCandidates
from bocast.space.operators.operator import from_workload


def _job_process(stop) -> None:
    """A replay job process: it stops at its next record when this command stops (a signal to
    the process group, or ``stop`` set by the parent), torch on one thread (the jobs are the
    parallelism)."""
    import torch

    interrupt.install("flag", shared=stop)
    interrupt.unblock()  # started blocked (see run): nothing arrived before the handler was set
    torch.set_num_threads(1)


def _replay_run(job) -> dict[str, Any]:
    """One strategy x seed on replay: resumes its record store (a finished run is only read);
    returns its curve."""
    cfg, s, seed, path, trials = job
    interrupt.check()  # a job handed out as the command stopped
    op = from_workload(cfg.workload)
    ds = ReplayDataset(cfg.dataset, op)
    with Store(path, op.workload) as store:
        identity.check(store, run_identity(cfg, s, seed), path)
        done = store.records()
        if len(done) >= min(trials, len(ds.configs)):
            res = Trajectory(done, best_so_far(done), 0.0, None)
        else:
            res = assemble(s["name"], candidates=ds.candidates(), seed=seed, options=_hyper(s),
                           op=op, store=store, runner=cfg.make_runner(dataset=ds),
                           trials=trials, batch_size=entry_batch(cfg, s),
                           optimum=ds.best_tflops).run(done)
    out = _curve(res, s["label"], seed, trials)
    out.update(optimum=ds.best_tflops, reference=(ds.reference or {}).get("tflops"),
               reference_what=(ds.reference or {}).get("what", ""), resumed_from=len(done),
               trials_to_95pct=first_reaching(out["curve"], 0.95 * ds.best_tflops)
               if ds.best_tflops else None)
    return out


def check_only(cfg: CompareConfig, only: Sequence[str] | None) -> None:
    """``only`` (``--only``) names strategy labels of ``cfg``, which must be live: it needs no
    dataset, so :func:`bocast.api.prepare_compare` checks it before reading one (issue 42: a
    replay comparison's --only was refused after its dataset was read, 3 to 6 s)."""
    if only is None:
        return
    labels = [s["label"] for s in cfg.strategies]
    unknown = sorted(set(only) - set(labels))
    if unknown:
        raise ConfigError(f"--only: {unknown} not among the strategy labels {labels}")
    if not cfg.runner_class.live:
        raise ConfigError("--only/--summarize: only live comparisons are split; a replay "
                          "one is cheap")


def run(cfg: CompareConfig, *, progress: Callable[[str], None] | None = None,
        meter: Progress | None = None, runner=None, builder=None,
        only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the comparison and write its outputs. ``progress`` receives a line per notable
    event, ``meter`` the counts (runs or trials done, best so far). ``runner``/``builder``
    replace the runner and builder of a live comparison (:func:`bocast.compare`'s objects; tests
    pass the CPU stand-in): the caller's, never closed here. ``only`` runs just those strategy
    labels of a live comparison, so that one can be spread over several sessions; the outputs
    are written once every run has finished (else the summary lists what is ``missing``). An
    empty ``only`` runs nothing and needs no GPU: it writes the outputs from the finished
    stores.

    Every run resumes its record store, replay and live alike: a stopped comparison goes on
    where it stopped, and one whose runs have all finished only reads them. The outputs are
    written (each atomically) only from finished runs."""
    progress = progress or (lambda m: None)
    t0 = time.perf_counter()
    check_only(cfg, only)
    op = validate(cfg)[0]
    os.makedirs(cfg.output, exist_ok=True)
    if cfg.runner_class.live:
        runs, extra = _run_live(cfg, progress, meter, runner, builder,
                                set(only) if only is not None else None)
        if extra["missing"]:
            return {"missing": extra["missing"], "seconds": time.perf_counter() - t0}
    else:
        runs, extra = _run_replay(cfg, op, progress, meter), {}
    return summarize(cfg, runs, time.perf_counter() - t0, extra)


def _run_replay(cfg: CompareConfig, op, progress, meter) -> list[dict]:
    import multiprocessing as mp
    from concurrent.futures import as_completed

    jobs = [(cfg, s, seed, path, trials) for s, seed, path, trials in plan(cfg)]
    stop = mp.get_context("fork").Event()
    runs = []
    pool = None
    try:
        # the job processes start with SIGINT/SIGTERM blocked until their handler is set (a
        # signal that came meanwhile is raised here, as the block ends)
        with interrupt.blocked():
            pool = ProcessPoolExecutor(min(cfg.workers or os.cpu_count() or 1, len(jobs)),
                                       mp_context=mp.get_context("fork"),
                                       initializer=_job_process, initargs=(stop,))
            futures = [pool.submit(_replay_run, job) for job in jobs]
        for fut in as_completed(futures):
            r = fut.result()
            runs.append(r)
            line = (f"{r['label']} seed {r['seed']}: best {r['curve'][-1]:.1f} TFLOPS, 95% at "
                    f"{r['trials_to_95pct']}" + (f" (resumed at {r['resumed_from']})"
                                                 if 0 < r["resumed_from"] < r["trials_run"]
                                                 else ""))
            progress(line)
            if meter is not None:
                meter.update(len(runs), best=max(x["curve"][-1] for x in runs),
                             note=f"last {r['label']} seed {r['seed']}")
    except BaseException:
        stop.set()  # every job stops at its next record; queued ones do not start
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    order = [(s["label"], seed) for s, seed, _, _ in plan(cfg)]
    return sorted(runs, key=lambda r: order.index((r["label"], r["seed"])))


def _curve(res, label: str, seed: int, trials: int) -> dict[str, Any]:
    curve = list(res.best_so_far[:trials]) or [0.0]
    curve += [curve[-1]] * (trials - len(curve))  # a run that ran out of candidates stays flat
    return {"label": label, "seed": seed, "curve": curve, "trials_run": len(res.records),
            "seconds": res.seconds, "proposal_s": res.proposal_seconds,
            "status": dict(collections.Counter(str(r.status) for r in res.records))}


def _run_live(cfg: CompareConfig, progress, meter=None, runner=None, builder=None,
              only: set[str] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Every strategy x seed on the local GPU, interleaved; MetaSchedule runs after. With
    ``only``, just those labels run; the others' finished stores are read."""
    import contextlib

    op = from_workload(cfg.workload)
    runs_plan = plan(cfg)
    if only is not None and not only:
        return _read_live(op, runs_plan)
    with contextlib.ExitStack() as stores:  # closes the runner and builder made here, last
        runner = runner or stores.enter_context(cfg.make_runner())
        builder = builder or stores.enter_context(cfg.make_builder())
        device = runner.described()
        # one reference for the whole comparison: the one timed when it started, if it did
        reference = None
        for _, _, path, _ in runs_plan:
            if os.path.exists(path):
                with Store(path, op.workload) as store:
                    reference = reference or store.get_meta("reference")
        reference = reference or runner.reference(op)
        gpu = device.get("gpu") or "a device the runner does not name"
        progress(f"live on {gpu}; reference {reference['tflops']:.1f} TFLOPS "
                 f"({reference.get('what', '')})")
        info = {"device": device, "runner": runner.name, "compare": cfg.name,
                "config_sha256": cfg.digest}
        runs: list[dict] = []
        missing: list[str] = []
        tuners, labels = [], []
        for s, seed, path, trials in runs_plan:
            if only is not None and s["label"] not in only:
                run = _finished_run(op, s, seed, path, trials)
                if run is None:
                    missing.append(f"{s['label']} seed {seed}")
                else:
                    runs.append(run)
            elif s["name"] != METASCHEDULE:
                store = stores.enter_context(Store(path, op.workload))
                identity.check(store, run_identity(cfg, s, seed), path)
                store.set_meta("reference", reference)
                tuner = assemble(s["name"], candidates=SpaceCandidates(op.space, op.workload),
                                 seed=seed, options=_hyper(s), op=op, store=store,
                                 runner=runner, builder=builder,
                                 session_info={**info, "strategy": s["label"], "seed": seed},
                                 trials=trials, batch_size=entry_batch(cfg, s),
                                 reference=reference["tflops"],
                                 reference_label=reference_label(reference))
                tuner.start(store.records())  # resumes an interrupted comparison
                tuners.append(tuner)
                labels.append((s["label"], seed))
        total = sum(t.trials for t in tuners)

        def show(t):
            label, seed = labels[tuners.index(t)]
            progress(f"  {label} seed {seed}: {len(t.records)} trials, best {t.best[-1]:.1f} "
                     f"TFLOPS, proposal {t.proposal_s[-1]:.1f} s")
            if meter is not None:
                meter.total = total
                meter.update(sum(min(len(x.records), x.trials) for x in tuners),
                             best=max((x.best[-1] for x in tuners if x.best), default=0.0),
                             note=f"{label} seed {seed}")

        results = run_interleaved(tuners, on_batch=show)
        finals = _retime_bests(cfg, op, runner, builder, tuners, progress)
        runs += [{**_curve(res, label, seed, t.trials), "retimed": final}
                 for res, t, (label, seed), final in zip(results, tuners, labels, finals)]
        for s, seed, path, trials in runs_plan:
            if s["name"] != METASCHEDULE or (only is not None and s["label"] not in only):
                continue
            work_dir = path[:-3] + "_ms"
            with Store(path, op.workload) as store:
                problem = metaschedule.cannot_resume(store, work_dir)
                if problem:
                    raise ConfigError(f"{path}: {problem}; move the store away to start over")
                identity.check(store, run_identity(cfg, s, seed), path)
                store.set_meta("reference", reference)
                res = metaschedule.tune(
                    op, trials=trials, seed=seed, store=store, builder=builder, runner=runner,
                    work_dir=work_dir, batch_size=entry_batch(cfg, s),
                    reference=reference["tflops"], session_info=info)
            runs.append(_curve(res, s["label"], seed, trials))
            progress(f"  {s['label']} seed {seed}: {len(res.records)} trials, best "
                     f"{runs[-1]['curve'][-1]:.1f} TFLOPS")
    return _finish_live(runs_plan, runs, missing, device, reference)


def _retime_bests(cfg: CompareConfig, op, runner, builder, tuners: Sequence[Tuner],
                  progress) -> list[dict[str, Any] | None]:
    """Each run's best kernel re-timed, all of them and the reference in turn in one set of
    rounds (:func:`bocast.measure.retime.retime`), kept in each run's store (``retimed``, as a
    tune run keeps its own) and returned per tuner as ``{"tflops", "vs_reference"}``: the
    figure a comparison quotes beside its in-run curves (issue 40). Runs whose stores hold a
    re-timing of the same best kernel and trial count are not timed again."""
    rounds = cfg.runner_options["retime_rounds"]
    if not cfg.runner_options["retime_top"]:
        return [None] * len(tuners)
    best = [next(iter(top_configs(t.records, 1)), None) for t in tuners]
    kept = [t.measurer.store.get_meta("retimed") for t in tuners]  # type: ignore[attr-defined]
    method = method_of(runner)
    todo = {b.key: b for t, b, k in zip(tuners, best, kept) if b is not None
            and not (isinstance(k, dict) and k.get("keys") == [b.key]
                     and k.get("trials") == len(t.records) and k.get("method") == method)}
    timed: dict[str, Any] = {}
    if todo:
        progress(f"re-timing the best kernel of {len(todo)} runs with the reference in turn, "
                 f"{rounds} rounds")
        res = retime(runner, builder, [(op, [op.space.from_json(b.config)
                                             for b in todo.values()])], rounds=rounds)
        for k in res["kernels"]:
            timed[k["key"]] = {"best": k if k["tflops"] else None, "kernels": [k],
                               "reference": res["reference"], "rounds": rounds,
                               "method": res["method"], "timing": res["timing"],
                               "keys": [k["key"]], "shared_with": len(todo)}
    out: list[dict[str, Any] | None] = []
    for t, b, k in zip(tuners, best, kept):
        if b is not None and b.key in timed:
            k = {**timed[b.key], "trials": len(t.records)}
            t.measurer.store.set_meta("retimed", k)  # type: ignore[attr-defined]
        good = isinstance(k, dict) and k.get("best")
        out.append({"tflops": k["best"]["tflops"]["median"],
                    "vs_reference": k["best"]["vs_reference"]} if good else None)
    return out


def _read_live(op, plan) -> tuple[list[dict], dict[str, Any]]:
    """The runs of a live comparison from their record stores, without a GPU: the device and
    the reference are those the stores recorded."""
    runs, missing, device, reference = [], [], None, None
    for s, seed, path, trials in plan:
        if os.path.exists(path):
            with Store.open(path, op.workload) as store:
                reference = reference or store.get_meta("reference")
                device = device or next((x.get("device") for x in store.sessions()
                                         if x.get("device")), None)
        run = _finished_run(op, s, seed, path, trials)
        if run is None:
            missing.append(f"{s['label']} seed {seed}")
        else:
            runs.append(run)
    if reference is None:
        raise ConfigError("no record store of this comparison holds its reference timing")
    return _finish_live(plan, runs, missing, device or {}, reference)


def _finished_run(op, s, seed: int, path: str, trials: int) -> dict | None:
    """The curve of a run whose store holds all its trials; None if it is absent or short."""
    if not os.path.exists(path):
        return None
    with Store.open(path, op.workload) as store:
        done = store.records()
        kept = store.get_meta("retimed")
    if len(done) < trials:
        return None
    good = isinstance(kept, dict) and kept.get("best")
    return {**_curve(Trajectory(done, best_so_far(done), 0.0, None), s["label"], seed, trials),
            "retimed": {"tflops": kept["best"]["tflops"]["median"],
                        "vs_reference": kept["best"]["vs_reference"]} if good else None}


def _finish_live(plan, runs, missing, device, reference) -> tuple[list[dict], dict[str, Any]]:
    order = [(s["label"], seed) for s, seed, _, _ in plan]
    runs.sort(key=lambda r: order.index((r["label"], r["seed"])))
    if not runs:
        return runs, {"device": device, "reference": reference, "missing": missing}
    best_known = max(r["curve"][-1] for r in runs)
    for r in runs:
        r["optimum"], r["reference"] = best_known, reference["tflops"]
        r["reference_what"] = reference.get("what", "")
        r["trials_to_95pct"] = first_reaching(r["curve"], 0.95 * best_known)
    return runs, {"device": device, "reference": reference, "optimum_kind": "best known",
                  "missing": missing}
