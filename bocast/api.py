"""The Python API: what ``bocast tune`` runs, the records of a store, and ask/tell for a measurement
loop of one's own (:mod:`bocast.run.study`; a run of ``tune``: :mod:`bocast.run.tune_run`; many
workloads in one run, ``bocast tune --shapes``: ``bocast.tune_many`` in :mod:`bocast.many`).

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
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from bocast.errors import InputError
from bocast.locations import check_outputs, check_writable
from bocast.options import QUICK_OPTIONS, plain
from bocast.progress import Progress
from bocast.run import figures
from bocast.run.study import Study, create_study
from bocast.run.tune_run import TuneRun, figure_prefix

if TYPE_CHECKING:
    from bocast.measure.builder import Builder
    from bocast.measure.replay import ReplayRunner
    from bocast.measure.runner import Runner
    from bocast.run.comparison import CompareConfig

# Study, create_study (bocast.run.study's) named here too: users are pointed here for the whole API
__all__ = ["Study", "TuneResult", "compare", "create_study", "load", "suggest", "tune"]


# ------------------------------------------------------------------------------ compare


def prepare_compare(config: str | os.PathLike | Mapping[str, Any], *,
                    summarize: bool = False, runner: Runner | None = None,
                    builder: Builder | None = None,
                    only: Sequence[str] | None = None) -> CompareConfig:
    """Check a comparison configuration whole (workload, dataset, every strategy, the stores
    already under its output, a GPU and nvcc for a live one unless ``summarize``, the objects
    of :func:`compare`, the labels of ``only``) before anything runs or is written; errors of
    a file start with the file's name."""
    from bocast.records.datasets import dataset_files
    from bocast.run import comparison as cmp
    from bocast.run import config as cfgmod

    path = os.fspath(config) if isinstance(config, (str, os.PathLike)) else None
    if isinstance(runner, str):
        raise InputError("runner: compare takes a runner object; its configuration names the "
                         "kind")
    kind, given = cfgmod.runner_argument(runner, builder)
    try:
        cfg = cmp.load(path) if path is not None else cmp.parse(plain(config), os.getcwd())
        cmp.check_only(cfg, only)  # before the dataset is read (pandas, seconds)
        check_writable(cfg.output, "output", directory=True)
        results = [cfg.results + ext for ext in (".md", ".csv", ".json")] + \
            figures.paths(cfg.results)
        for out in results:
            check_writable(out, "results")
        # a rerun rewrites its own results (existing=None); it never writes over what it reads
        check_outputs({"results": results},
                      {"configuration file": path or [], "output's record stores":
                       [p for _, _, p, _ in cmp.plan(cfg)],
                       "dataset": dataset_files(cfg.dataset) if cfg.dataset else []},
                      existing=None)
        cmp.validate(cfg)
        cls = cfg.runner_class
        if (given or builder) and (not cls.live or (given is not None and
                                                    given.synthetic != cls.synthetic)):
            raise InputError(f"runner: objects serve a live comparison whose runner is their "
                             f"kind ({given.name if given else kind}), not runner: "
                             f"{cfg.runner}")
        if cls.live and not summarize:
            need_machine(type(given) if given else cls, f"runner: {cfg.runner} (a live "
                         "comparison)", "use runner: replay with a recorded dataset, or "
                         "--summarize to write the results of finished stores", builder)
    except InputError as e:
        if path is None:
            raise
        raise cfgmod.in_file(e, path) from None
    return cfg


def compare(config: str | os.PathLike | Mapping[str, Any], *,
            only: Sequence[str] | None = None, summarize: bool = False,
            progress: bool = False, runner: Runner | None = None,
            builder: Builder | None = None) -> dict[str, Any]:
    """Run a comparison configuration (a YAML file or a mapping of its fields) exactly as
    ``bocast compare`` does: the same checks first, each run's store under ``output`` (resumed
    where it exists), the results at ``results`` (.md/.csv/.json, and the figure's
    .png/.pdf/.svg where matplotlib is installed: ``bocast[plot]``). ``only``: just these
    strategy labels (results once every run has finished); ``summarize``: run nothing, write
    the results of finished stores. Returns the summary (the .json's content; ``missing``
    lists unfinished runs when there are any); ``progress`` prints status lines on stderr.
    ``runner``/``builder``: objects that serve a live comparison instead of the ones its
    runner kind makes (as :func:`tune` takes them; a stand-in object for ``runner: standin``);
    the caller's, never closed. The stores' identity names the configuration's kind, their
    sessions the runner's ``name``."""
    return run_compare(prepare_compare(config, summarize=summarize, runner=runner,
                                       builder=builder, only=only),
                       only=only, summarize=summarize, progress=progress, runner=runner,
                       builder=builder)


