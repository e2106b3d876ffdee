"""Experiment configuration files (YAML), validated in full before anything is written.

    workload: {op: gemm, shape: [1024, 1024, 1024], dtype: fp16:fp32, layout: NT}
    strategy: {name: bo, acquisition: logei}   # every other key is a hyperparameter
    batch_size: 32
    budget: {trials: 256, seconds: null}
    seed: 0
    runner: replay                              # replay | tvm (live, on a GPU) | rpc
    rpc: {tracker: "host:9190", key: h100}      # rpc only: see bocast.measure.rpc
    dataset: experiments/data/gemm_1024_1024_1024   # replay only
    output: runs/bo_logei_gemm1024             # records.db and summary.json go here
    runner_options: {repeats: 10, run_timeout: 30, build_timeout: 180, workers: null,
                     reject_spills: false}      # reject_spills: see bocast.measure.builder
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

RUNNERS = ("replay", "tvm", "rpc")
_TOP = {"workload", "strategy", "batch_size", "budget", "seed", "runner", "dataset", "output",
        "runner_options", "name", "description", "rpc"}
#: runner_options of tune and compare configurations
RUNNER_OPTIONS = {"repeats", "run_timeout", "build_timeout", "workers", "reject_spills"}


class ConfigError(ValueError):
    """A configuration file that cannot be run; the message names the field."""


@dataclass
class TuneConfig:
    workload: dict[str, Any]
    strategy: str
    strategy_options: dict[str, Any]
    batch_size: int
    trials: int
    seconds: float | None
    seed: int
    runner: str
    dataset: str | None
    output: str
    runner_options: dict[str, Any] = field(default_factory=dict)
    rpc: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    path: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()[:16]


def _need(d: Mapping[str, Any], key: str, where: str, kind, *, allow_none: bool = False):
    if key not in d:
        raise ConfigError(f"{where}{key}: missing")
    v = d[key]
    if v is None and allow_none:
        return None
    if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise ConfigError(f"{where}{key}: expected an integer, got {v!r}")
    if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise ConfigError(f"{where}{key}: expected a number, got {v!r}")
    if kind in (str, dict, list) and not isinstance(v, kind):
        raise ConfigError(f"{where}{key}: expected a {kind.__name__}, got {v!r}")
    return v


def parse(raw: Mapping[str, Any], *, path: str = "", runner: str | None = None,
          rpc: Mapping[str, Any] | None = None) -> TuneConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError("the configuration must be a mapping of fields")
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise ConfigError(f"unknown field(s) {unknown}; known: {sorted(_TOP)}")
    workload = dict(_need(raw, "workload", "", dict))
    for key in ("op", "shape"):
        if key not in workload:
            raise ConfigError(f"workload.{key}: missing")
    strategy = dict(_need(raw, "strategy", "", dict))
    name = _need(strategy, "name", "strategy.", str)
    budget = _need(raw, "budget", "", dict)
    unknown = sorted(set(budget) - {"trials", "seconds"})
    if unknown:
        raise ConfigError(f"budget: unknown field(s) {unknown}; known: ['seconds', 'trials']")
    trials = _need(budget, "trials", "budget.", int)
    if trials < 1:
        raise ConfigError(f"budget.trials: must be >= 1, got {trials}")
    seconds = budget.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or seconds <= 0):
        raise ConfigError(f"budget.seconds: expected a positive number or null, got {seconds!r}")
    batch = raw.get("batch_size", 32)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigError(f"batch_size: expected a positive integer, got {batch!r}")
    seed = _need(raw, "seed", "", int)
    run = runner or raw.get("runner", "replay")
    if run == "gpu":
        run = "tvm"
    if run not in RUNNERS:
        raise ConfigError(f"runner: {run!r} is not one of {list(RUNNERS)}")
    dataset = raw.get("dataset")
    if run == "replay" and not isinstance(dataset, str):
        raise ConfigError("dataset: the replay runner needs the prefix of a recorded dataset")
    output = _need(raw, "output", "", str)
    ropts = runner_options(raw.get("runner_options"))
    rpc_opts = {}
    if run == "rpc":  # rpc: the YAML's mapping, with the command line's fields over it
        from bocast.measure.rpc import parse_options

        try:
            section = raw.get("rpc") or {}
            rpc_opts = parse_options({**section, **(rpc or {})}
                                     if isinstance(section, Mapping) else section)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    base = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    root = _repo_root(base)
    resolve = (lambda p: p if os.path.isabs(p) else os.path.join(root, p))
    return TuneConfig(workload=workload, strategy=name,
                      strategy_options={k: v for k, v in strategy.items() if k != "name"},
                      batch_size=batch, trials=trials, seconds=seconds, seed=seed, runner=run,
                      dataset=resolve(dataset) if dataset else None, output=resolve(output),
                      runner_options=ropts, rpc=rpc_opts, name=str(raw.get("name", "")),
                      path=path,
                      raw=dict(raw))


def runner_options(raw: Any) -> dict[str, Any]:
    """The runner_options mapping of a configuration, checked (keys, and reject_spills a
    boolean)."""
    ropts = dict(raw or {}) if isinstance(raw, Mapping) or raw is None else None
    if ropts is None:
        raise ConfigError(f"runner_options: expected a mapping, got {raw!r}")
    unknown = sorted(set(ropts) - RUNNER_OPTIONS)
    if unknown:
        raise ConfigError(f"runner_options: unknown field(s) {unknown}; "
                          f"known: {sorted(RUNNER_OPTIONS)}")
    if not isinstance(ropts.get("reject_spills", False), bool):
        raise ConfigError(f"runner_options.reject_spills: expected true or false, got "
                          f"{ropts['reject_spills']!r}")
    return ropts


def read_yaml(path: str) -> Any:
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None


def load(path: str, *, runner: str | None = None, rpc: Mapping[str, Any] | None = None
         ) -> TuneConfig:
    return parse(read_yaml(path), path=path, runner=runner, rpc=rpc)


def workload_and_dataset(workload: Mapping[str, Any], runner: str, dataset: str | None):
    """The operator of a config's workload and, for the replay runner, its recorded dataset
    (checked to be of that workload); a ConfigError names the field that is wrong."""
    from bocast.measure.replay import ReplayDataset, ReplayError
    from bocast.operator import WorkloadError, from_workload

    try:
        op = from_workload(workload)
    except (WorkloadError, TypeError, KeyError) as e:
        raise ConfigError(f"workload: {e}") from None
    if runner != "replay":
        return op, None
    try:
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
