"""The Python API: what ``bocast tune`` runs, the records of a store, and ask/tell for a
measurement loop of one's own.

    import bocast
    result = bocast.tune("experiments/configs/bo_logei_gemm1024_replay.yaml")
    df = bocast.load(result.store)

    study = bocast.create_study(workload={"op": "gemm", "shape": [1024, 1024, 1024]})
    for config in study.ask(8):
        study.tell(config, tflops=my_timing(config))   # or status="build_error", ...

Wherever a configuration holds a mapping (a workload, a budget, runner_options, a strategy) it
may hold the typed object instead: :class:`bocast.Workload`, :class:`bocast.Budget`,
:class:`bocast.RunnerOptions`, ``bocast.strategies.BOOptions(acquisition="logei")``, ... (made
from the same :mod:`bocast.schema` sections, checked when built); it is passed on as the
mapping, so both forms go through the same checks.

Bad input raises :class:`bocast.errors.InputError` (a :class:`bocast.schema.ConfigError` for a
configuration field) with the one-line message the command prints. Everything heavy (torch, TVM,
pandas) is imported on first use, so ``import bocast`` stays cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bocast.errors import InputError
from bocast.schema import Options, plain

if TYPE_CHECKING:
    from bocast.comparison import CompareConfig
    from bocast.config import TuneConfig
    from bocast.measure.status import Status
    from bocast.records import Record, Store
    from bocast.strategies.base import Strategy

__all__ = ["Study", "TuneResult", "compare", "create_study", "load", "suggest", "tune"]


# ------------------------------------------------------------------------------ compare


def prepare_compare(config: str | os.PathLike | Mapping[str, Any], *,
                    summarize: bool = False) -> CompareConfig:
    """Check a comparison configuration whole (workload, dataset, every strategy, the stores
    already under its output, a GPU and nvcc for a live one unless ``summarize``) before
    anything runs or is written; errors of a file start with the file's name."""
    from bocast import comparison as cmp
    from bocast.config import in_file
    from bocast.datasets import dataset_files
    from bocast.schema import check_outputs, check_writable

    path = os.fspath(config) if isinstance(config, (str, os.PathLike)) else None
    try:
        cfg = cmp.load(path) if path is not None else cmp.parse(plain(config), os.getcwd())
        check_writable(cfg.output, "output", directory=True)
        results = [cfg.results + ext for ext in (".md", ".csv", ".json", ".png", ".pdf")]
        for out in results:
            check_writable(out, "results")
        # a rerun rewrites its own results (existing=None); it never writes over what it reads
        check_outputs({"results": results},
                      {"configuration file": path or [], "output's record stores":
                       [p for _, _, p, _ in cmp.plan(cfg)],
                       "dataset": dataset_files(cfg.dataset) if cfg.dataset else []},
                      existing=None)
        cmp.validate(cfg)
        if cfg.runner in cmp.LIVE and not summarize:
            if cfg.runner == "local":  # rpc: the servers time, this host only builds
                need_gpu("runner: local (a live comparison)", "use runner: replay with a "
                         "recorded dataset, or --summarize to write the results of finished "
                         "stores")
            if cfg.runner != "standin":  # the stand-in lowers but never compiles
                need_compiler(f"runner: {cfg.runner} (a live comparison)")
    except InputError as e:
        if path is None:
            raise
        raise in_file(e, path) from None
    return cfg


def compare(config: str | os.PathLike | Mapping[str, Any], *,
            only: Sequence[str] | None = None, summarize: bool = False,
            progress: bool = False) -> dict[str, Any]:
    """Run a comparison configuration (a YAML file or a mapping of its fields) exactly as
    ``bocast compare`` does: the same checks first, each run's store under ``output`` (resumed
    where it exists), the results (.md/.csv/.json/.png/.pdf) at ``results``. ``only``: just these
    strategy labels (results once every run has finished); ``summarize``: run nothing, write
    the results of finished stores. Returns the summary (the .json's content; ``missing``
    lists unfinished runs when there are any); ``progress`` prints status lines on stderr."""
    return run_compare(prepare_compare(config, summarize=summarize), only=only,
                       summarize=summarize, progress=progress)


