"""Experiment configuration files (YAML), validated in full before anything is written.

    workload: {op: gemm, shape: [1024, 1024, 1024], dtype: fp16:fp32, layout: NT}
    strategy: {name: bo, acquisition: logei}   # every other key is a hyperparameter
    batch_size: 32
    budget: {trials: 256, seconds: null}
    seed: 0
    runner: replay                              # replay | local (live, on a GPU) | rpc | standin
    rpc: {tracker: "host:9190", key: h100}      # rpc only: see bocast.measure.rpc.runner
    dataset: gemm_1024_1024_1024                 # replay only: a path or a shipped name
    output: runs/bo_logei_gemm1024             # records.db and summary.json go here
    runner_options: {repeats: 10, run_timeout: 30, build_timeout: 180, workers: null,
                     reject_spills: false}      # reject_spills: see bocast.measure.builder
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bocast import options, schema
from bocast.config_files import in_file, read_yaml
from bocast.errors import InputError
from bocast.locations import check_writable
from bocast.measure.parts import (
    make_builder,
    make_runner,
    runner_argument,
    runner_class,
    runner_kind,
)
from bocast.measure.replay import ReplayDataset, ReplayError, check_workload
from bocast.measure.rpc.options import parse_options
from bocast.records.datasets import locate
from bocast.schema import ConfigError, Field, Section
from bocast.space.candidates import Restricted
from bocast.space.operators.operator import WorkloadError, from_workload
from bocast.space.subspace import allowed_values
from bocast.strategies import StrategyError, strategy_class

__all__ = ["ConfigError", "TuneConfig", "in_file", "load", "parse", "read_yaml", "runner_argument",
           "workload_and_dataset"]

WORKLOAD = Field("workload", dict, doc="op, shape and the operator's options")
# the fields a tune configuration and a comparison share, with the same check and help
RUNNER = Field("runner", str, "replay",
               doc="local: this machine's GPU; rpc: GPU servers of a tracker; replay: a recorded "
                   "dataset, no GPU; standin: synthetic timings, tests (tvm and gpu: old names "
                   "of local); or an installed runner's name (entry points bocast.runners), "
                   "package.module:ClassName (docs/extending.md)")
DATASET = Field("dataset", str, None, nullable=True, doc="replay: prefix of a recorded dataset")
RUNNER_OPTIONS = Field("runner_options", dict, None, nullable=True,
                       doc="how kernels are built and timed (section `runner_options`)")
RPC = Field("rpc", dict, None, nullable=True,
            doc="runner rpc: tracker (host:port), key, builds, ... (docs/rpc.md)")
TUNE = Section((
    Field("name", str, "", doc="the run's name (its summary keeps it)"),
    Field("description", str, "", doc="free text, kept in the summary"), WORKLOAD,
    Field("strategy", dict, doc="name: the strategy; every other key is one of its options"),
    schema.BATCH_SIZE, Field("budget", dict, doc="trials, and optionally seconds (below)"),
    schema.SEED.with_default(schema.REQUIRED), RUNNER, DATASET,
    Field("output", str, doc="folder of records.db and summary.json"),
    Field("store", str, None, nullable=True,
          doc="the record store, if not output's records.db (its summary beside it)"),
    Field("records", str, None, nullable=True,
          doc="the records library's folder (bocast.records.library; $BOCAST_RECORDS wins over "
              "it)"),
    Field("fix", dict, None, nullable=True,
          doc="knob -> a value or a list of values: the search stays in that sub-space (as "
              "`bocast measure --fix`; checked against the workload's space)"),
    RUNNER_OPTIONS, RPC,
))


@dataclass(kw_only=True)
class RunSpec:
    """What a tuning run and a comparison both name, defined once (:class:`TuneConfig` and
    :class:`bocast.run.comparison.config.CompareConfig` extend it): the workload, the trials of one
    run and its batch, how kernels are measured (the runner, its options, rpc, a replay's
    dataset), where the records go, and the configuration as read (``raw``: its digest names
    the configuration in every result)."""

    name: str = ""
    workload: dict[str, Any]
    runner: str
    dataset: str | None = None
    trials: int
    batch_size: int
    output: str
    runner_options: dict[str, Any] = field(default_factory=dict)
    rpc: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def runner_class(self):
        """The class of this spec's runner kind (:mod:`bocast.measure.kinds`): what the run
        needs and is, its declarations say (``live``, ``needs_gpu``, ``compiles``, ...)."""
        return runner_class(self.runner)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()[:16]

    def make_runner(self, *, seed: int = 0, dataset=None):
        """The runner this spec names: a live one with its options (``seed``: its input data),
        or replay of ``dataset`` (the spec's, opened: :func:`workload_and_dataset`)."""
        if self.runner_class.answers_records:
            return make_runner(self.runner, dataset=dataset)
        ro = self.runner_options
        return make_runner(self.runner, timeout_s=ro["run_timeout"], repeats=ro["repeats"],
                           seed=seed, rpc=self.rpc, l2=ro["l2"], paired=ro["paired"])

    def make_builder(self, *, workers: int | None = None):
        """The builder this spec's runner options name (it compiles where the runner's class
        says so: the stand-in's never does);
        ``workers``: its processes where the options leave them unset (None: every core)."""
        ro = self.runner_options
        return make_builder(workers=ro["workers"] or workers, timeout_s=ro["build_timeout"],
                            reject_spills=ro["reject_spills"],
                            compile=self.runner_class.compiles)


@dataclass(kw_only=True)
class TuneConfig(RunSpec):
    """One tuning run (``bocast tune``, :func:`bocast.tune`)."""

    strategy: str
    strategy_options: dict[str, Any]
    seconds: float | None
    seed: int
    store: str | None = None
    records: str | None = None
    #: knob -> the values the search may take (``fix``, as given; checked against the
    #: workload's space by :func:`bocast.api.prepare`); None: the whole space
    fix: dict[str, Any] | None = None
    path: str = ""


#: keys of a comparison's strategy entry that are not the strategy's options: ``label``, and
#: ``trials``, ``seeds`` and ``batch_size`` for that entry alone (see bocast.run.comparison)
COMPARISON_KEYS = ("label", "trials", "seeds", "batch_size")


def strategy_entry(raw: Any, where: str) -> tuple[str, dict[str, Any]]:
    """(name, hyperparameters checked against the strategy's options) of a strategy mapping;
    ``where`` prefixes the messages (``strategy.``, ``strategies[0] (bo): ``)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where.rstrip('. :')}: expected a mapping with a name, got {raw!r}")
    if "name" not in raw:
        raise ConfigError(f"{where}name: missing")
    name = Field("name", str).check(raw["name"], where)
    try:
        cls = strategy_class(name)
    except StrategyError as e:
        raise ConfigError(f"{where}name: {e}") from None
    hyper = {k: v for k, v in raw.items() if k != "name" and k not in COMPARISON_KEYS}
    return name, cls.options.check(cold_start(name, hyper, where), where, ConfigError)


#: the values of ``warm_start`` that a strategy without a warm start takes as what it does
#: anyway (``none``: a cold start; ``auto``: the records library's choice, which for it is
#: none), so a script may set one ``warm_start`` over every strategy
COLD = ("none", "auto")


def cold_start(name: str, hyper: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``hyper`` without its ``warm_start`` where strategy ``name`` has no warm start and the
    value is one of :data:`COLD`; sources given to such a strategy are refused (one line)."""
    hyper = dict(hyper)
    if "warm_start" not in hyper or "warm_start" in strategy_class(name).options.names:
        return hyper
    value = hyper.pop("warm_start")
    if isinstance(value, str) and value in COLD:
        return hyper
    raise ConfigError(f"{where}warm_start: strategy {name!r} has no warm start (it always starts "
                      f"cold): 'none' or 'auto' say so, sources cannot be used; got {value!r}")


def parse(raw: Mapping[str, Any], *, path: str = "", runner: str | None = None,
          rpc: Mapping[str, Any] | None = None, dataset: str | None = None) -> TuneConfig:
    """A tune configuration checked whole; ``runner``, ``rpc`` and ``dataset`` override its
    fields (the command line's, or the dataset of a replay runner object)."""
    if isinstance(raw, Mapping):
        runner = runner_kind(runner or raw.get("runner")) or None
    top = TUNE.check({**raw, **({"runner": runner} if runner else {}),
                      **({"dataset": dataset} if dataset else {})}
                     if isinstance(raw, Mapping) else raw)
    budget = options.BUDGET.check(top["budget"], "budget.")
    ropts = options.RUNNER_OPTIONS.check(top["runner_options"], "runner_options.")
    if check_runner(top["runner"]).answers_records and top["dataset"] is None:
        raise ConfigError("dataset: the replay runner needs the prefix of a recorded dataset")
    rpc_opts = rpc_options(top["runner"], top["rpc"], rpc)
    base = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    resolve = resolver(base)
    output = resolve(top["output"])
    check_writable(output, "output", directory=True)
    if top["store"]:
        check_writable(resolve(top["store"]), "store")
    _check_sources(top["strategy"].get("warm_start") if isinstance(top["strategy"], Mapping)
                   else None)
    # the strategy last: its options are its module's, and a strategy's module may import
    # torch (seconds), which the refusal of any other field should not wait for
    name, hyper = strategy_entry(top["strategy"], "strategy.")
    extra = sorted(set(top["strategy"]) & set(COMPARISON_KEYS))
    if extra:
        raise ConfigError(f"strategy: {extra} belong to comparisons, not to one run"
                          + (" (its batch is the top-level batch_size)"
                             if "batch_size" in extra else ""))
    return TuneConfig(workload=dict(top["workload"]), strategy=name,
                      # as given (not the defaults), less a cold strategy's warm_start
                      strategy_options={k: v for k, v in top["strategy"].items()
                                        if k != "name" and k in hyper},
                      batch_size=top["batch_size"], trials=budget["trials"],
                      seconds=budget["seconds"], seed=top["seed"], runner=top["runner"],
                      dataset=dataset_path(top["dataset"], base) if top["dataset"] else None,
                      output=output, runner_options=ropts, rpc=rpc_opts,
                      store=resolve(top["store"]) if top["store"] else None,
                      records=resolve(top["records"]) if top["records"] else None,
                      fix=dict(top["fix"]) if top["fix"] else None,
                      name=top["name"], path=path, raw=dict(raw))


def fixed_values(op, fix: Mapping[str, Any] | None) -> dict[str, list] | None:
    """A configuration's ``fix`` checked against ``op``'s space: knob -> the values the search
    may take (:func:`bocast.space.subspace.allowed_values`, as ``bocast measure --fix`` reads
    them); None where not given. Its SubspaceError names an unknown knob or a value it lacks."""
    return allowed_values(op.space, fix) if fix else None


def restrict(candidates, allowed: dict[str, list] | None):
    """``candidates`` kept inside ``allowed`` (:func:`fixed_values`; None: as they are) for a
    tune or a study: a ConfigError where no feasible configuration lies inside."""
    if not allowed:
        return candidates
    inside = Restricted(candidates, allowed)
    if not inside.sample(1, np.random.default_rng(0), set()):
        raise ConfigError(
            f"fix: no feasible configuration of the workload inside it ({allowed}); "
            "`bocast space OP --shape S --fix KNOB=VALUE ...` counts them")
    return inside


def check_runner(kind: str):
    """The class of a configuration's ``runner`` (:func:`bocast.measure.kinds.runner_class`);
    a ConfigError where it names none."""
    try:
        return runner_class(kind)
    except ConfigError:
        raise
    except InputError as e:
        raise ConfigError(str(e)) from None


def _check_sources(sources: Any) -> None:
    """Warm-start sources that are not there, refused before the strategy's module (torch) is
    imported; the strategy checks the rest of each as it reads it."""
    for p in sources if isinstance(sources, list) else []:
        if not isinstance(p, str):
            continue  # the strategy's own check names it
        if p.endswith(".db") and not os.path.isfile(p):
            raise ConfigError(f"strategy.warm_start: record store {p} not found")
        if not p.endswith(".db") and not os.path.isfile(locate(p) + ".json"):
            raise ConfigError(f"strategy.warm_start: dataset {p} not found ({p}.json, nor a "
                              "shipped dataset of that name)")


def rpc_options(runner: str, section: Mapping[str, Any] | None,
                overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A configuration's ``rpc`` mapping, with the command line's fields over it, checked when
    the runner runs on a fleet (``Runner.fleet``: rpc; tune and compare configurations alike);
    {} for other runners."""
    if not check_runner(runner).fleet:
        # the command line's fields (--tracker, --key) would be ignored without a word; the
        # file's section stays, for the run of an rpc configuration given --runner replay
        if overrides:
            raise ConfigError(f"rpc ({', '.join(sorted(overrides))}): only for runner rpc; "
                              f"this run's runner is {runner}")
        return {}
    try:
        return parse_options({**(section or {}), **(overrides or {})})
    except ValueError as e:
        raise ConfigError(str(e)) from None


def resolver(config_dir: str):
    """Relative paths of a configuration, resolved as :func:`_repo_root` says."""
    root = _repo_root(config_dir)
    return lambda p: p if os.path.isabs(p) else os.path.join(root, p)


def dataset_path(name: str, config_dir: str) -> str:
    """A configuration's ``dataset`` (or ``--dataset``): a path, relative ones as :func:`resolver`
    takes them, or a shipped dataset's name (:func:`bocast.records.datasets.locate`:
    ``exhaustive/gemm_1024_1024_1024_v2``, or ``experiments/data/...``, where the shipped datasets
    were before they became package data)."""
    return locate(name, _repo_root(config_dir))


def load(path: str, *, runner: str | None = None, rpc: Mapping[str, Any] | None = None,
         dataset: str | None = None) -> TuneConfig:
    return parse(read_yaml(path), path=path, runner=runner, rpc=rpc, dataset=dataset)


def workload_and_dataset(workload: Mapping[str, Any], runner: str, dataset: str | None, *,
                         opened=None):
    """The operator of a config's workload and, for the replay runner, its recorded dataset
    (checked to be of that workload; ``opened``: that dataset already opened, a replay runner
    object's); a ConfigError names the field that is wrong."""
    try:
        op = from_workload(workload)
    except WorkloadError as e:
        raise ConfigError(f"workload: {e}") from None
    if not runner_class(runner).answers_records:
        return op, None
    if dataset is None:
        raise ConfigError("dataset: the replay runner needs the prefix of a recorded dataset")
    try:
        if opened is not None:
            check_workload(opened.prefix, opened.meta, op)
            return op, opened
        return op, ReplayDataset(dataset, op)
    except ReplayError as e:
        raise ConfigError(f"dataset: {e}") from None


def _repo_root(start: str) -> str:
    """Relative paths in a config are relative to the repository holding it (the folder with
    pyproject.toml above it), so a committed config runs the same from any working directory;
    for a config outside any repository, relative to the working directory."""
    d = start
    while True:
        if os.path.exists(os.path.join(d, "pyproject.toml")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return os.getcwd()
        d = parent
