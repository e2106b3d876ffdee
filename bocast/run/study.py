"""Ask/tell for a measurement loop of one's own (:func:`create_study`): ask a study for
configurations, measure them your way, tell it the results, or let :meth:`Study.optimize` run the
loop around an objective. A study with a store resumes; every told trial is checked as a store's
record is (:func:`bocast.records.record.check_record`). Everything heavy is imported on first use,
as in :mod:`bocast.api`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bocast.errors import InputError
from bocast.options import Options, plain
from bocast.records.record import Record, best_record, check_record
from bocast.records.status import Status
from bocast.schema import SEED, ConfigError

if TYPE_CHECKING:
    from bocast.records.store import Store
    from bocast.strategies.base import Strategy


def create_study(workload: Mapping[str, Any] | Options, *, strategy: str | Options = "bo",
                 seed: int = 0, store: str | os.PathLike | None = None,
                 fix: Mapping[str, Any] | None = None, **strategy_options: Any) -> Study:
    """An ask/tell study of ``workload`` (``{"op": "gemm", "shape": [...], ...}``, as a tune
    configuration's, or a :class:`bocast.Workload`) over its whole space, or with ``fix``
    (knob -> a value or a list of values, a tune's ``fix``: ``bocast tune --fix``) inside that
    sub-space: what it asks lies there (what it is told need not). ``strategy``: a name,
    or typed options (``bocast.strategies.BOOptions(...)``) that ``strategy_options`` add to.
    With ``store``, every told trial is appended there and a study of the same strategy,
    options and seed on the same store resumes: the strategy is told the stored trials first
    (a store of another run is refused, :mod:`bocast.run.identity`). A study starts cold unless
    ``warm_start`` lists its sources: the caller measures, so its GPU and timing are not
    known, and ``auto`` (the option's default) could not keep other GPUs' records out; a
    study's records are not added to the records library either."""
    from bocast.run import config as cfgmod
    from bocast.run import identity
    from bocast.space.candidates import SpaceCandidates
    from bocast.strategies import make_strategy

    op, _ = cfgmod.workload_and_dataset(plain(workload), "local", None)
    seed = SEED.check(seed, "")
    entry = plain(strategy) if isinstance(strategy, Options) else {"name": strategy}
    name, options = cfgmod.strategy_entry({**entry, **strategy_options}, "strategy.")
    extra = sorted(set(strategy_options) & set(cfgmod.COMPARISON_KEYS))
    if extra:
        raise ConfigError(f"strategy: {extra} are not options of a strategy")
    allowed = cfgmod.fixed_values(op, fix)
    candidates = cfgmod.restrict(SpaceCandidates(op.space, op.workload), allowed)
    strat = make_strategy(name, candidates, seed=seed, **options)
    # ask/tell has no fixed batch: the identity leaves it out; it names the sub-space, so a
    # study resumed with another is refused
    db = None if store is None else identity.open_store(
        os.fspath(store), op.workload, identity.run_identity(
            strategy=name, options=options, seed=seed, batch_size=None, runner="study",
            dataset=None, fix=allowed))
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
        :class:`bocast.records.status.Status`). ``fields``: other columns of a record
        (``latency_ms``, ``build_s``, ``error``, ``features={...}``, ...)."""
        self._open("tell")
        record = self._record(config, tflops, status, **fields)
        self.strategy.tell([record])
        return record

    def _record(self, config: Mapping[str, Any], tflops: float | None = None,
                status: str | Status = "ok", **fields: Any) -> Record:
        """:meth:`tell` but the strategy's: checked, stored and kept."""
        from bocast.space.space import Space

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
        from bocast.run.assembly import assemble

        self._open("optimize")
        assemble(self.strategy, measurer=_Objective(self, objective), trials=n_trials,
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
        return best_record(self.records)

    @property
    def trials(self):
        """Every told trial (resumed ones first) as a DataFrame, the columns of
        :func:`bocast.load`."""
        from bocast.records.store import frame

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
    """A study's ``objective`` as the measurer of the one loop (:class:`bocast.run.tuner.Tuner`)."""

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