def run_compare(cfg: CompareConfig, *, only: Sequence[str] | None = None,
                summarize: bool = False, progress: bool = False) -> dict[str, Any]:
    """:func:`compare` of a configuration that :func:`prepare_compare` checked."""
    from bocast import comparison as cmp
    from bocast.progress import Progress

    live = cfg.runner in cmp.LIVE
    with (Progress(f"compare {cfg.name}", None if live else len(cmp.plan(cfg)),
                   unit="trials" if live else "runs") if progress
          else contextlib.nullcontext()) as meter:
        return cmp.run(cfg, progress=meter.say if live and meter else None, meter=meter,
                       only=[] if summarize else (list(only) if only is not None else None))


# --------------------------------------------------------------------------------- tune


@dataclass(frozen=True)
class TuneResult:
    """What a tuning run found; ``summary`` is the run's ``summary.json``."""

    best_config: dict[str, Any] | None
    best_tflops: float | None
    trials: int
    store: str
    summary: dict[str, Any] = field(repr=False)


def tune(config: str | os.PathLike | Mapping[str, Any] | None = None, *,
         runner: str | None = None, progress: bool = False,
         records: str | os.PathLike | None = None, op: str | None = None,
         shape: Sequence[int] | None = None, **settings: Any) -> TuneResult:
    """Run one tune configuration (a YAML file or a mapping of the same fields) exactly as
    ``bocast tune`` does: same checks before anything is written, same records.db and
    summary.json in its ``output``, resumed when they exist. ``runner`` overrides the config's
    (as ``--runner``); ``progress`` prints the command's status lines on stderr; ``records``:
    the records library's folder (:mod:`bocast.library`).

    Without a configuration, ``op`` and ``shape`` name the workload and ``settings`` any other
    field, as ``bocast tune gemm --shape ...`` (:func:`quick_config`): ``tune(op="gemm",
    shape=(4096, 4096, 4096), runner="standin", trials=32, warm_start="none")``."""
    if config is None:
        if op is None:
            raise InputError("tune: give a configuration, or op= (and shape=)")
        config = quick_config(op, shape, runner=runner, **settings)
    elif op is not None or shape is not None or settings:
        raise InputError("tune: give a configuration or op=/shape=/settings, not both")
    run = prepare(config, runner=runner, records=records)
    summary, _ = run.execute(progress=progress)
    return TuneResult(summary.get("best_config"), summary.get("best_tflops"), summary["trials"],
                      run.store_path, summary)


def suggest(op: str, shape: Sequence[int] | None = None, *, k: int = 8,
            dtype: str | None = None, layout: str | None = None, space: str | None = None,
            gpu: str | None = None, records: str | os.PathLike | None = None):
    """``bocast suggest``: the ``k`` configurations of an operator's shape that the records
    library ranks best, with no measurement (:func:`bocast.suggestions.suggest`; ``gpu``: only
    records of that GPU model; ``records``: the library's folder). Returns
    :class:`bocast.suggestions.Suggestions` (``.items``, ``.sources``, ``.summary()``)."""
    from bocast import library
    from bocast import suggestions as suggestion
    from bocast.operator import get_operator, make

    options = {k: v for k, v in (("dtype", dtype), ("layout", layout), ("space", space))
               if v is not None}
    get_operator(op)  # an unknown operator is named before its shape
    target = make(op, tuple(shape) if shape is not None else None, **options)
    return suggestion.suggest(target, k=k, gpu=gpu,
                              records=library.directory(records) if records else None)


#: ``bocast tune OP`` settings that stand for a field of a section
QUICK_ALIASES = {"dtype": "workload.dtype", "layout": "workload.layout",
                 "space": "workload.space", "trials": "budget.trials",
                 "seconds": "budget.seconds", "warm_start": "strategy.warm_start"}
QUICK_DEFAULTS = {"runner": "local", "strategy": "bo", "batch_size": 16, "trials": 64, "seed": 0}