def run_compare(cfg: CompareConfig, *, only: Sequence[str] | None = None,
                summarize: bool = False, progress: bool = False, runner: Runner | None = None,
                builder: Builder | None = None) -> dict[str, Any]:
    """:func:`compare` of a configuration that :func:`prepare_compare` checked."""
    from bocast.run import comparison as cmp

    live = cfg.runner_class.live
    with (Progress(f"compare {cfg.name}", None if live else len(cmp.plan(cfg)),
                   unit="trials" if live else "runs") if progress
          else contextlib.nullcontext()) as meter:
        return cmp.run(cfg, progress=meter.say if live and meter else None, meter=meter,
                       only=[] if summarize else (list(only) if only is not None else None),
                       runner=runner, builder=builder)


# --------------------------------------------------------------------------------- tune


@dataclass(frozen=True)
class TuneResult:
    """What a tuning run found; ``summary`` is the run's ``summary.json``."""

    best_config: dict[str, Any] | None
    best_tflops: float | None
    trials: int
    store: str
    summary: dict[str, Any] = field(repr=False)
    figures: list[str] = field(default_factory=list)  # with plot=True: its .png, .pdf, .svg


def tune(config: str | os.PathLike | Mapping[str, Any] | None = None, *,
         runner: str | Runner | None = None, builder: Builder | None = None,
         progress: bool = False,
         records: str | os.PathLike | None = None, plot: bool = False, op: str | None = None,
         shape: Sequence[int] | None = None, **settings: Any) -> TuneResult:
    """Run one tune configuration (a YAML file or a mapping of the same fields) exactly as ``bocast
    tune`` does: same checks before anything is written, same records.db and summary.json in its
    ``output``, resumed when they exist. ``runner`` overrides the config's: a kind (as ``--runner``)
    or, as MetaSchedule's tune functions take one, a :class:`bocast.measure.runner.Runner` object (a
    subclass of one's own, one of :func:`bocast.measure.parts.make_runner`; a ``ReplayRunner``
    replays its dataset); the run records its ``name``. ``builder``: a
    :class:`bocast.measure.builder.Builder` object for a live run. Objects passed in are the
    caller's: bocast uses them and never closes them. ``progress`` prints the command's status lines
    on stderr; ``records``: the records library's folder (:mod:`bocast.records.library`); ``plot``
    (as ``--plot``): draw the run's figure beside its summary, ``convergence.png/.pdf/.svg`` (best
    so far and every trial, failures marked, the reference named; needs ``bocast[plot]``, checked
    first).

    Without a configuration, ``op`` and ``shape`` name the workload and ``settings`` any other
    field, as ``bocast tune gemm --shape ...`` (:func:`quick_config`): ``tune(op="gemm",
    shape=(4096, 4096, 4096), runner="standin", trials=32, warm_start="none")``."""
    if config is None:
        if op is None:
            raise InputError("tune: give a configuration, or op= (and shape=)")
        config = quick_config(op, shape, runner=runner if isinstance(runner, str) else None,
                              **settings)
    elif op is not None or shape is not None or settings:
        raise InputError("tune: give a configuration or op=/shape=/settings, not both")
    run = prepare(config, runner=runner, builder=builder, records=records, plot=plot)
    summary, _ = run.execute(progress=progress)
    return TuneResult(summary.get("best_config"), summary.get("best_tflops"), summary["trials"],
                      run.store_path, summary, summary.get("figures", []))


def suggest(op: str, shape: Sequence[int] | None = None, *, k: int = 8,
            dtype: str | None = None, layout: str | None = None, space: str | None = None,
            gpu: str | None = None, records: str | os.PathLike | None = None,
            fuse: str | None = None):
    """``bocast suggest``: the ``k`` configurations of an operator's shape that the records
    library ranks best, with no measurement (:func:`bocast.tools.suggestions.suggest`; ``gpu``: only
    records of that GPU model; ``records``: the library's folder). Returns
    :class:`bocast.tools.suggestions.Suggestions` (``.items``, ``.sources``, ``.summary()``)."""
    from bocast.records import library
    from bocast.space.operators.operator import make_named
    from bocast.tools import suggestions as suggestion

    options = {k: v for k, v in dict(dtype=dtype, layout=layout, space=space, fuse=fuse).items()
               if v is not None}
    target = make_named(op, tuple(shape) if shape is not None else None, **options)
    return suggestion.suggest(target, k=k, gpu=gpu,
                              records=library.directory(records) if records else None)


