"""Genetic-algorithm baselines: Heron's constrained GA (``cga``) and a plain GA (``ga``).

``cga`` follows Heron (ASPLOS'23; seed 003 and IPRC-ICT/Heron ``tuner/``): each round the
population is the previous one, the best measured so far and fresh constrained random samples,
ranked by a gradient-boosted-tree cost model; a few generations of roulette selection and
constrained crossover/mutation follow, whose children are always feasible: crossover restricts
each *key* knob (the most important features of the cost model) to the two parents' values and
re-solves the known constraints by sampling; mutation drops one of those restrictions. The round
measures the top predicted 60% of its batch and picks the rest by roulette. Heron's defaults:
population 200, 5 generations, 32 selected parents, 32 best-in-history, key ratio 0.14 of its 37
GEMM parameters (about 5 keys); our GEMM space has 15 knobs (splits are single knobs), so the
default key ratio 0.3 gives the same number of keys.

``ga`` is a textbook GA on measured fitness, no model: roulette selection among the measured
configurations (the best ``elite`` always in the pool), uniform crossover, per-knob mutation;
a child that breaks a known constraint is replaced by the closest measurable configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from bocast.records.record import speed
from bocast.records.status import Status
from bocast.schema import Section, opt
from bocast.space.features import FEATURES_OPTION, FeatureKind
from bocast.space.space import Config, Space
from bocast.strategies.base import Strategy, StrategyError, StrategyOptions, register
from bocast.strategies.bo.transfer import (
    WARM_START_OPTION,
    WarmStartError,
    best_rows,
    ranked_configs,
    source_paths,
)

#: the CGA's cost models: Heron's (XGBoost), or scikit-learn's gradient boosting
CostModel = Literal["xgboost", "sklearn-gbr"]
COST_MODELS: tuple[str, ...] = get_args(CostModel)


@dataclass(frozen=True, kw_only=True)
class CGAOptions(StrategyOptions):
    """Options of strategy ``cga`` (:class:`ConstrainedGA`)."""

    strategy = "cga"
    pop_size: int = opt(200, min=1, max=100_000, doc="population per round")
    generations: int = opt(5, min=0, max=1000, doc="generations per round")
    select: int = opt(32, min=1, max=100_000, doc="parents selected per generation")
    history_topk: int = opt(32, min=0, max=100_000,
                            doc="best measured configurations joining the population")
    key_ratio: float = opt(0.3, above=0, max=1, doc="share of knobs that are keys")
    epsilon: float = opt(0.6, min=0, max=1,
                         doc="share of the batch taken by predicted rank (the rest by roulette)")
    # the cost model's inputs, BO's option; with derived, a knob's importance for choosing
    # keys includes its share of the derived columns computed from it
    features: FeatureKind = FEATURES_OPTION.opt()
    # the same records BO can start from; here they seed the first round (no model)
    warm_start: str | list[str] = WARM_START_OPTION.opt()
    cost_model: CostModel = opt("xgboost", doc="the tree model ranking candidates: Heron's "
                                               "XGBoost, or scikit-learn's gradient boosting")


@dataclass(frozen=True, kw_only=True)
class GAOptions(StrategyOptions):
    """Options of strategy ``ga`` (:class:`PlainGA`)."""

    strategy = "ga"
    elite: int = opt(8, min=1, max=100_000, doc="best configurations always in the pool")
    mutation: float = opt(0.1, min=0, max=1, doc="per-knob mutation probability")


class TreeCostModel:
    """Gradient-boosted trees on the encoded configuration, predicting normalised throughput
    (failures as 0): ``xgboost`` as Heron's XGBoost 'reg' model, or ``sklearn-gbr``,
    scikit-learn's GradientBoostingRegressor. Never one in place of the other: they propose
    differently, so the choice is an option of the run (its identity), and a missing xgboost
    is an error that names the other choice instead of a silent change of model."""

    def __init__(self, seed: int, backend: str = "xgboost"):
        self.seed, self.backend = seed, backend
        self.model: Any = None  # xgboost's or scikit-learn's regressor (both untyped)
        if backend == "xgboost":
            try:
                import xgboost  # noqa: F401
            except ImportError:
                raise StrategyError("cga: cost_model 'xgboost' needs the xgboost package "
                                    "(pip install xgboost-cpu), or set cost_model: "
                                    "sklearn-gbr (a different model)") from None

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.backend == "xgboost":
            import xgboost

            self.model = xgboost.XGBRegressor(n_estimators=200, max_depth=6, learning_rate=0.1,
                                              subsample=0.9, random_state=self.seed, n_jobs=1)
        else:
            # scikit-learn ships no type information
            from sklearn.ensemble import GradientBoostingRegressor  # type: ignore[import-untyped]

            self.model = GradientBoostingRegressor(n_estimators=150, max_depth=5,
                                                   learning_rate=0.1, subsample=0.9,
                                                   random_state=self.seed)
        self.model.fit(x, y)

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.model is None:
            return np.zeros(len(x))
        return np.asarray(self.model.predict(x), dtype=float)

    def importances(self, n_features: int) -> np.ndarray:
        if self.model is None:
            return np.zeros(n_features)
        return np.asarray(self.model.feature_importances_, dtype=float)


def _roulette(values: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    if len(values) <= k:
        return np.arange(len(values))
    w = values - values.min() + 1e-16
    return rng.choice(len(values), size=k, replace=False, p=w / w.sum())


@register
class ConstrainedGA(Strategy):
    """Heron's constrained GA (``cga``): a tree cost model ranks the population, and crossover
    and mutation re-solve the known constraints, so that every child is feasible."""

    name = "cga"
    options = Section.of(CGAOptions)

    def __init__(self, candidates, *, seed=0, **hyper):
        super().__init__(candidates, seed=seed, **hyper)
        self.features = self.model_inputs()
        self.model = TreeCostModel(seed, self.hyper["cost_model"])
        self.population: list[Config] = []
        paths = source_paths(self.hyper["warm_start"])
        self.ranked: list[Config] = self._ranked(paths) if paths else []

    def _ranked(self, paths) -> list[Config]:
        target = self.warm_start_target(paths)
        try:
            return ranked_configs(paths, target)
        except WarmStartError as e:
            raise StrategyError(f"strategy {self.name!r}: {e}") from None

    def _predict(self, configs: list[Config]) -> np.ndarray:
        return self.model.predict(self.features(configs)) if configs else np.zeros(0)

    def _train(self) -> None:
        attempted = [r for r in self.history if r.status is not Status.INVALID]
        if not any(r.ok for r in attempted):
            return
        speed_of = speed(attempted)
        best = max(speed_of(r) for r in attempted if r.ok)
        x = self.features([self.config_of(r) for r in attempted])
        y = np.array([speed_of(r) / best if r.ok else 0.0 for r in attempted])
        self.model.fit(x, y)

    def _keys(self) -> list[str]:
        imp = self.features.knob_importance(
            self.model.importances(self.features.bounds().shape[1]))
        n = max(1, int(round(self.hyper["key_ratio"] * len(imp))))
        return [name for name, _ in sorted(imp.items(), key=lambda t: -t[1])[:n]]

    def _children(self, parents: list[Config], n: int) -> list[Config]:
        keys = self._keys()
        out: list[Config] = []
        for _ in range(n * 2):
            if len(out) >= n:
                break
            a, b = (parents[i] for i in self.rng.integers(0, len(parents), 2))
            drop = keys[int(self.rng.integers(len(keys)))]  # mutation: one restriction dropped
            allowed = {k: [a[k], b[k]] for k in keys if k != drop}
            out += self.candidates.sample_restricted(1, self.rng, allowed, self.proposed)
        return out

    def _ask(self, n):
        self._train()
        if self.model.model is None:  # nothing measured yet: Heron's first round is random
            seeded = best_rows(self.ranked, self.candidates, self.proposed, n)
            return seeded + self.fresh_samples(n - len(seeded))
        pop_size = self.hyper["pop_size"]
        speed_of = speed(self.history)
        best = sorted((r for r in self.history if r.succeeded), key=lambda r: -speed_of(r))
        topk = [self.config_of(r) for r in best[: self.hyper["history_topk"]]]
        pool = self.population + topk + self.fresh_samples(pop_size)
        pool = _unique(pool)
        pred = self._predict(pool)
        population = [pool[i] for i in np.argsort(-pred)[:pop_size]]
        everything = list(population)
        for _ in range(self.hyper["generations"]):
            pred = self._predict(population)
            parents = [population[i] for i in _roulette(pred, self.hyper["select"], self.rng)]
            children = self._children(parents, pop_size)
            if not children:
                break
            everything += children
            everything = _unique(everything)
            allp = self._predict(everything)
            elite = [everything[i] for i in np.argsort(-allp)[:20]]
            population = _unique(children + elite)
        self.population = population
        fresh = [c for c in everything if Space.key(c) not in self.proposed]
        if not fresh:
            return self.fresh_samples(n)
        pred = self._predict(fresh)
        order = list(np.argsort(-pred))
        k = int(n * self.hyper["epsilon"])
        picked = order[:k]
        rest = order[k:]
        if rest and n > k:
            picked += [rest[i] for i in _roulette(pred[rest], n - k, self.rng)]
        out = [fresh[i] for i in picked]
        if len(out) < n:
            out += self.fresh_samples(n - len(out))
        return out


@register
class PlainGA(Strategy):
    """A textbook GA (``ga``) on measured fitness, no model; a child that breaks a known
    constraint is replaced by the closest measurable configuration."""

    name = "ga"
    options = Section.of(GAOptions)

    def _ask(self, n):
        ok = [r for r in self.history if r.succeeded]
        if len(ok) < 2:
            return self.fresh_samples(n)
        speed_of = speed(ok)
        ok.sort(key=lambda r: -speed_of(r))
        fitness = np.array([speed_of(r) for r in ok])
        parents = [self.config_of(r) for r in ok]
        out: list[Config] = []
        seen = set(self.proposed)
        for _ in range(n * 10):
            if len(out) >= n:
                break
            i, j = _roulette(fitness, 2, self.rng) if len(ok) > 2 else (0, 1)
            if self.rng.random() < 0.5:  # elitism: half the matings involve an elite parent
                i = int(self.rng.integers(min(self.hyper["elite"], len(ok))))
            a, b = parents[i], parents[j]
            child = {k.name: (a if self.rng.random() < 0.5 else b)[k.name]
                     for k in self.space.knobs}
            for k in self.space.knobs:
                if child[k.name] is not None and self.rng.random() < self.hyper["mutation"]:
                    other = self.candidates.sample_restricted(
                        1, self.rng, {n_: [v] for n_, v in child.items() if n_ != k.name}, set())
                    if other:
                        child = other[0]
            kept = self.candidates.project(_repair(self.space, child))
            if kept is not None and Space.key(kept) not in seen:
                seen.add(Space.key(kept))
                out.append(kept)
        if len(out) < n:
            out += self.fresh_samples(n - len(out))
        return out


def _repair(space: Space, child: Config) -> Config:
    """Make a crossed-over child structurally valid (inactive knobs None, active knobs set)."""
    cond = {n: child[n] for n in space.conditioning}
    out = dict(child)
    for k in space.knobs:
        active = k.is_active(cond)
        if not active:
            out[k.name] = None
        elif out[k.name] is None:
            out[k.name] = k.domain(cond)[0]
    return out


def _unique(configs: list[Config]) -> list[Config]:
    seen, out = set(), []
    for c in configs:
        key = Space.key(c)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