def quick_config(op: str, shape: Sequence[int] | None = None, *, runner: str | None = None,
                 **settings: Any) -> dict[str, Any]:
    """The tune configuration of ``bocast tune OP --shape ...``: ``settings`` are its fields
    (``seed``, ``batch_size``, ``dataset``, ``output``, ``store``, ...), a section's field as
    ``"strategy.acquisition"`` (``--set key=value``), or an alias (:data:`QUICK_ALIASES`:
    ``dtype``, ``layout``, ``space``, ``trials``, ``seconds``, ``warm_start``); ``strategy``
    a name or a mapping. Defaults: :data:`QUICK_DEFAULTS`; replay without ``dataset``: the
    shipped dataset of the workload with most rows; ``output``: ``runs/OP_SHAPE_SPACE_STRATEGY
    _sSEED`` (with ``store``: the store's folder)."""
    from bocast.config import workload_and_dataset
    from bocast.library import shipped_datasets
    from bocast.operator import canonical_workload

    cfg: dict[str, Any] = {"workload": {"op": op}, "strategy": {},
                           "budget": {"trials": QUICK_DEFAULTS["trials"]}}
    if shape is not None:
        cfg["workload"]["shape"] = list(shape)
    for key, value in {**{k: v for k, v in QUICK_DEFAULTS.items() if k != "trials"},
                       **({"runner": runner} if runner else {}), **settings}.items():
        if value is None:
            continue
        key = QUICK_ALIASES.get(key, key)
        if key == "strategy":
            cfg["strategy"].update({"name": value} if isinstance(value, str) else dict(value))
        elif "." in key:
            section, name = key.split(".", 1)
            if not isinstance(cfg.setdefault(section, {}), dict):
                raise InputError(f"{key}: {section} is not a section of the configuration")
            cfg[section][name] = value
        else:
            cfg[key] = value
    target, _ = workload_and_dataset(cfg["workload"], "local", None)  # the workload's own checks
    w = target.workload
    if cfg["runner"] == "replay" and not cfg.get("dataset"):
        fits = []
        for prefix in shipped_datasets():
            with open(prefix + ".json") as f:
                meta = json.load(f)
            if canonical_workload(meta.get("workload", {})) == canonical_workload(w):
                fits.append((-int(meta.get("rows") or 0), prefix))
        if not fits:
            raise InputError(f"runner replay: no shipped dataset of {op} {w.get('shape')} "
                             f"(space {w.get('space')}); give dataset (--dataset)")
        cfg["dataset"] = min(fits)[1]
    if not cfg.get("output"):
        store = cfg.get("store")
        cfg["output"] = os.path.dirname(os.path.abspath(store)) if store else os.path.join(
            "runs", f"{op}_{'x'.join(map(str, w['shape']))}_{w.get('space', 'v1')}_"
                    f"{cfg['strategy']['name']}_s{cfg['seed']}")
    return cfg


def need_gpu(what: str, alternative: str) -> None:
    from bocast.measure.runner import why_no_gpu

    reason = why_no_gpu()
    if reason:
        raise InputError(f"{what} needs a CUDA GPU: {reason}; nothing was written "
                         f"({alternative})")


def need_compiler(what: str) -> None:
    from bocast.measure.nvcc import why_no_compiler

    reason = why_no_compiler()
    if reason:
        raise InputError(f"{what}: {reason}; nothing was written")


