"""Where strategies draw configurations from.

A strategy never samples a space directly: it asks a :class:`Candidates` object, which is either
the live feasible set of a space, or the finite table of configurations of a recorded dataset
(replay: a tabular benchmark where only recorded configurations can be measured). Both offer the
same operations, so every strategy runs unchanged on either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from bocast.space import sampling, structural
from bocast.space.knobs import Config
from bocast.space.space import Space


class Candidates(ABC):
    def __init__(self, space: Space, workload: dict | None = None):
        self.space = space
        #: the operator's workload, where the caller knows it (BO's warm start checks its
        #: sources against it)
        self.workload = workload

    @abstractmethod
    def sample(self, n: int, rng: np.random.Generator, exclude: set[str]) -> list[Config]:
        """Up to ``n`` distinct feasible configurations, uniform, none of whose keys is in
        ``exclude``."""

    def sample_keyed(self, n: int, rng: np.random.Generator, exclude: set[str]
                     ) -> tuple[list[Config], list[str]]:
        """:meth:`sample` and the configurations' keys (:meth:`Space.key`), which a sampler
        that has them already need not compute again (BO's pool: issue 41)."""
        configs = self.sample(n, rng, exclude)
        return configs, [Space.key(c) for c in configs]

    @abstractmethod
    def sample_restricted(self, n: int, rng: np.random.Generator, allowed: dict,
                          exclude: set[str]) -> list[Config]:
        """Like :meth:`sample`, among configurations whose knobs in ``allowed`` take one of the
        listed values (Heron's constrained crossover re-solves the constraints this way)."""

    @abstractmethod
    def neighbours(self, config: Config) -> list[Config]:
        """Feasible configurations one knob away."""

    @abstractmethod
    def contains(self, config: Config) -> bool:
        """Whether ``config`` can be measured here."""

    def project(self, config: Config) -> Config | None:
        """A measurable configuration equal or closest to ``config`` (None if there is none)."""
        return config if self.contains(config) else None

    def encode(self, configs: Sequence[Config]) -> np.ndarray:
        return self.space.encode(configs)

    def bounds(self) -> np.ndarray:
        """(2, d) bounds of the encoded candidates, for input scaling."""
        return self.space.encoding_bounds()

    @abstractmethod
    def reference_configs(self) -> list[Config]:
        """Configurations that stand for the candidates (fixed for the whole run), for bounds of
        features the encoding does not bound (:mod:`bocast.space.features`)."""


class SpaceCandidates(Candidates):
    """Every feasible configuration of the space (live tuning)."""

    _reference: list[Config] | None = None

    def reference_configs(self):
        if self._reference is None:  # a fixed seed: the same bounds in every run
            self._reference = self.space.sample(2048, np.random.default_rng(0))
        return self._reference

    def sample(self, n, rng, exclude):
        return self.sample_keyed(n, rng, exclude)[0]

    def sample_keyed(self, n, rng, exclude):
        out: list[Config] = []
        keys: list[str] = []
        seen = set(exclude)
        for _ in range(20):
            # twice the rows wanted are drawn (all of them: the random stream moves on as
            # the space's sample of 2n moves it), and rows are built and keyed a chunk at a
            # time until n are new: the rest, half of BO's pool, never are (issue 41)
            for cols in sampling.feasible_draws(self.space, max(n - len(out), 1) * 2, rng):
                m = len(cols[self.space.knobs[0].name])
                for at in range(0, m, 512):
                    rows = structural.rows(self.space.knobs, cols, range(at, min(at + 512, m)))
                    for c, key in zip(rows, sampling.keys(self.space, rows)):
                        if key not in seen:
                            seen.add(key)
                            out.append(c)
                            keys.append(key)
                            if len(out) == n:
                                return out, keys
        return out, keys

    def sample_restricted(self, n, rng, allowed, exclude):
        out: list[Config] = []
        seen = set(exclude)
        for c in self.space.sample_restricted(2 * n, rng, allowed):
            key = Space.key(c)  # i.i.d. draws may repeat: one of each, by key
            if key not in seen:
                seen.add(key)
                out.append(c)
        return out[:n]

    def neighbours(self, config):
        return self.space.neighbours(config)

    def contains(self, config):
        return not self.space.validate(config)


class TableCandidates(Candidates):
    """The configurations of a recorded dataset, and nothing else (replay)."""

    def __init__(self, space: Space, configs: Sequence[Config], workload: dict | None = None):
        super().__init__(space, workload)
        self.configs = list(configs)
        self.keys = [Space.key(c) for c in self.configs]
        self.index = {k: i for i, k in enumerate(self.keys)}
        self._x = space.encode(self.configs)
        # per knob, a comparable text form of every row's value (for restricted sampling)
        self._values = {k.name: np.array([_value_key(c[k.name]) for c in self.configs])
                        for k in space.knobs}
        self._by_hole: dict[tuple[str, str], list[int]] = {}
        names = [k.name for k in space.knobs]
        self._holes = []
        for i, c in enumerate(self.configs):
            holes = []
            for name in names:  # the row with one knob blanked out
                rest = {k: v for k, v in c.items() if k != name}
                hole = (name, Space.key(rest))
                self._by_hole.setdefault(hole, []).append(i)
                holes.append(hole)
            self._holes.append(holes)

    def sample(self, n, rng, exclude):
        return self.sample_keyed(n, rng, exclude)[0]

    def sample_keyed(self, n, rng, exclude):
        free = [i for i, k in enumerate(self.keys) if k not in exclude]
        pick = rng.permutation(len(free))[:n]
        return [self.configs[free[i]] for i in pick], [self.keys[free[i]] for i in pick]

    def sample_restricted(self, n, rng, allowed, exclude):
        mask = np.array([k not in exclude for k in self.keys], dtype=bool)
        for name, vals in allowed.items():
            ok = [_value_key(v) for v in vals]
            mask &= np.isin(self._values[name], ok) | (self._values[name] == _value_key(None))
        free = np.flatnonzero(mask)
        pick = rng.permutation(len(free))[:n]
        return [self.configs[free[i]] for i in pick]

    def neighbours(self, config):
        i = self.index.get(Space.key(config))
        if i is None:
            return []
        out = {j for hole in self._holes[i] for j in self._by_hole[hole] if j != i}
        return [self.configs[j] for j in sorted(out)]

    def contains(self, config):
        return Space.key(config) in self.index

    def reference_configs(self):
        return self.configs

    def bounds(self):
        return np.stack([self._x.min(0), self._x.max(0)])

    def project(self, config):
        if self.contains(config):
            return config
        x = self.space.encode([config])[0]
        return self.configs[int(np.argmin(((self._x - x) ** 2).sum(1)))]


def _value_key(v) -> str:
    return Space.key({"v": v})


class Restricted(Candidates):
    """Another :class:`Candidates` with some knobs restricted to listed values (a tune's
    ``fix``: the same sub-space ``bocast measure --fix`` samples): every draw, neighbour and
    projection stays inside it; a knob inactive in a configuration ignores its restriction."""

    def __init__(self, inner: Candidates, allowed: dict):
        super().__init__(inner.space, inner.workload)
        self.inner, self.allowed = inner, dict(allowed)
        self._keys = {n: {_value_key(v) for v in vals} for n, vals in self.allowed.items()}

    def _inside(self, config: Config) -> bool:
        return all(config.get(n) is None or _value_key(config[n]) in ok
                   for n, ok in self._keys.items())

    def sample(self, n, rng, exclude):
        return self.inner.sample_restricted(n, rng, self.allowed, exclude)

    def sample_restricted(self, n, rng, allowed, exclude):
        both = dict(self.allowed)
        for name, vals in allowed.items():  # both restrictions: the values in each
            keep = self._keys.get(name)
            both[name] = [v for v in vals if keep is None or _value_key(v) in keep]
        return self.inner.sample_restricted(n, rng, both, exclude)

    def neighbours(self, config):
        return [c for c in self.inner.neighbours(config) if self._inside(c)]

    def contains(self, config):
        return self._inside(config) and self.inner.contains(config)

    def project(self, config):
        got = self.inner.project(config)
        return got if got is not None and self._inside(got) else None

    def encode(self, configs):
        return self.inner.encode(configs)

    def bounds(self):
        return self.inner.bounds()

    def reference_configs(self):
        return self.inner.reference_configs()