def quick_config(op: str, shape: Sequence[int] | None = None, *, runner: str | None = None,
                 **settings: Any) -> dict[str, Any]:
    """The tune configuration of ``bocast tune OP --shape ...``: ``settings`` are the command's
    options (:data:`bocast.options.QUICK_OPTIONS`: ``dtype``, ``space``, ``trials``, ``seed``,
    ``warm_start``, ...; ``strategy`` a name or a mapping), any other field of the
    configuration, or a section's field as ``"strategy.acquisition"`` (``--set key=value``).
    Left out, an option takes its default there; the runner is ``local`` (this machine's
    GPU); replay without ``dataset``: the shipped dataset of the workload with most rows;
    ``output``: ``runs/OP_SHAPE_SPACE_STRATEGY_sSEED`` (with ``store``: the store's folder)."""
    from bocast.measure.replay import shipped_dataset_for
    from bocast.run.config import check_runner, workload_and_dataset

    cfg: dict[str, Any] = {"workload": {"op": op}, "strategy": {}, "runner": runner or "local"}
    cls = check_runner(cfg["runner"])  # what the kind needs, asked of its class
    if shape is not None:
        cfg["workload"]["shape"] = list(shape)
    keys = {o.name: o.key for o in QUICK_OPTIONS}
    given = {k: v for k, v in settings.items() if v is not None}  # None: not given
    for key, value in given.items():
        if value == "" and (key in keys or key in keys.values()):  # else the default, silently
            raise InputError(f"{key}: empty; leave it out for its default")
    for key, value in {**{o.name: o.default for o in QUICK_OPTIONS}, **given}.items():
        if value is None or (key == "batch_size" and key not in given and cls.fleet):
            continue  # a fleet: the batch follows its size unless given (rpc_options.batch_for_run)
        key = keys.get(key, key)
        if key in ("strategy", "strategy.name"):
            cfg["strategy"].update({"name": value} if isinstance(value, str) else dict(value))
        elif "." in key:
            section, name = key.split(".", 1)
            if not isinstance(cfg.setdefault(section, {}), dict):
                raise InputError(f"{key}: {section} is not a section of the configuration")
            cfg[section][name] = value
        else:
            cfg[key] = value
    # else ignored without a word (a configuration file may keep them for another runner)
    replays = cls.answers_records  # a dataset's records
    # rpc: the section of a fleet runner's options (tracker, key, ...)
    for key, fits, runner_of_it in (("dataset", replays, "replay"), ("rpc", cls.fleet, "rpc")):
        if cfg.get(key) and not fits:
            raise InputError(f"{key}: only for runner {runner_of_it}; this run's runner is "
                             f"{cfg['runner']}")
    target, _ = workload_and_dataset(cfg["workload"], "local", None)  # the workload's own checks
    w = target.workload
    if replays and not cfg.get("dataset"):  # the space recorded, if auto's
        cfg["dataset"], cfg["workload"]["space"] = shipped_dataset_for(
            w, space_auto=cfg["workload"].get("space", "auto") == "auto")
    if not cfg.get("output"):
        store = cfg.get("store")
        cfg["output"] = os.path.dirname(os.path.abspath(store)) if store else os.path.join(
            "runs", f"{op}_{'x'.join(map(str, w['shape']))}_{w.get('space', 'v1')}_"
                    f"{cfg['strategy']['name']}_s{cfg['seed']}")
    return cfg


def need_machine(cls: type[Runner], what: str, alternative: str, builder: Any = None) -> None:
    """What a run whose runner is of class ``cls`` needs of this machine, checked before
    anything is written (its declarations): a CUDA GPU where it times on this one, nvcc where
    its kernels are compiled here, unless ``builder`` (the caller's) builds them."""
    if cls.needs_gpu:
        need_gpu(what, alternative)
    if cls.compiles and builder is None:
        need_compiler(what)


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