def prepare(config: str | os.PathLike | Mapping[str, Any], *, runner: str | None = None,
            rpc: Mapping[str, Any] | None = None,
            records: str | os.PathLike | None = None) -> TuneRun:
    """Check a tune configuration whole, and the store already in its output (which must hold
    this run, :mod:`bocast.identity`), only reading: nothing is written or created until
    :meth:`TuneRun.execute` has started the runner. Errors of a file's configuration start with
    the file's name (as the command prints them). ``warm_start: auto`` (the default) is
    resolved here (:func:`bocast.library.resolve`; ``records``: the library's folder)."""
    from bocast import config as cfgmod
    from bocast import identity, library
    from bocast.candidates import SpaceCandidates
    from bocast.datasets import dataset_files
    from bocast.schema import check_outputs
    from bocast.strategies import make_strategy

    path = os.fspath(config) if isinstance(config, (str, os.PathLike)) else None
    try:
        cfg = (cfgmod.parse(plain(config), runner=runner, rpc=rpc)
               if not isinstance(config, (str, os.PathLike))
               else cfgmod.load(os.fspath(config), runner=runner, rpc=rpc))
        # a resumed run rewrites its own summary (existing=None), never a file it reads
        check_outputs({"output's summary.json": f"{cfg.output}/summary.json"},
                      {"configuration file": path or [],
                       "dataset": dataset_files(cfg.dataset) if cfg.dataset else []},
                      existing=None)
        op, dataset = cfgmod.workload_and_dataset(cfg.workload, cfg.runner, cfg.dataset)
        if dataset is not None:
            candidates = dataset.candidates()
        else:
            if cfg.runner == "local":  # rpc: kernels run on the servers; this host only builds
                need_gpu("runner local", "use --runner replay with a recorded dataset")
            if cfg.runner != "standin":  # the stand-in lowers but never compiles
                need_compiler(f"runner {cfg.runner}")
            candidates = SpaceCandidates(op.space, op.workload)
        store_path = cfg.store or f"{cfg.output}/records.db"
        folder = library.directory(records, cfg.records)
        warm = _warm_start(cfg, op, dataset, store_path, folder)
        options = cfg.strategy_options if warm is None else \
            library.warm_options(cfg.strategy, cfg.strategy_options, warm.sources)
        strategy = make_strategy(cfg.strategy, candidates, seed=cfg.seed, **options)
        ident = identity.run_identity(
            strategy=cfg.strategy, options=_identity_options(cfg.strategy_options, options),
            seed=cfg.seed,
            batch_size=cfg.batch_size, runner=cfg.runner, dataset=cfg.dataset,
            warm_start=None if warm is None else [library.portable(p) for p in warm.sources])
        identity.check_path(store_path, op.workload, ident)
    except InputError as e:
        if path is None:
            raise
        raise cfgmod.in_file(e, path) from None
    return TuneRun(cfg, op, dataset, strategy, store_path, ident, warm=warm, records=folder)


def _identity_options(given: dict[str, Any], used: dict[str, Any]) -> dict[str, Any]:
    """The options a run's identity names: those given, and those ``warm_start: auto`` set
    (:func:`bocast.library.warm_options`); the sources are named apart (``warm_start``)."""
    return {**given, **{k: v for k, v in used.items() if k not in given and k != "warm_start"}}


def _warm_start(cfg: TuneConfig, op, dataset, store_path: str, folder: str):
    """The run's warm-start sources (:class:`bocast.library.Choice`) when its strategy has the
    option and it is ``auto``; None otherwise (a list or ``none``: used as given). A resumed
    run keeps the sources its store's identity names."""
    from bocast import library
    from bocast.bo.transfer import AUTO
    from bocast.store import Store
    from bocast.strategies import strategy_class

    if "warm_start" not in strategy_class(cfg.strategy).options.names \
            or cfg.strategy_options.get("warm_start", AUTO) != AUTO:
        return None
    if os.path.isfile(store_path) and os.path.getsize(store_path) > 0:
        with Store.open(store_path, op.workload) as store:
            held = (store.get_meta("run") or {}).get("resolved", {}).get("warm_start")
        if isinstance(held, list):
            paths = [library.local(p) for p in held]
            return library.Choice(paths, [
                "warm start: as this run began, from " + (", ".join(held) or "nothing (cold)")])
    return library.resolve(AUTO, op, runner=cfg.runner, dataset=cfg.dataset, store=store_path,
                           records=folder,
                           gpu=library.run_gpu(cfg.runner, dataset=dataset, rpc=cfg.rpc))


