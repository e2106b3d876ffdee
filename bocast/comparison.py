"""Comparisons: strategies x seeds on one workload, with the same space, candidates, runner and
budget for all, from one configuration file.

    name: replay_gemm1024
    workload: {op: gemm, shape: [1024, 1024, 1024], dtype: "fp16:fp32", layout: NT}
    runner: replay
    dataset: experiments/data/gemm_1024_1024_1024
    strategies:
      - {label: bo-logei, name: bo, acquisition: logei}
      - {label: cga, name: cga}
      - {label: random, name: random}
      - {label: bo-q8, name: bo, batch_size: 8}   # its own batch (default: batch_size below)
    seeds: 20                 # or a list of seeds
    budget: {trials: 256}
    batch_size: 32
    budgets: [32, 64, 128, 256]   # where best-so-far is reported
    baseline: cga             # the rank tests compare every strategy against this one
    output: runs/compare_gemm1024          # one record store per run (not committed)
    results: experiments/results/compare_gemm1024   # .csv, .md, .png, .pdf, .json

Every output carries provenance (git SHA, versions, date, config hash). A seed gives every
strategy the same initial random design (paired comparison).

``runner: local`` compares live on the GPU: one builder and one runner serve every run, the runs
take turns batch by batch (:func:`bocast.tuner.run_interleaved`: while one batch is timed, the
next run's batch is proposed and built), so all strategies are measured in the same session,
by the same method, under the same drift. Each run has its own record store under ``output``;
rerunning the comparison resumes every unfinished run where it stopped. A strategy entry
``{name: metaschedule}`` runs TVM MetaSchedule with our builder and runner
(:mod:`bocast.metaschedule`), after the interleaved runs. Without a dataset there is no known
optimum: "best known" is then the best any run found.

    runner: local
    runner_options: {repeats: 10, run_timeout: 30, build_timeout: 180, workers: null,
                     reject_spills: false}      # reject_spills: see bocast.measure.builder
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bocast import identity, interrupt, schema
from bocast.config import (
    WORKLOAD,
    ConfigError,
    read_yaml,
    resolver,
    rpc_options,
    strategy_entry,
    workload_and_dataset,
)
from bocast.measure.parts import LIVE_KINDS, RUNNER_KINDS, runner_kind
from bocast.progress import Progress, reference_label
from bocast.schema import Field, Section

#: strategy-entry keys that are not hyperparameters; ``trials`` lets one strategy run longer
#: than the budget (random search through a whole table, so its trials-to-95% is not censored),
#: ``seeds`` lets an expensive competitor run fewer seeds (MetaSchedule live), ``batch_size``
#: gives one strategy its own batch (BO with smaller q: more model updates per trial)
_NOT_HYPER = ("name", "label", "trials", "seeds", "batch_size")
METASCHEDULE = "metaschedule"
#: live runners: the local GPU, GPU servers through a tracker (bocast.measure.rpc), or the
#: CPU stand-in (synthetic timings: a live comparison's mechanics without a GPU)
LIVE = LIVE_KINDS
MAX_SEEDS = 10_000
COMPARE = Section((
    Field("name", str), Field("description", str, ""), WORKLOAD,
    Field("runner", str, "replay", choices=RUNNER_KINDS),
    Field("dataset", str, None, nullable=True, doc="replay: prefix of a recorded dataset"),
    Field("strategies", list, doc="entries {name, label, options...}"),
    Field("seeds", object, doc="a number of seeds (0..n-1) or a list of distinct seeds"),
    Field("budget", dict), schema.BATCH_SIZE,
    Field("budgets", list, None, nullable=True, doc="trials at which best-so-far is reported"),
    Field("baseline", str, None, nullable=True, doc="label the rank tests compare against"),
    Field("output", str, doc="folder of the runs' record stores"),
    Field("results", str, doc="path prefix of the .md/.csv/.json/.png/.pdf results"),
    schema.WORKERS.with_default(None),
    Field("runner_options", dict, None, nullable=True),
    Field("rpc", dict, None, nullable=True,
          doc="runner rpc: tracker (host:port), key, ... (bocast.measure.rpc.parse_options)"),
))
ENTRY = Section((
    Field("name", str), schema.LABEL.with_default(None),
    dataclasses.replace(schema.TRIALS, default=None, nullable=True),
    Field("seeds", object, None),
    dataclasses.replace(schema.BATCH_SIZE, default=None, nullable=True,
                        doc="this entry's batch (default: the comparison's batch_size)"),
))


@dataclass
class CompareConfig:
    name: str
    workload: dict[str, Any]
    runner: str
    dataset: str | None
    strategies: list[dict[str, Any]]
    seeds: list[int]
    trials: int
    batch_size: int
    budgets: list[int]
    baseline: str | None
    output: str
    results: str
    workers: int | None
    runner_options: dict[str, Any] = field(default_factory=dict)
    rpc: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()[:16]


def load(path: str) -> CompareConfig:
    """A comparison configuration, every field checked (nothing runs or is written here)."""
    return parse(read_yaml(path), os.path.dirname(os.path.abspath(path)))


def parse(raw: Any, where: str) -> CompareConfig:
    """A comparison from its fields (a configuration built in code), every field checked;
    relative paths are those of the repository holding the folder ``where``
    (:func:`bocast.config.resolver`)."""
    if isinstance(raw, Mapping) and "runner" in raw:
        raw = {**raw, "runner": runner_kind(raw["runner"])}
    top = COMPARE.check(raw)
    budget = schema.BUDGET.check(top["budget"], "budget.")
    if budget["seconds"] is not None:
        raise ConfigError("budget.seconds: a comparison's runs end by trials, not by time")
    trials = budget["trials"]
    seeds = _seeds(top["seeds"], "seeds")
    if not top["strategies"]:
        raise ConfigError("strategies: expected a non-empty list")
    strategies, labels, entries = [], [], []
    for i, s in enumerate(top["strategies"]):
        at = f"strategies[{i}]"  # not `where`: the folder, used below
        entry = ENTRY.check(s, f"{at}.", ignore=[k for k in (s if isinstance(s, Mapping) else ())
                                                  if k not in _NOT_HYPER])
        label = entry["label"] or schema.LABEL.check(entry["name"], f"{at}.")
        if entry["name"] == METASCHEDULE:
            hyper = sorted(k for k in s if k not in _NOT_HYPER)
            if hyper:
                raise ConfigError(f"{at} ({label}): {METASCHEDULE} takes no options, "
                                  f"got {hyper}")
        else:  # checked after every other field (see bocast.config.parse)
            entries.append((s, f"{at} ({label}): "))
        if entry["trials"] is not None and entry["trials"] < trials:
            raise ConfigError(f"{at}.trials: {entry['trials']} is less than budget.trials "
                              f"({trials}); an entry's trials only extend its budget")
        out = {k: v for k, v in s.items() if k not in ("label", "trials", "seeds", "batch_size")}
        if entry["batch_size"] is not None:
            out["batch_size"] = entry["batch_size"]
        if entry["trials"] is not None:
            out["trials"] = entry["trials"]
        if entry["seeds"] is not None:
            out["seeds"] = _seeds(entry["seeds"], f"{at}.seeds")
        strategies.append({**out, "label": label})
        labels.append(label)
    if len(set(labels)) != len(labels):
        raise ConfigError(f"strategies: labels must be distinct, got {labels}")
    budgets = top["budgets"]
    if budgets is None:
        budgets = [b for b in (32, 64, 128, 256, 512, 1000) if b <= trials] or [trials]
    if not (budgets and all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= trials
                            for b in budgets) and len(set(budgets)) == len(budgets)):
        raise ConfigError(f"budgets: expected distinct integers between 1 and budget.trials "
                          f"({trials}), got {budgets!r}")
    runner = top["runner"]
    if runner == "replay" and top["dataset"] is None:
        raise ConfigError("dataset: the replay runner needs the prefix of a recorded dataset")
    if runner == "replay" and any(s["name"] == METASCHEDULE for s in strategies):
        raise ConfigError(f"strategies: {METASCHEDULE} proposes its own schedules, which no "
                          "recorded dataset holds; it needs a live runner (local or rpc)")
    ropts = schema.RUNNER_OPTIONS.check(top["runner_options"], "runner_options.")
    baseline = top["baseline"]
    if baseline is not None and baseline not in labels:
        raise ConfigError(f"baseline: {baseline!r} is not one of the strategy labels {labels}")
    rpc_opts = rpc_options(runner, top["rpc"])
    for s, where_s in entries:
        strategy_entry(s, where_s)
        if s.get("warm_start") == "auto" and runner != "replay":
            raise ConfigError(f"{where_s}warm_start: 'auto' picks sources from this machine's "
                              "records library, which a live comparison's results must not "
                              "depend on; name the sources (a list), or none")
    resolve = resolver(where)
    if runner == "replay":
        _resolve_auto(strategies, top["workload"], resolve(top["dataset"]))
    return CompareConfig(
        name=top["name"], workload=dict(top["workload"]), runner=runner,
        dataset=resolve(top["dataset"]) if top["dataset"] else None,
        strategies=strategies, seeds=seeds, trials=trials, batch_size=top["batch_size"],
        budgets=sorted(budgets), baseline=baseline, output=resolve(top["output"]),
        results=resolve(top["results"]), workers=top["workers"], runner_options=ropts,
        rpc=rpc_opts, raw=dict(raw))


def _resolve_auto(strategies: list[dict[str, Any]], workload: dict[str, Any],
                  dataset: str) -> None:
    """Replay entries with ``warm_start: auto`` get the sources :func:`bocast.library.resolve`
    picks for replay (shipped datasets of other workloads: the repository's, never this
    machine's library) and the strategy's warm defaults, so a replay comparison can show what
    ``bocast tune``'s default does on a table the library does not hold."""
    from bocast import library
    from bocast.bo.transfer import AUTO
    from bocast.operator import WorkloadError, from_workload

    auto = [s for s in strategies if s.get("warm_start") == AUTO]
    if not auto:
        return
    try:
        op, gpu = from_workload(workload), _dataset_gpu(dataset)
    except (WorkloadError, OSError, ValueError, AttributeError):
        return  # validate() names what is wrong with the workload or the dataset
    sources = library.resolve(AUTO, op, runner="replay", gpu=gpu, dataset=dataset).sources
    for s in auto:
        s.update(library.warm_options(s["name"], s, sources))


def _seeds(seeds: Any, where: str) -> list[int]:
    """A number of seeds (0..n-1) or a list of distinct ones: each seed of a strategy is one run
    with its own record store, so a repeated seed would be two processes writing one store."""
    if isinstance(seeds, int) and not isinstance(seeds, bool) and 0 < seeds <= MAX_SEEDS:
        return list(range(seeds))
    if isinstance(seeds, list) and seeds and len(seeds) <= MAX_SEEDS:
        out = [dataclasses.replace(schema.SEED, name=f"{where}[{i}]").check(x)
               for i, x in enumerate(seeds)]
        repeated = sorted({x for x in out if out.count(x) > 1})
        if repeated:
            raise ConfigError(f"{where}: {seeds!r} repeats {repeated}; each seed is one run with "
                              "its own record store")
        return out
    raise ConfigError(f"{where}: expected a number of seeds between 1 and {MAX_SEEDS} or a "
                      f"non-empty list of distinct seeds, got {seeds!r}")


def validate(cfg: CompareConfig):
    """Build every piece once (workload, dataset, each strategy) and check the stores already
    under ``output``, so that a bad field fails before anything runs or is written. Returns
    (operator, dataset or None)."""
    from bocast.candidates import SpaceCandidates
    from bocast.strategies import StrategyError, make_strategy

    op, dataset = workload_and_dataset(cfg.workload, cfg.runner, cfg.dataset)
    cands = dataset.candidates() if dataset else SpaceCandidates(op.space, op.workload)
    for i, s in enumerate(cfg.strategies):
        if s["name"] != METASCHEDULE:
            try:
                make_strategy(s["name"], cands, seed=0, **_hyper(s))
            except StrategyError as e:
                raise ConfigError(f"strategies[{i}] ({s['label']}): {e}") from None
    check_stores(cfg, op)
    return op, dataset


def _hyper(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in _NOT_HYPER}


def entry_batch(cfg: CompareConfig, s: Mapping[str, Any]) -> int:
    """The batch of a strategy entry: its own ``batch_size``, else the comparison's."""
    return s.get("batch_size", cfg.batch_size)


def plan(cfg: CompareConfig) -> list[tuple[dict, int, str, int]]:
    """(strategy entry, seed, record store, trials) of every run of the comparison."""
    return [(s, seed, os.path.join(cfg.output, f"{s['label']}_seed{seed}.db"),
             s.get("trials", cfg.trials)) for s in cfg.strategies
            for seed in s.get("seeds", cfg.seeds)]


def run_identity(cfg: CompareConfig, s: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The identity (:mod:`bocast.identity`) of strategy entry ``s``'s run with ``seed``."""
    options = _hyper(s)
    if isinstance(options.get("warm_start"), list):  # named alike wherever the tree is
        from bocast import library

        options["warm_start"] = [library.portable(p) for p in options["warm_start"]]
    return identity.run_identity(strategy=s["name"], options=options, seed=seed,
                                 batch_size=entry_batch(cfg, s), runner=cfg.runner,
                                 dataset=cfg.dataset)


def check_stores(cfg: CompareConfig, op) -> None:
    """Every store already under ``output`` opens (a bocast store of this workload that SQLite
    finds sound) and holds a run of this configuration; nothing is written."""
    for s, seed, path, _ in plan(cfg):
        identity.check_path(path, op.workload, run_identity(cfg, s, seed))


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
    from bocast.measure.replay import ReplayDataset, ReplayMeasurer
    from bocast.operator import from_workload
    from bocast.store import Store
    from bocast.strategies import make_strategy
    from bocast.tuner import Trajectory, Tuner, best_so_far, first_reaching

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
            strategy = make_strategy(s["name"], ds.candidates(), seed=seed, **_hyper(s))
            res = Tuner(strategy, ReplayMeasurer(ds, store), trials=trials,
                        batch_size=entry_batch(cfg, s), optimum=ds.best_tflops).run(done)
    out = _curve(res, s["label"], seed, trials)
    out.update(optimum=ds.best_tflops, reference=(ds.reference or {}).get("tflops"),
               reference_what=(ds.reference or {}).get("what", ""), resumed_from=len(done),
               trials_to_95pct=first_reaching(out["curve"], 0.95 * ds.best_tflops)
               if ds.best_tflops else None)
    return out


def run(cfg: CompareConfig, *, progress: Callable[[str], None] | None = None,
        meter: Progress | None = None, runner=None, builder=None,
        only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the comparison and write its outputs. ``progress`` receives a line per notable
    event, ``meter`` the counts (runs or trials done, best so far). ``runner``/``builder``
    replace the local GPU runner and nvcc builder of a live comparison (tests pass the CPU
    stand-in). ``only`` runs just those strategy labels of a live comparison, so that one can be
    spread over several sessions; the outputs are written once every run has finished (else the
    summary lists what is ``missing``). An empty ``only`` runs nothing and needs no GPU: it
    writes the outputs from the finished stores.

    Every run resumes its record store, replay and live alike: a stopped comparison goes on
    where it stopped, and one whose runs have all finished only reads them. The outputs are
    written (each atomically) only from finished runs."""
    progress = progress or (lambda m: None)
    t0 = time.perf_counter()
    if only is not None:
        labels = [s["label"] for s in cfg.strategies]
        unknown = sorted(set(only) - set(labels))
        if unknown:
            raise ConfigError(f"--only: {unknown} not among the strategy labels {labels}")
        if cfg.runner not in LIVE:
            raise ConfigError("--only/--summarize: only live comparisons are split; a replay "
                              "one is cheap")
    op = validate(cfg)[0]
    os.makedirs(cfg.output, exist_ok=True)
    if cfg.runner in LIVE:
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

    from bocast import metaschedule
    from bocast.candidates import SpaceCandidates
    from bocast.measure.engine import Measurer
    from bocast.measure.parts import make_builder, make_runner
    from bocast.operator import from_workload
    from bocast.store import Store
    from bocast.strategies import make_strategy
    from bocast.tuner import Tuner, run_interleaved

    op = from_workload(cfg.workload)
    runs_plan = plan(cfg)
    if only is not None and not only:
        return _read_live(op, runs_plan)
    ro = cfg.runner_options
    runner = runner or make_runner(cfg.runner, timeout_s=ro["run_timeout"],
                                   repeats=ro["repeats"], rpc=cfg.rpc)
    builder = builder or make_builder(workers=ro["workers"], timeout_s=ro["build_timeout"],
                                      reject_spills=ro["reject_spills"],
                                      compile=cfg.runner != "standin")
    with runner, builder, contextlib.ExitStack() as stores:
        device = runner.device()
        # one reference for the whole comparison: the one timed when it started, if it did
        reference = None
        for _, _, path, _ in runs_plan:
            if os.path.exists(path):
                with Store(path, op.workload) as store:
                    reference = reference or store.get_meta("reference")
        reference = reference or runner.reference(op)
        progress(f"live on {device.get('gpu')}; reference {reference['tflops']:.1f} TFLOPS "
                 f"({reference.get('what', '')})")
        info = {"device": device, "runner": cfg.runner, "compare": cfg.name,
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
                strategy = make_strategy(s["name"], SpaceCandidates(op.space, op.workload),
                                         seed=seed, **_hyper(s))
                measurer = Measurer(op, store, builder, runner, session_info={
                    **info, "strategy": s["label"], "seed": seed})
                tuner = Tuner(strategy, measurer, trials=trials, batch_size=entry_batch(cfg, s),
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
        runs += [_curve(res, label, seed, t.trials)
                 for res, t, (label, seed) in zip(results, tuners, labels)]
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


def _read_live(op, plan) -> tuple[list[dict], dict[str, Any]]:
    """The runs of a live comparison from their record stores, without a GPU: the device and
    the reference are those the stores recorded."""
    from bocast.store import Store

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
    from bocast.store import Store
    from bocast.tuner import Trajectory, best_so_far

    if not os.path.exists(path):
        return None
    with Store.open(path, op.workload) as store:
        done = store.records()
    if len(done) < trials:
        return None
    return _curve(Trajectory(done, best_so_far(done), 0.0, None), s["label"], seed, trials)


def _finish_live(plan, runs, missing, device, reference) -> tuple[list[dict], dict[str, Any]]:
    from bocast.tuner import first_reaching

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


def _quartiles(v):
    v = sorted(v)
    if len(v) < 2:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4)
    return q[0], statistics.median(v), q[2]


def format_p(p: float) -> str:
    """A p-value in two significant figures that never reads as a certainty: 0.998 is
    ">0.99", not "1"; below 1e-3 in scientific notation."""
    if p > 0.99:
        return ">0.99"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.2g}"


def summarize(cfg: CompareConfig, runs: list[dict], seconds: float,
              extra: dict[str, Any] | None = None, prov: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """Statistics and outputs of finished runs. ``prov``: provenance taken before anything was
    written (a caller that writes several comparisons; else it is taken here)."""
    from scipy.stats import mannwhitneyu

    from bocast.provenance import provenance
    from bocast.tuner import first_reaching

    labels = [s["label"] for s in cfg.strategies]
    optimum = runs[0]["optimum"]
    reference = runs[0]["reference"]
    censor = cfg.trials + 1
    last = cfg.budgets[-1]
    # the baseline's median best at the last budget, and how soon each run reaches 95% of it
    base_target = (statistics.median(r["curve"][last - 1] for r in runs
                                     if r["label"] == cfg.baseline) if cfg.baseline else None)
    per: dict[str, Any] = {}
    for lab, strat in zip(labels, cfg.strategies):
        rs = [r for r in runs if r["label"] == lab]
        t95 = [r["trials_to_95pct"] or strat.get("trials", cfg.trials) + 1 for r in rs]
        per[lab] = {
            "runs": len(rs),
            "median_best": {str(b): _quartiles([r["curve"][b - 1] for r in rs])[1]
                            for b in cfg.budgets},
            "iqr_best": {str(b): _quartiles([r["curve"][b - 1] for r in rs])[::2]
                         for b in cfg.budgets},
            "median_trials_to_95pct": _quartiles(t95)[1],
            "iqr_trials_to_95pct": _quartiles(t95)[::2],
            "reached_95pct": sum(bool(r["trials_to_95pct"]) for r in rs),
            "median_proposal_s": (statistics.median(p for r in rs for p in r["proposal_s"])
                                  if any(r["proposal_s"] for r in rs) else None),
        }
        if reference:
            per[lab]["median_best_vs_reference"] = per[lab]["median_best"][str(last)] / reference
        if base_target:
            tb = [first_reaching(r["curve"], 0.95 * base_target)
                  or strat.get("trials", cfg.trials) + 1 for r in rs]
            per[lab]["median_trials_to_95pct_of_baseline"] = _quartiles(tb)[1]
    tests = {}
    if cfg.baseline:
        base = [r for r in runs if r["label"] == cfg.baseline]
        for lab in labels:
            if lab == cfg.baseline:
                continue
            mine = [r for r in runs if r["label"] == lab]
            if min(len(mine), len(base)) < 2:
                continue  # too few runs for a rank test to say anything
            t = {}
            a = [min(r["trials_to_95pct"] or censor, censor) for r in mine]
            b = [min(r["trials_to_95pct"] or censor, censor) for r in base]
            t["trials_to_95pct_less"] = float(mannwhitneyu(a, b, alternative="less").pvalue)
            last = cfg.budgets[-1]
            a = [r["curve"][last - 1] for r in mine]
            b = [r["curve"][last - 1] for r in base]
            t[f"best_at_{last}_greater"] = float(mannwhitneyu(a, b, alternative="greater").pvalue)
            tests[f"{lab} vs {cfg.baseline}"] = t
    summary = {"name": cfg.name, "workload": cfg.workload, "dataset": cfg.dataset,
               "runner": cfg.runner, "optimum_tflops": optimum,
               "optimum_kind": (extra or {}).get("optimum_kind", "dataset best"),
               "baseline_best_at_budget": base_target, "reference_tflops": reference,
               "reference_what": runs[0].get("reference_what", ""),
               "seeds": len(cfg.seeds), "trials": cfg.trials, "batch_size": cfg.batch_size,
               "strategies": per, "mann_whitney_u": tests, "seconds": round(seconds, 1),
               "config_sha256": cfg.digest,
               "provenance": prov or provenance({"device": (extra or {}).get("device")}
                                                if extra and extra.get("device") else None)}
    _write_outputs(cfg, runs, summary)
    return summary


def _write_outputs(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    with interrupt.held():  # the four files are one result: a stop waits for the last one
        _write_files(cfg, runs, summary)


def _write_files(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    import csv

    from bocast.files import atomic_write

    os.makedirs(os.path.dirname(cfg.results) or ".", exist_ok=True)
    with atomic_write(cfg.results + ".csv", newline="") as f:
        w = csv.writer(f)
        w.writerow(["strategy", "seed", "trials_to_95pct"] + [f"best_at_{b}" for b in cfg.budgets])
        for r in runs:
            w.writerow([r["label"], r["seed"], r["trials_to_95pct"] or ""] +
                       [f"{r['curve'][b - 1]:.4g}" for b in cfg.budgets])
    with atomic_write(cfg.results + ".json") as f:
        json.dump(summary, f, separators=(",", ":"), sort_keys=True, default=str)
    prov = summary["provenance"]
    live = cfg.runner in LIVE
    where = (f"{prov.get('device', {}).get('gpu', 'GPU')}, driver "
             f"{prov.get('device', {}).get('driver', '?')}" if live else "")
    last = cfg.budgets[-1]
    lines = [f"# {cfg.name}", "",
             f"{summary['workload']}; runner {cfg.runner}"
             + (f" ({os.path.relpath(cfg.dataset)})" if cfg.dataset else f" (live on {where})")
             + f"; {len(cfg.seeds)} seeds; budget {cfg.trials}; batch {cfg.batch_size}.",
             f"{summary['optimum_kind'].capitalize()} {summary['optimum_tflops']:.1f} TFLOPS"
             + (f"; {_vendor(summary)} {summary['reference_tflops']:.1f} TFLOPS "
                f"({summary['reference_what'] or 'vendor library'}; same run, same timing)"
                if summary["reference_tflops"] else "") + ".",
             f"Generated {prov['date']} at commit {prov['git_sha']}, config sha256 "
             f"{summary['config_sha256']}.", "",
             "Median [interquartile range] over seeds. Trials to 95%: first trial whose best "
             f"reaches 95% of the {summary['optimum_kind']}; a run that never does counts as its "
             f"budget + 1 (budget {cfg.trials} unless the strategy line says otherwise)."
             + (f" Last columns: the median best at {last} trials over {_vendor(summary)}, and "
                f"the trials to "
                f"reach 95% of {cfg.baseline}'s median best at {last} "
                f"({summary['baseline_best_at_budget']:.1f} TFLOPS)."
                if live and cfg.baseline else ""), "",
             "| strategy | trials to 95% | reached | " + " | ".join(
                 f"best @{b}" for b in cfg.budgets)
             + (f" | best @{last} / {_vendor(summary)} | trials to 95% of {cfg.baseline}"
                if live and cfg.baseline else "") + " |",
             "|---" * (3 + len(cfg.budgets) + (2 if live and cfg.baseline else 0)) + "|"]
    for lab, s in summary["strategies"].items():
        lo, hi = s["iqr_trials_to_95pct"]
        cells = [f"{s['median_trials_to_95pct']:.0f} [{lo:.0f}-{hi:.0f}]",
                 f"{s['reached_95pct']}/{s['runs']}"]
        for b in cfg.budgets:
            lo, hi = s["iqr_best"][str(b)]
            cells.append(f"{s['median_best'][str(b)]:.1f} [{lo:.1f}-{hi:.1f}]")
        if live and cfg.baseline:
            cells += [f"{s.get('median_best_vs_reference', float('nan')):.2f}",
                      f"{s['median_trials_to_95pct_of_baseline']:.0f}"]
        entry = next(x for x in cfg.strategies if x["label"] == lab)
        notes = ([f"runs {entry['trials']} trials"] if "trials" in entry else []) + (
            [f"{len(entry['seeds'])} seed(s)"] if "seeds" in entry else []) + (
            [f"batch {entry['batch_size']}"] if "batch_size" in entry else [])
        lines.append(f"| {lab}" + (f" ({', '.join(notes)})" if notes else "") + " | "
                     + " | ".join(cells) + " |")
    if summary["mann_whitney_u"]:
        lines += ["", "One-sided Mann-Whitney U tests (p-values):", "",
                  "| comparison | fewer trials to 95% | higher best at budget |", "|---|---|---|"]
        for name, t in summary["mann_whitney_u"].items():
            vals = list(t.values())
            lines.append(f"| {name} | {format_p(vals[0])} | {format_p(vals[1])} |")
    lines += ["", f"![convergence]({os.path.basename(cfg.results)}.png)", ""]
    with atomic_write(cfg.results + ".md") as f:
        f.write("\n".join(lines))
    _plot(cfg, runs, summary)


def _vendor(summary: dict[str, Any]) -> str:
    return reference_label({"what": summary.get("reference_what")})


#: Okabe and Ito's colour-blind-safe palette (blue, orange, green, purple, sky, vermilion,
#: yellow), and a line style each, so that arms stay apart in grey print as well
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
STYLES = ("-", "--", "-.", (0, (1, 1)), (0, (5, 1, 1, 1, 1, 1)))


def _dataset_gpu(dataset: str | None) -> str | None:
    """The GPU a dataset was measured on, as its JSON names it (OSError, ValueError or
    AttributeError where the JSON cannot say)."""
    with open(f"{dataset}.json") as f:
        return (json.load(f).get("device") or {}).get("gpu")


def _gpu(cfg: CompareConfig, summary: dict[str, Any]) -> str | None:
    """The GPU the trials were measured on: the live run's, or the replayed dataset's."""
    if cfg.runner in LIVE:
        return ((summary.get("provenance") or {}).get("device") or {}).get("gpu")
    try:
        return _dataset_gpu(cfg.dataset)
    except (OSError, ValueError, AttributeError):
        return None


def _plot(cfg: CompareConfig, runs: list[dict], summary: dict[str, Any]) -> None:
    """The convergence figure, PNG and PDF: each arm's median best-so-far to the end of its own
    budget with its interquartile band (edges drawn, so overlapping bands stay readable), the
    vendor reference (timed in the same run, or the dataset's recorded value in replay) and
    the 95% line; titled with the workload, the GPU and the reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.4), dpi=150)
    for i, s in enumerate(cfg.strategies):
        n = s.get("trials", cfg.trials)
        curves = np.array([r["curve"][:n] for r in runs if r["label"] == s["label"]])
        if not len(curves):
            continue
        x = np.arange(1, curves.shape[1] + 1)
        q1, med, q3 = np.percentile(curves, [25, 50, 75], axis=0)
        color, style = PALETTE[i % len(PALETTE)], STYLES[i % len(STYLES)]
        ax.plot(x, med, color=color, ls=style, lw=1.6,
                label=f"{s['label']} ({len(curves)} seeds)")
        ax.fill_between(x, q1, q3, color=color, alpha=0.12, lw=0)
        for edge in (q1, q3):
            ax.plot(x, edge, color=color, ls=style, lw=0.5, alpha=0.7)
    vendor = _vendor(summary)
    if summary["reference_tflops"]:
        how = "recorded in the dataset" if cfg.runner not in LIVE else "same run"
        ax.axhline(summary["reference_tflops"], color="k", ls=":", lw=1,
                   label=f"{vendor} {summary['reference_tflops']:.0f} TFLOPS ({how})")
    ax.axhline(0.95 * summary["optimum_tflops"], color="grey", ls="--", lw=0.8,
               label=f"95% of the {summary['optimum_kind']}")
    ax.set_xlabel("trials")
    ax.set_ylabel("best TFLOPS so far")
    w = cfg.workload
    shape = "x".join(map(str, w.get("shape", [])))
    gpu = _gpu(cfg, summary) or "GPU not recorded"
    mode = "live" if cfg.runner in LIVE else "replay"
    ax.set_title(f"{w.get('op')} {shape}, space {w.get('space', 'v1')}, {w.get('dtype')}: "
                 f"{mode} on {gpu}\nmedian and interquartile band over seeds; reference "
                 f"{vendor}", fontsize=9)
    ax.legend(fontsize=7.5, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, cfg.results + ".png")
    from bocast.files import atomic_write

    with atomic_write(cfg.results + ".pdf", "wb") as f:
        fig.savefig(f, format="pdf")
    plt.close(fig)


def save_png(fig, path: str) -> None:
    """A plot as a 256-colour palette PNG: a third of the size, the same colours (committed
    results travel with the repository to the GPU machine, under a size limit)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    image = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    from bocast.files import atomic_write

    with atomic_write(path, "wb") as f:
        image.save(f, format="PNG", optimize=True)
