"""The ask/tell interface every search strategy implements, and the strategy registry.

A strategy proposes configurations (``ask``) and learns from finished records (``tell``); it
never builds, runs or stores anything itself. It draws configurations only from its
:class:`~bocast.space.candidates.Candidates`, and must not propose a configuration it has already
been told about or already proposed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from bocast.errors import InputError
from bocast.options import Options
from bocast.records.public import Record
from bocast.schema import Section
from bocast.space.candidates import Candidates
from bocast.space.features import FeatureError, Features
from bocast.space.operators.operator import WorkloadError, from_workload
from bocast.space.space import Config, Space

_STRATEGIES: dict[str, type[Strategy]] = {}


class StrategyError(InputError):
    """A strategy name or hyperparameter that cannot be used."""


class Strategy(ABC):
    name: ClassVar[str]
    #: the hyperparameters a configuration may set: type, range, default; a registered
    #: strategy's are ``Section.of`` its typed options (a :class:`StrategyOptions`)
    options: ClassVar[Section] = Section((), noun="option")
    #: options that ``warm_start: auto`` sets where it found sources and the run left them unset
    #: (:func:`bocast.run.warm_sources.warm_options`): the defaults of a warm run, chosen by the
    #: leave-one-table-out replay (experiments/ablation/loto.yaml); a cold run keeps ``options``'
    warm_defaults: ClassVar[dict[str, Any]] = {}
    #: options that, given, leave ``warm_defaults`` out (they say the same thing another way)
    warm_defaults_yield_to: ClassVar[tuple[str, ...]] = ()
    #: whether its next batch depends on the results of the last one (every search strategy);
    #: a strategy that does not may be asked ahead (:func:`bocast.run.tuner.run_interleaved`)
    adaptive: ClassVar[bool] = True

    def __init__(self, candidates: Candidates, *, seed: int = 0, **hyper: Any):
        self.hyper = self.options.check(hyper, f"strategy {self.name!r}: ", StrategyError)
        self.candidates = candidates
        self.space: Space = candidates.space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.history: list[Record] = []
        self.proposed: set[str] = set()
        self.pending: list[Config] = []  # the running ask's pending configurations

    @abstractmethod
    def _ask(self, n: int) -> list[Config]:
        """Up to ``n`` new configurations (the base class filters repeats)."""

    def ask(self, n: int, pending: Sequence[Config] = ()) -> list[Config]:
        """Up to ``n`` new configurations. ``pending``: configurations proposed before and still
        being measured (their records not told yet), which a model-based strategy conditions
        on as BoTorch's ``X_pending`` (BO: a Kriging believer); the others only never propose
        them again, as every proposed configuration."""
        # randomness depends only on the seed and the history, so a resumed run that replays
        # its records through ``tell`` proposes exactly what the uninterrupted run would have
        self.rng = np.random.default_rng([self.seed, len(self.history), len(self.proposed)])
        self.pending = list(pending)
        out = []
        for c in self._ask(n):
            key = Space.key(c)
            if key not in self.proposed:
                self.proposed.add(key)
                out.append(c)
        return out[:n]

    def tell(self, records: Sequence[Record]) -> None:
        for r in records:
            self.proposed.add(r.key)
            # a record made before a knob with a default existed (space v3's cluster,
            # raster_major) names its configuration without it: the same configuration as
            # the one completed with the default, which must not be proposed again
            self.proposed.add(Space.key(self.space.complete(r.config)))
        self.history.extend(records)
        self._tell(records)

    def _tell(self, records: Sequence[Record]) -> None:  # noqa: B027 - optional hook
        """Hook for strategies that update state per batch."""

    # helpers shared by strategies
    def measured_ok(self) -> list[Record]:
        return [r for r in self.history if r.succeeded]

    def config_of(self, record: Record) -> Config:
        return self.space.from_json(record.config)

    def model_inputs(self):
        """The model's input encoding chosen by the ``features`` option (bocast.space.features)."""
        try:
            return Features(self.candidates, self.hyper["features"])
        except FeatureError as e:  # derived features on a space that derives too little
            raise StrategyError(f"strategy {self.name!r}: features: {e}") from None

    def fresh_samples(self, n: int) -> list[Config]:
        return self.fresh_samples_keyed(n)[0]

    def fresh_samples_keyed(self, n: int) -> tuple[list[Config], list[str]]:
        """:meth:`fresh_samples` and their keys."""
        return self.candidates.sample_keyed(n, self.rng, self.proposed)

    def warm_start_target(self, paths) -> Any:
        """The target operator of a ``warm_start`` option's ``paths`` (checked here, for every
        strategy that has the option; :mod:`bocast.strategies.bo.transfer`)."""
        where = f"strategy {self.name!r}: "
        if not all(isinstance(p, str) and p for p in paths):
            raise StrategyError(f"{where}warm_start: expected a list of dataset prefixes or "
                                f"record store paths, got {paths!r}")
        if self.candidates.workload is None:
            raise StrategyError(f"{where}warm_start needs the target's workload (candidates "
                                "made without one)")
        try:
            return from_workload(self.candidates.workload)
        except WorkloadError as e:
            raise StrategyError(f"{where}{e}") from None


class StrategyOptions(Options):
    """The base of each strategy's typed options (``BOOptions``, ...): a frozen keyword-only
    dataclass beside its strategy, whose :meth:`bocast.schema.Section.of` is the strategy's
    :attr:`Strategy.options`; ``strategy`` is the strategy's name (:func:`register` checks)."""

    where = "strategy."
    noun = "option"


def options_class_name(name: str) -> str:
    return (name.upper() if len(name) <= 3 else name.capitalize()) + "Options"


def register(cls: type[Strategy]) -> type[Strategy]:
    typed = cls.options.typed
    if not (typed and issubclass(typed, StrategyOptions) and typed.strategy == cls.name
            and typed.__name__ == options_class_name(cls.name)):
        raise TypeError(f"{cls.__name__}.options: expected Section.of("
                        f"{options_class_name(cls.name)}), whose strategy is {cls.name!r}")
    _STRATEGIES[cls.name] = cls
    return cls


def registered() -> dict[str, type[Strategy]]:
    """The strategies registered so far, by name (the package's :func:`bocast.strategies.
    strategies` imports the shipped ones first)."""
    return dict(sorted(_STRATEGIES.items()))