@dataclass
class TuneRun:
    """A checked tune configuration with its strategy and the store it will write
    (:func:`prepare`)."""

    cfg: TuneConfig
    op: Any
    dataset: Any
    strategy: Strategy
    store_path: str
    identity: dict[str, Any]
    warm: Any = None  # bocast.library.Choice of warm_start: auto (None: the option as given)
    records: str = ""  # the records library's folder

    @property
    def summary_path(self) -> str:
        if self.cfg.store:
            return os.path.splitext(self.cfg.store)[0] + ".summary.json"
        return f"{self.cfg.output}/summary.json"

    @property
    def warm_start_sources(self) -> list[str]:
        from bocast import library
        from bocast.bo.transfer import source_paths

        return [library.portable(p) for p in source_paths(self.strategy.hyper.get("warm_start"))]

    def execute(self, *, progress: bool = True) -> tuple[dict[str, Any], list[str]]:
        """Run to the budget (resuming the store's trials), write summary.json; return the
        summary and the command's result lines."""
        from bocast import identity
        from bocast.measure.replay import ReplayMeasurer
        from bocast.progress import Progress, reference_label, say
        from bocast.records import atomic_write, provenance
        from bocast.tuner import Tuner

        cfg, op, dataset = self.cfg, self.op, self.dataset
        note = say if progress else (lambda _: None)
        closers: list[Any] = []  # runner, store and builder: closed when the run ends
        ref: dict[str, Any] = {}  # a live run's reference (the vendor library's timing)
        measurer: ReplayMeasurer | Measurer
        try:
            if dataset is None:
                from bocast.measure.engine import Measurer
                from bocast.measure.parts import make_builder, make_runner

                ro = cfg.runner_options
                runner = make_runner(cfg.runner, timeout_s=ro["run_timeout"],
                                     repeats=ro["repeats"], seed=cfg.seed, rpc=cfg.rpc)
                closers.append(runner)
                device = runner.device()
            # the run can start: only now is its store created (or opened for writing), so a
            # runner that fails to start leaves no store stamped with this run behind
            store = identity.open_store(self.store_path, op.workload, self.identity)
            closers.append(store)
            previous = store.records()
            if dataset is not None:
                measurer = ReplayMeasurer(dataset, store)
                reference = (dataset.reference or {}).get("tflops")
                label = reference_label(dataset.reference, recorded=True)
                note(f"runner: replay of {cfg.dataset} ({len(dataset.configs)} recorded "
                     "configurations; no GPU is used)")
            else:
                ref = store.get_meta("reference") or runner.reference(op)
                builder = make_builder(workers=ro["workers"], timeout_s=ro["build_timeout"],
                                       reject_spills=ro["reject_spills"],
                                       compile=cfg.runner != "standin")
                closers.append(builder)
                store.set_meta("reference", ref)
                reference = ref.get("tflops")
                label = reference_label(ref)
                measurer = Measurer(op, store, builder, runner, session_info={
                    "device": device, "runner": cfg.runner, "config": cfg.raw,
                    "warm_start_sources": self.warm_start_sources})
                note(f"runner: live on {device.get('gpu')}; reference {reference:.1f} TFLOPS")
            for line in self.warm.notes if self.warm is not None else []:
                note(line)
            if previous:
                note(f"resuming: {len(previous)} trials already in {self.store_path}")
            with (Progress(f"tune {cfg.strategy} seed {cfg.seed}", cfg.trials) if progress
                  else contextlib.nullcontext()) as meter:
                tuner = Tuner(self.strategy, measurer, trials=cfg.trials, seconds=cfg.seconds,
                              batch_size=cfg.batch_size,
                              optimum=dataset.best_tflops if dataset else None,
                              reference=reference, reference_label=label, meter=meter)
                result = tuner.run(previous)
        finally:
            for c in closers:
                c.close()
            copy = self._to_library(note)
        sources = self.warm_start_sources
        summary = {**result.summary(), "config": cfg.path, "config_sha256": cfg.digest,
                   "strategy": cfg.strategy, "strategy_options": self.strategy.hyper,
                   "seed": cfg.seed, "runner": cfg.runner, "dataset": cfg.dataset,
                   "output": cfg.output, "store": self.store_path,
                   "warm_start_sources": sources, "library_copy": copy,
                   "export": f"bocast export {self.store_path} --best --out "
                             f"{os.path.join(os.path.dirname(self.store_path), 'kernel')}",
                   "provenance": provenance({"warm_start_sources": sources})}
        with atomic_write(self.summary_path) as f:
            json.dump(summary, f, indent=1, sort_keys=True, default=str)
        best = result.best_tflops or 0.0
        what = (dataset.reference if dataset is not None else ref) or {}
        lines = [f"{cfg.strategy} ({self.strategy.hyper.get('acquisition', '')}) seed "
                 f"{cfg.seed}: {result.trials} trials, best {best:.1f} TFLOPS"
                 + (f" = {best / reference:.2f}x "
                    + (f"{what['what']}" if what.get("what") else "reference")
                    + (" (recorded in the dataset)" if dataset is not None else "")
                    if reference else "")]
        if result.optimum:
            lines.append(f"dataset best {result.optimum:.1f} TFLOPS; 95% reached at trial "
                         f"{result.trials_to(0.95)}")
        if sources:
            lines.append(f"warm start from {', '.join(sources)}")
        lines.append(f"records: {self.store_path}; summary: {self.summary_path}"
                     + (f"; library copy: {copy}" if copy else ""))
        lines.append(f"export the best kernel: {summary['export']}")
        return summary, lines

    def _to_library(self, note) -> str | None:
        """A live run's store copied into the records library (also when interrupted); a
        failure is one line, never fatal. None for replay (its rows are a dataset's)."""
        import sqlite3

        from bocast import library

        if self.cfg.runner == "replay" or not os.path.isfile(self.store_path):
            return None
        try:
            path, what = library.add(self.store_path, self.records)
        except (InputError, OSError, sqlite3.Error) as e:
            note(f"records library: not added ({' '.join(str(e).split())[:300]})")
            return None
        note(f"records library: {what} {path}")
        return path


