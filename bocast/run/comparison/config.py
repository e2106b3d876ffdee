"""A comparison's configuration: its fields and their checks (:func:`load`, :func:`parse`), the
runs it plans (one strategy entry x seed each, with its record store and identity), and
:func:`validate`, which builds every piece once before anything runs. The file's format is
described in :mod:`bocast.run.comparison`."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bocast import options, schema
from bocast.measure.parts import runner_kind
from bocast.records import library
from bocast.run import identity, warm_sources
from bocast.run.config import (
    COLD,
    DATASET,
    RPC,
    RUNNER,
    RUNNER_OPTIONS,
    WORKLOAD,
    ConfigError,
    RunSpec,
    check_runner,
    dataset_path,
    read_yaml,
    resolver,
    rpc_options,
    strategy_entry,
    workload_and_dataset,
)
from bocast.schema import Field, Section
from bocast.space.candidates import SpaceCandidates
from bocast.space.operators.operator import WorkloadError, from_workload
from bocast.strategies import StrategyError, make_strategy
from bocast.strategies.bo.transfer import AUTO

#: strategy-entry keys that are not hyperparameters; ``trials`` lets one strategy run longer
#: than the budget (random search through a whole table, so its trials-to-95% is not censored),
#: ``seeds`` lets an expensive competitor run fewer seeds (MetaSchedule live), ``batch_size``
#: gives one strategy its own batch (BO with smaller q: more model updates per trial)
_NOT_HYPER = ("name", "label", "trials", "seeds", "batch_size")
METASCHEDULE = "metaschedule"
MAX_SEEDS = 10_000
#: a run's record store in the comparison's ``output`` folder (``bocast report`` reads them)
STORE_NAME = "{label}_seed{seed}.db"
COMPARE = Section((
    Field("name", str, doc="the comparison's name (the title of its results)"),
    Field("description", str, "", doc="free text (only the configuration's hash sees it)"),
    WORKLOAD, RUNNER, DATASET,
    Field("strategies", list, doc="entries {name, label, options...} (below)"),
    Field("seeds", object, doc="a number of seeds (0..n-1) or a list of distinct seeds"),
    Field("budget", dict, doc="trials, the same for every strategy (no seconds: a "
                              "comparison's runs end by trials)"),
    schema.BATCH_SIZE,
    Field("budgets", list, None, nullable=True, doc="trials at which best-so-far is reported"),
    Field("baseline", str, None, nullable=True, doc="label the rank tests compare against"),
    Field("output", str, doc="folder of the runs' record stores"),
    Field("results", str, doc="path prefix of the .md/.csv/.json/.png/.pdf/.svg results"),
    schema.WORKERS.with_default(None), RUNNER_OPTIONS, RPC,
))
ENTRY = Section((
    Field("name", str, doc=f"the strategy (its options are the entry's other keys), or "
                           f"{METASCHEDULE} (live runners only; no options)"),
    schema.LABEL.with_default(None),
    dataclasses.replace(schema.TRIALS, default=None, nullable=True,
                        doc="this entry's trials, at least budget.trials (default: "
                            "budget.trials)"),
    Field("seeds", object, None, doc="this entry's seeds, as the comparison's seeds (default: "
                                     "the comparison's)"),
    dataclasses.replace(schema.BATCH_SIZE, default=None, nullable=True,
                        doc="this entry's batch (default: the comparison's batch_size)"),
))


@dataclass(kw_only=True)
class CompareConfig(RunSpec):
    """A comparison (``bocast compare``): strategies x seeds on one workload; ``trials`` is
    each run's budget (an entry may run longer), ``results`` the prefix of its tables."""

    strategies: list[dict[str, Any]]
    seeds: list[int]
    budgets: list[int]
    baseline: str | None
    results: str
    workers: int | None


def load(path: str) -> CompareConfig:
    """A comparison configuration, every field checked (nothing runs or is written here)."""
    return parse(read_yaml(path), os.path.dirname(os.path.abspath(path)))


