"""A run's identity: what makes its trials what they are. A record store keeps it (meta ``run``)
so that a rerun of ``bocast tune`` or ``bocast compare`` resumes only the run it started, never
appends one configuration's trials to another's.

The identity holds the strategy, the options as the configuration gave them, the seed, the
batch size, the runner and the dataset, and (since 2026-11-24) ``resolved``: every option with
the value it took, defaults included, so that a default changed between two sessions stops a
resumed run instead of changing its strategy half-way. A store written before ``resolved``
existed is compared without it and then records it (the defaults of the session that resumes
it: what it ran with before is not known). An option added to a strategy after a run began
does not stop it while left at its default (new options are added switched off). A strategy's
model is one of its options, so it is part of the identity too (the CGA's ``cost_model``:
xgboost or sklearn-gbr, which propose differently). The budget is not part of it: a larger
budget only adds trials.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from bocast.measure.parts import runner_kind
from bocast.records.library import same_source
from bocast.records.store import Store
from bocast.schema import ConfigError
from bocast.strategies import StrategyError, strategy_class
from bocast.strategies.bo.transfer import source_paths

RESOLVED = "resolved"


def run_identity(*, strategy: str, options: Mapping[str, Any], seed: int,
                 batch_size: int | None, runner: str, dataset: str | None,
                 warm_start: Sequence[str] | None = None,
                 fix: Mapping[str, Sequence[Any]] | None = None) -> dict[str, Any]:
    """The identity of one run (JSON-plain, keys sorted). ``options``: as the configuration gave
    them; a strategy that is not registered (MetaSchedule) resolves to those. ``batch_size`` None:
    an ask/tell study, whose caller picks each batch. ``warm_start``: the sources an ``auto`` warm
    start resolved to (:func:`bocast.run.warm_sources.resolve`); resolved, the option is always the
    list of sources the run uses ([]: a cold start), so the identity names them and a cold run of
    before ``auto`` existed (``[]``) is the same run as one of ``none``. ``fix``: the sub-space
    the search stays in (knob -> values, checked), named only when given, so every run of the
    whole space keeps the identity it had."""
    try:
        resolved = strategy_class(strategy).options.check(dict(options), "", StrategyError)
    except StrategyError:
        resolved = dict(options)
    if "warm_start" in resolved:
        resolved["warm_start"] = list(warm_start) if warm_start is not None else \
            source_paths(resolved["warm_start"])
    ident = {"strategy": strategy, "options": dict(options), RESOLVED: resolved, "seed": seed,
             "batch_size": batch_size, "runner": runner,
             "dataset": os.path.basename(dataset) if dataset else None,
             **({"fix": {k: list(v) for k, v in fix.items()}} if fix else {})}
    return json.loads(json.dumps(ident, sort_keys=True))


def mismatch(held: Mapping[str, Any] | None, ident: Mapping[str, Any]) -> str | None:
    """Why a store holding ``held`` cannot resume as ``ident``; None when it can. Options are
    compared as resolved (an option set to its default equals one left out) where the store
    has them, else as given."""
    if held is None:  # a new store, or one written before runs carried their identity
        return None
    # the local runner was called tvm before 2026-11-26: the same run under its new name
    held = {**_sources_as_named_now(held), "runner": runner_kind(held.get("runner"))}
    ident = _sources_as_named_now(ident)
    skip = "options" if RESOLVED in held else RESOLVED
    keys = sorted(k for k in set(held) | set(ident) if k != skip)
    parts = [f"{k}: {held.get(k)!r} there, {ident.get(k)!r} here" for k in keys
             if k != RESOLVED and held.get(k) != ident.get(k)]
    defaults = []
    if skip == "options" and held.get("strategy") != ident.get("strategy"):
        # another strategy's options are not comparable one by one
        if held.get("options") != ident.get("options"):
            parts.append(f"options: {held.get('options')!r} there, {ident.get('options')!r} here")
    elif skip == "options":
        was, now = held[RESOLVED], ident.get(RESOLVED, {})
        given = ident.get("options", {})
        for k in sorted(set(was) | set(now)):
            if k not in was and k not in given:
                continue  # an option added since, left at its default: new options are off
            if was.get(k) != now.get(k):
                parts.append(f"option {k}: {was.get(k)!r} there, {now.get(k)!r} here")
                if k not in held.get("options", {}) and k not in ident.get("options", {}):
                    defaults.append(k)
    if not parts:
        return None
    why = (f"; {', '.join(defaults)} set in neither configuration: its default changed since "
           "the run began, so set it as it was to resume the run") if defaults else ""
    return (f"holds a run of another configuration ({'; '.join(parts)}{why}); move it away, "
            "or set another output, to keep both")


def _sources_as_named_now(ident: Mapping[str, Any]) -> dict[str, Any]:
    """``ident`` with its warm-start sources (given and resolved) named as
    :func:`bocast.records.library.portable` names them now: a shipped dataset was named
    ``experiments/data/...`` before the datasets were package data, and is the same source."""
    out = dict(ident)
    for part in ("options", RESOLVED):
        opts = out.get(part)
        if isinstance(opts, Mapping) and isinstance(opts.get("warm_start"), list):
            out[part] = {**opts, "warm_start": [same_source(p) if isinstance(p, str) else p
                                                for p in opts["warm_start"]]}
    return out


def check(store: Any, ident: dict[str, Any], path: str, *, write: bool = True) -> None:
    """Raise :class:`ConfigError` naming ``path`` if its store holds another run; else (with
    ``write``) record ``ident`` in it (a new store, or an older identity without ``resolved``)."""
    held = store.get_meta("run")
    problem = mismatch(held, ident)
    if problem:
        raise ConfigError(f"{path} {problem}")
    if write and held != ident:
        store.set_meta("run", ident)


def check_known(path: str, *, strategy: str, seed: int, runner: str,
                dataset: str | None) -> None:
    """The store at ``path``, if there is one, opened (a damaged or foreign file refused) and its
    run's identity compared on what a run is known by before its dataset is read or its
    strategy made (``strategy``, ``seed``, ``runner``, ``dataset`` as :func:`run_identity` takes
    them), so that a store of another run is refused in a fraction of a second (issue 42: 3 s,
    pandas); :func:`check_path` checks the whole identity later. Only reads."""
    if not (os.path.isfile(path) and os.path.getsize(path) > 0):
        return
    with Store.open(path) as store:
        held = store.get_meta("run")
    if not isinstance(held, Mapping):
        return
    known = run_identity(strategy=strategy, options={}, seed=seed, batch_size=None,
                         runner=runner, dataset=dataset)
    keys = [k for k in ("strategy", "seed", "runner", "dataset") if k in held]
    problem = mismatch({k: held[k] for k in keys}, {k: known[k] for k in keys})
    if problem:
        raise ConfigError(f"{path} {problem}")


def check_path(path: str, workload: Mapping[str, Any], ident: dict[str, Any]) -> None:
    """The checks of :func:`open_store` on the store at ``path`` if there is one, only
    reading: nothing is written to it or created beside it (a run checked before it can
    start)."""
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with Store.open(path, workload) as store:
            check(store, ident, path, write=False)


def open_store(path: str, workload: Mapping[str, Any], ident: dict[str, Any]) -> Store:
    """The record store at ``path`` (created if missing), checked with :func:`check`; closed
    again, and the error raised, if it holds another run."""
    store = Store(path, workload)
    try:
        check(store, ident, path)
    except ConfigError:
        store.close()
        raise
    return store