def load(store_path: str | os.PathLike):
    """The records of a store as a pandas DataFrame: one column per knob (split knobs as
    ``name_0 .. name_k``), then status, latencies, TFLOPS, static features."""
    from bocast.store import StoreError
    from bocast.store import load as load_records

    if not isinstance(store_path, (str, os.PathLike)):
        raise StoreError(f"load: expected the path of a record store, got {store_path!r}")
    return load_records(os.fspath(store_path))


# -------------------------------------------------------------------------------- study


def create_study(workload: Mapping[str, Any] | Options, *, strategy: str | Options = "bo",
                 seed: int = 0, store: str | os.PathLike | None = None,
                 **strategy_options: Any) -> Study:
    """An ask/tell study of ``workload`` (``{"op": "gemm", "shape": [...], ...}``, as a tune
    configuration's, or a :class:`bocast.Workload`) over its whole space. ``strategy``: a name,
    or typed options (``bocast.strategies.BOOptions(...)``) that ``strategy_options`` add to.
    With ``store``, every told trial is appended there and a study of the same strategy,
    options and seed on the same store resumes: the strategy is told the stored trials first
    (a store of another run is refused, :mod:`bocast.identity`). A study starts cold unless
    ``warm_start`` lists its sources: the caller measures, so its GPU and timing are not
    known, and ``auto`` (the option's default) could not keep other GPUs' records out; a
    study's records are not added to the records library either."""
    from bocast import config as cfgmod
    from bocast import identity
    from bocast.candidates import SpaceCandidates
    from bocast.schema import SEED, ConfigError
    from bocast.strategies import make_strategy

    op, _ = cfgmod.workload_and_dataset(plain(workload), "local", None)
    seed = SEED.check(seed, "")
    entry = plain(strategy) if isinstance(strategy, Options) else {"name": strategy}
    name, options = cfgmod.strategy_entry({**entry, **strategy_options}, "strategy.")
    extra = sorted(set(strategy_options) & set(cfgmod.COMPARISON_KEYS))
    if extra:
        raise ConfigError(f"strategy: {extra} are not options of a strategy")
    strat = make_strategy(name, SpaceCandidates(op.space, op.workload), seed=seed, **options)
    # ask/tell has no fixed batch: the identity leaves it out
    db = None if store is None else identity.open_store(
        os.fspath(store), op.workload, identity.run_identity(
            strategy=name, options=options, seed=seed, batch_size=None, runner="study",
            dataset=None))
    return Study(op, strat, db)