def parse(raw: Any, where: str) -> CompareConfig:
    """A comparison from its fields (a configuration built in code), every field checked;
    relative paths are those of the repository holding the folder ``where``
    (:func:`bocast.run.config.resolver`)."""
    if isinstance(raw, Mapping) and "runner" in raw:
        raw = {**raw, "runner": runner_kind(raw["runner"])}
    top = COMPARE.check(raw)
    budget = options.BUDGET.check(top["budget"], "budget.")
    if budget["seconds"] is not None:
        raise ConfigError("budget.seconds: a comparison's runs end by trials, not by time")
    trials = budget["trials"]
    seeds = _seeds(top["seeds"], "seeds")
    if not top["strategies"]:
        raise ConfigError("strategies: expected a non-empty list")
    strategies: list[dict[str, Any]] = []
    labels: list[str] = []
    entries: list[tuple[Any, str, int]] = []  # (entry, where, its index in strategies)
    for i, s in enumerate(top["strategies"]):
        at = f"strategies[{i}]"  # not `where`: the folder, used below
        entry = ENTRY.check(s, f"{at}.", ignore=[k for k in (s if isinstance(s, Mapping) else ())
                                                  if k not in _NOT_HYPER])
        label = entry["label"] or schema.LABEL.check(entry["name"], f"{at}.")
        if entry["name"] == METASCHEDULE:
            if s.get("warm_start") in COLD:  # what it does anyway: dropped, as any cold one's
                s = {k: v for k, v in s.items() if k != "warm_start"}
            hyper = sorted(k for k in s if k not in _NOT_HYPER)
            if hyper:
                raise ConfigError(f"{at} ({label}): {METASCHEDULE} takes no options, "
                                  f"got {hyper}")
        else:  # checked after every other field (see bocast.run.config.parse)
            entries.append((s, f"{at} ({label}): ", len(strategies)))
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
    # a live runner (the local GPU, GPU servers, the CPU stand-in, one's own) times kernels as
    # they are built; one that answers whole records replays a dataset
    replay = not check_runner(runner).live
    if replay and top["dataset"] is None:
        raise ConfigError("dataset: the replay runner needs the prefix of a recorded dataset")
    if replay and any(s["name"] == METASCHEDULE for s in strategies):
        raise ConfigError(f"strategies: {METASCHEDULE} proposes its own schedules, which no "
                          "recorded dataset holds; it needs a live runner (local or rpc)")
    ropts = options.RUNNER_OPTIONS.check(top["runner_options"], "runner_options.")
    baseline = top["baseline"]
    if baseline is not None and baseline not in labels:
        raise ConfigError(f"baseline: {baseline!r} is not one of the strategy labels {labels}")
    rpc_opts = rpc_options(runner, top["rpc"])
    for s, where_s, i in entries:
        options_s = strategy_entry(s, where_s)[1]
        if "warm_start" not in options_s:  # a strategy without one: 'none' or 'auto', dropped
            strategies[i].pop("warm_start", None)
            continue
        if s.get("warm_start") == "auto" and not replay:
            raise ConfigError(f"{where_s}warm_start: 'auto' picks sources from this machine's "
                              "records library, which a live comparison's results must not "
                              "depend on; name the sources (a list), or none")
    resolve = resolver(where)
    dataset = dataset_path(top["dataset"], where) if top["dataset"] else None
    if replay and dataset:  # replay without a dataset was refused above
        _resolve_auto(strategies, top["workload"], dataset)
    return CompareConfig(
        name=top["name"], workload=dict(top["workload"]), runner=runner, dataset=dataset,
        strategies=strategies, seeds=seeds, trials=trials, batch_size=top["batch_size"],
        budgets=sorted(budgets), baseline=baseline, output=resolve(top["output"]),
        results=resolve(top["results"]), workers=top["workers"], runner_options=ropts,
        rpc=rpc_opts, raw=dict(raw))


def _resolve_auto(strategies: list[dict[str, Any]], workload: dict[str, Any],
                  dataset: str) -> None:
    """Replay entries with ``warm_start: auto`` get the sources
    :func:`bocast.run.warm_sources.resolve` picks for replay (shipped datasets of other workloads:
    the repository's, never this machine's library) and the strategy's warm defaults, so a replay
    comparison can show what ``bocast tune``'s default does on a table the library does not hold."""
    auto = [s for s in strategies if s.get("warm_start") == AUTO]
    if not auto:
        return
    try:
        op, gpu = from_workload(workload), _dataset_gpu(dataset)
    except (WorkloadError, OSError, ValueError, AttributeError):
        return  # validate() names what is wrong with the workload or the dataset
    sources = warm_sources.resolve(AUTO, op, runner="replay", gpu=gpu, dataset=dataset).sources
    for s in auto:
        s.update(warm_sources.warm_options(s["name"], s, sources))


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
    op, _ = workload_and_dataset(cfg.workload, "local", None)  # the workload alone
    check_stores(cfg, op)  # before a replay's dataset is read (issue 42: 3 s, pandas)
    op, dataset = workload_and_dataset(cfg.workload, cfg.runner, cfg.dataset)
    cands = dataset.candidates() if dataset else SpaceCandidates(op.space, op.workload)
    for i, s in enumerate(cfg.strategies):
        if s["name"] != METASCHEDULE:
            try:
                make_strategy(s["name"], cands, seed=0, **_hyper(s))
            except StrategyError as e:
                raise ConfigError(f"strategies[{i}] ({s['label']}): {e}") from None
    return op, dataset


def _hyper(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in _NOT_HYPER}


def entry_batch(cfg: CompareConfig, s: Mapping[str, Any]) -> int:
    """The batch of a strategy entry: its own ``batch_size``, else the comparison's."""
    return s.get("batch_size", cfg.batch_size)


def plan(cfg: CompareConfig) -> list[tuple[dict, int, str, int]]:
    """(strategy entry, seed, record store, trials) of every run of the comparison."""
    return [(s, seed, os.path.join(cfg.output, STORE_NAME.format(label=s["label"], seed=seed)),
             s.get("trials", cfg.trials)) for s in cfg.strategies
            for seed in s.get("seeds", cfg.seeds)]


def run_identity(cfg: CompareConfig, s: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The identity (:mod:`bocast.run.identity`) of strategy entry ``s``'s run with ``seed``."""
    options = _hyper(s)
    if isinstance(options.get("warm_start"), list):  # named alike wherever the tree is
        options["warm_start"] = [library.portable(p) for p in options["warm_start"]]
    return identity.run_identity(strategy=s["name"], options=options, seed=seed,
                                 batch_size=entry_batch(cfg, s), runner=cfg.runner,
                                 dataset=cfg.dataset)


def check_stores(cfg: CompareConfig, op) -> None:
    """Every store already under ``output`` opens (a bocast store of this workload that SQLite
    finds sound) and holds a run of this configuration; nothing is written."""
    for s, seed, path, _ in plan(cfg):
        identity.check_path(path, op.workload, run_identity(cfg, s, seed))

def _dataset_gpu(dataset: str | None) -> str | None:
    """The GPU a dataset was measured on, as its JSON names it (OSError, ValueError or
    AttributeError where the JSON cannot say)."""
    with open(f"{dataset}.json") as f:
        return (json.load(f).get("device") or {}).get("gpu")