def prepare(config: str | os.PathLike | Mapping[str, Any], *,
            runner: str | Runner | None = None, builder: Builder | None = None,
            rpc: Mapping[str, Any] | None = None,
            records: str | os.PathLike | None = None, plot: bool = False,
            warm_also: Sequence[str] = (), warm_never: Sequence[str] = ()) -> TuneRun:
    """Check a tune configuration whole, and the store in its output (which must hold this run,
    :mod:`bocast.run.identity`), only reading: nothing is written before :meth:`TuneRun.execute`
    starts the runner. A file's errors start with its name. ``warm_start: auto`` is resolved
    here (``records``: the library's folder); ``plot``: matplotlib checked; ``runner`` and
    ``builder`` as :func:`tune` takes them; ``warm_also``/``warm_never``: a workload of a run
    of many (:mod:`bocast.many`): its run's finished stores (candidates), its other stores."""
    from bocast.measure.rpc import options as rpc_options
    from bocast.records import library
    from bocast.records.datasets import dataset_files
    from bocast.run import config as cfgmod
    from bocast.run import identity, warm_sources
    from bocast.space.candidates import SpaceCandidates
    from bocast.strategies import make_strategy

    path = os.fspath(config) if isinstance(config, (str, os.PathLike)) else None
    kind, given = cfgmod.runner_argument(runner, builder)
    replayed = cast("ReplayRunner", given).dataset if given and given.answers_records else None
    fixed: dict[str, Any] = {"runner": kind, "rpc": rpc,
                             "dataset": replayed.prefix if replayed else None}
    try:
        cfg = (cfgmod.parse(plain(config), **fixed)
               if not isinstance(config, (str, os.PathLike))
               else cfgmod.load(os.fspath(config), **fixed))
        if plot:
            figures.require("plot (the run's figure)")
        # a resumed run rewrites its own summary and figure (existing=None), never a file it reads
        check_outputs({"output's summary.json": f"{cfg.output}/summary.json",
                       **({"figure": figures.paths(figure_prefix(cfg))} if plot else {})},
                      {"configuration file": path or [],
                       "dataset": dataset_files(cfg.dataset) if cfg.dataset else []},
                      existing=None)
        store_path = cfg.store or f"{cfg.output}/records.db"
        # a damaged or foreign store, or one of another run, refused before pandas reads a
        # dataset (issue 42: 3 s)
        identity.check_known(store_path, strategy=cfg.strategy, seed=cfg.seed,
                             runner=given.name if given else cfg.runner, dataset=cfg.dataset)
        warm_sources.not_own(cfg, store_path)
        op, dataset = cfgmod.workload_and_dataset(cfg.workload, cfg.runner, cfg.dataset,
                                                  opened=replayed)
        if dataset is None and cfg.runner_class.needs_gpu:
            # the local GPU's SMs set space v3's grid and waves: the workload names them
            # (replay: the dataset's workload; rpc, none known before the servers answer: 132)
            from bocast.space.operators.operator import on_gpu

            arch = warm_sources.run_architecture(cfg.runner)
            op = on_gpu(op, arch[1] if arch else None)
        allowed = cfgmod.fixed_values(op, cfg.fix)
        if dataset is not None:
            candidates = dataset.candidates()
        else:
            # rpc: kernels run on the servers, this host only builds; a runner object times
            # them where its class says
            need_machine(cfg.runner_class, f"runner {cfg.runner}",
                         "use --runner replay with a recorded dataset", builder)
            candidates = SpaceCandidates(op.space, op.workload)
        candidates = cfgmod.restrict(candidates, allowed)
        folder = library.directory(records, cfg.records)
        warm = warm_sources.for_run(cfg, op, dataset, store_path, folder,
                                    probe=given is None or not cfg.runner_class.needs_gpu,
                                    also=warm_also, never=warm_never)
        options = cfg.strategy_options if warm is None else \
            warm_sources.warm_options(cfg.strategy, cfg.strategy_options, warm.sources)
        strategy = make_strategy(cfg.strategy, candidates, seed=cfg.seed, **options)
        batch_note = rpc_options.batch_for_run(cfg, store_path) if given is None else None
        ident = identity.run_identity(
            strategy=cfg.strategy,
            options=warm_sources.identity_options(cfg.strategy_options, options), seed=cfg.seed,
            batch_size=cfg.batch_size, runner=given.name if given else cfg.runner,
            dataset=cfg.dataset,
            warm_start=None if warm is None else [library.portable(p) for p in warm.sources],
            fix=allowed)
        identity.check_path(store_path, op.workload, ident)
    except InputError as e:
        if path is None:
            raise
        raise cfgmod.in_file(e, path) from None
    return TuneRun(cfg, op, dataset, strategy, store_path, ident, warm=warm, records=folder,
                   records_named=bool(records or cfg.records), plot=plot, runner=given,
                   builder=builder, batch_note=batch_note)


def load(store_path: str | os.PathLike):
    """The records of a store as a pandas DataFrame: one column per knob (split knobs as
    ``name_0 .. name_k``), then status, latencies, TFLOPS, static features."""
    from bocast.records.store import StoreError
    from bocast.records.store import load as load_records

    if not isinstance(store_path, (str, os.PathLike)):
        raise StoreError(f"load: expected the path of a record store, got {store_path!r}")
    return load_records(os.fspath(store_path))