class Study:
    """Ask for configurations, measure them your way, tell the results (:func:`create_study`)."""

    def __init__(self, op, strategy: Strategy, store: Store | None = None):
        self.op, self.strategy, self.store = op, strategy, store
        self.closed = False
        self.records: list[Record] = store.records() if store is not None else []
        self._told = {r.key for r in self.records}
        if self.records:
            self.strategy.tell(list(self.records))
        self._session = (store.start_session({"runner": "study", "strategy": strategy.name})
                         if store is not None else None)

    @property
    def space(self):
        return self.op.space

    def ask(self, n: int = 1) -> list[dict[str, Any]]:
        """Up to ``n`` configurations not asked or told before (fewer once none are left)."""
        self._open("ask")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"ask: n must be a positive integer, got {n!r}")
        return self.strategy.ask(n)

    def tell(self, config: Mapping[str, Any], tflops: float | None = None,
             status: str | Status = "ok", **fields: Any) -> Record:
        """Record one measurement: ``tflops`` for status ``ok`` (required there), otherwise the
        failure's status (``build_error``, ``run_timeout``, ...; see
        :class:`bocast.measure.status.Status`). ``fields``: other columns of a record
        (``latency_ms``, ``build_s``, ``error``, ``features={...}``, ...)."""
        self._open("tell")
        record = self._record(config, tflops, status, **fields)
        self.strategy.tell([record])
        return record

    def _record(self, config: Mapping[str, Any], tflops: float | None = None,
                status: str | Status = "ok", **fields: Any) -> Record:
        """:meth:`tell` but the strategy's: checked, stored and kept."""
        from bocast.measure.status import Status
        from bocast.record import Record, check_record
        from bocast.space import Space

        try:
            status = Status(status)
        except ValueError:
            raise InputError(f"tell: unknown status {status!r}; known: "
                             f"{', '.join(s.value for s in Status)}") from None
        config = self._config(config)
        key = Space.key(config)
        if key in self._told:
            raise InputError(f"tell: configuration {key} was already told")
        allowed = ({f.name for f in dataclasses.fields(Record)}
                   - {"key", "config", "status", "tflops"})
        unknown = sorted(set(fields) - allowed)
        if unknown:
            raise InputError(f"tell: unknown field(s) {unknown}; known: {sorted(allowed)}")
        record = Record(key, {k: list(v) if isinstance(v, tuple) else v
                              for k, v in config.items()}, status, tflops=tflops,
                        **{"source": self.strategy.name, **fields})
        try:  # the store's check too, so that a study without a store keeps only what it could
            check_record(record)
        except InputError as e:
            raise type(e)(f"tell: {e}") from None
        if self.store is not None:
            self.store.append(record, self._session)
        self._told.add(key)
        self.records.append(record)
        return record

    def optimize(self, objective, *, n_trials: int, batch_size: int = 1) -> Record | None:
        """Ask, measure with ``objective(config)`` and tell, ``batch_size`` configurations at a
        time, until ``n_trials`` more have been told (or the space runs out). ``objective``
        returns the configuration's TFLOPS, or a failure's status (a :class:`Status` or its
        name, e.g. ``"build_error"``); an exception it raises stops the loop, every trial told
        before it kept (in the store too). Returns :attr:`best`."""
        for name, v in (("n_trials", n_trials), ("batch_size", batch_size)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"optimize: {name} must be a positive integer, got {v!r}")
        from bocast.tuner import Tuner

        self._open("optimize")
        Tuner(self.strategy, _Objective(self, objective), trials=n_trials,
              batch_size=batch_size).run()
        return self.best

    def _config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration in the space's form, or a one-line InputError."""
        if not isinstance(config, Mapping):
            raise InputError(f"tell: a configuration is a mapping of knobs, got {config!r}")
        try:
            out = self.space.from_json(config)
            bad = self.space.structural_violations(out)
        except InputError as e:
            raise InputError(f"tell: {e}") from None
        except (TypeError, ValueError) as e:  # a split given as a number, ...
            raise InputError(f"tell: configuration not in the space ({e})") from None
        if bad:
            raise InputError(f"tell: configuration not in the space ({', '.join(bad)})")
        return out

    @property
    def best(self) -> Record | None:
        """The told trial of highest TFLOPS among the successful ones."""
        from bocast.record import best_record

        return best_record(self.records)

    @property
    def trials(self):
        """Every told trial (resumed ones first) as a DataFrame, the columns of :func:`load`."""
        from bocast.store import frame

        return frame(self.records)

    def close(self) -> None:
        self.closed = True
        if self.store is not None:
            self.store.close()

    def _open(self, what: str) -> None:
        if self.closed:
            raise InputError(f"{what}: the study was closed (create_study resumes it from its "
                             "store)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Objective:
    """A study's ``objective`` as the measurer of the one loop (:class:`bocast.tuner.Tuner`)."""

    def __init__(self, study: Study, objective):
        self.study, self.objective = study, objective

    def measure(self, configs, *, source: str = "") -> list[Record]:  # noqa: ARG002 - the study's
        records: list[Record] = []
        try:
            for config in configs:
                value = self.objective(config)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    records.append(self.study._record(config, tflops=value))
                else:
                    records.append(self.study._record(config, status=value))
        except BaseException:
            # the loop stops without telling this batch: the strategy learns what was kept,
            # so a later optimize or ask goes on from every stored trial
            self.study.strategy.tell(records)
            raise
        return records
