"""Schedule spaces: knobs (:mod:`bocast.space.knobs`, where a configuration's form is given), named
known constraints, and operations on the feasible set (validation, sampling, size, enumeration,
neighbours, the GP encoding).

Sampling is exactly uniform over the feasible set. Candidates are drawn uniformly from the
*structural* set (every knob in its domain, every split a valid factorisation, inactive knobs
``None``); the known constraints are evaluated on whole numpy batches and the violators are
rejected. Rejection from a uniform proposal leaves the accepted draws uniform over the feasible
subset, so no approximation is involved; only the speed depends on the acceptance rate.

A knob's domain may depend on the categorical knobs it names in ``depends_on`` (the GEMM space's
tile splits count WMMA tiles, so their extents depend on the WMMA shape). The assignments of those
*conditioning* knobs are enumerated ("variants", :mod:`bocast.space.structural`); a variant is drawn
with probability proportional to the number of structural configurations it holds, which keeps
the proposal uniform.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from bocast.space import encoding, sampling, structural
from bocast.space.knobs import (
    MAX_EXTENT,
    Categorical,
    Config,
    Constraint,
    Knob,
    Ordinal,
    PowerOfTwo,
    SpaceError,
    Split,
    Value,
    _kind,
    describe_knobs,
    factorizations,
    knob_defaults,
)
from bocast.space.neighbours import moves
from bocast.space.structural import SpaceSize

# the knob kinds live in bocast.space.knobs; operators (and users' own) import them from here
__all__ = ["MAX_ENUMERATION", "MAX_EXTENT", "Categorical", "Config", "Constraint", "Knob",
           "Ordinal", "PowerOfTwo", "Space", "SpaceError", "SpaceSize", "Split", "Value",
           "factorizations"]

#: structural configurations an enumeration of a (sub-)space may visit, by default
MAX_ENUMERATION = 200_000_000


class Space:
    """Knobs plus named known constraints.

    ``derive`` computes shared quantities (tile sizes, threads, shared memory) from the knob
    columns of a batch, so every constraint reads them from one place.
    """

    def __init__(self, knobs: Sequence[Knob], constraints: Sequence[Constraint],
                 derive: Callable[[Mapping[str, np.ndarray]],
                                  Mapping[str, np.ndarray]] | None = None):
        names = [k.name for k in knobs]
        if len(set(names)) != len(names):
            raise SpaceError(f"duplicate knob names in {names}")
        cnames = [c.name for c in constraints]
        if len(set(cnames)) != len(cnames):
            raise SpaceError(f"duplicate constraint names in {cnames}")
        self.knobs = tuple(_kind(k) for k in knobs)
        self.constraints: tuple[Constraint, ...] = tuple(constraints)
        self._derive = derive
        self._by_name = {k.name: k for k in self.knobs}
        self._defaults = knob_defaults(self.knobs)
        cond_names = sorted({d for k in self.knobs for d in k.depends_on})
        self._conditioners: dict[str, Categorical] = {}
        for d in cond_names:
            ck = self._by_name.get(d)
            if not isinstance(ck, Categorical):
                raise SpaceError(f"knobs may only depend on categorical knobs; {d!r} is not one")
            if ck.depends_on:
                raise SpaceError(f"conditioning knob {d!r} must not itself depend on other knobs")
            self._conditioners[d] = ck
        self.conditioning: tuple[str, ...] = tuple(cond_names)
        self._variants = structural.enumerate_variants(self.knobs, self._conditioners)

    # --- structure -----------------------------------------------------------------------
    def knob(self, name: str) -> Knob:
        return self._by_name[name]

    @property
    def constraint_names(self) -> list[str]:
        return [c.name for c in self.constraints]

    @property
    def structural_size(self) -> int:
        return sum(c for _, _, c in self._variants)

    def complete(self, config: Mapping[str, Value]) -> Mapping[str, Value]:
        """``config`` with the knobs it does not name that have a default (a knob added after
        it was recorded) at that default; ``config`` itself when it names them all."""
        missing = {n: v for n, v in self._defaults.items() if n not in config}
        return {**config, **missing} if missing else config

    def _cond_of(self, config: Mapping[str, Value]) -> dict[str, Value]:
        return {n: config[n] for n in self.conditioning}

    # --- batches -------------------------------------------------------------------------
    def columns(self, configs: Sequence[Mapping[str, Value]]) -> dict[str, np.ndarray]:
        """Column arrays for a list of configurations, plus derived columns.

        Inactive knobs are filled with their first choice (all-ones for splits) so that derived
        quantities stay computable; constraints that read them must check activity."""
        cols: dict[str, np.ndarray] = {}
        configs = [self.complete(c) for c in configs]
        for k in self.knobs:
            vals = [c.get(k.name) for c in configs]
            if isinstance(k, Split):
                cols[k.name] = np.array([v if v is not None else (1,) * k.parts for v in vals],
                                        dtype=np.int64).reshape(len(vals), k.parts)
            else:
                fill = k.choices[0]
                cols[k.name] = np.array([fill if v is None else v for v in vals])
        return self._with_derived(cols)

    def _with_derived(self, cols):
        if self._derive is not None:
            cols.update(self._derive(cols))
        return cols

    def feasible_mask(self, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(cols.values())))
        ok = np.ones(n, dtype=bool)
        for c in self.constraints:
            ok &= np.asarray(c.ok(cols), dtype=bool)
        return ok

    def violations(self, cols: Mapping[str, np.ndarray]) -> list[list[str]]:
        """Per row: the names of the violated known constraints."""
        n = len(next(iter(cols.values())))
        out: list[list[str]] = [[] for _ in range(n)]
        for c in self.constraints:
            bad = ~np.asarray(c.ok(cols), dtype=bool)
            for i in np.flatnonzero(bad):
                out[i].append(c.name)
        return out

    # --- single configurations -----------------------------------------------------------
    def check_keys(self, config: Mapping[str, Value]) -> None:
        """Raise SpaceError if the configuration has unknown or missing knobs (a knob with a
        default may be missing: :meth:`complete`)."""
        unknown = sorted(set(config) - set(self._by_name))
        missing = sorted(set(self._by_name) - set(config) - set(self._defaults))
        if unknown or missing:
            parts = []
            if unknown:
                parts.append(f"unknown knob(s) {unknown}")
            if missing:
                parts.append(f"missing knob(s) {missing}")
            raise SpaceError("configuration has " + " and ".join(parts))

    def structural_violations(self, config: Mapping[str, Value]) -> list[str]:
        """Domain problems: ``<knob>.choice``, ``<knob>.product`` (split product differs from the
        extent), ``<knob>.parts``, ``<knob>.inactive`` (a value given where the knob is
        inactive)."""
        self.check_keys(config)
        config = self.complete(config)
        out = []
        for n in self.conditioning:
            if config[n] not in self._conditioners[n].choices:
                return [f"{n}.choice"]
        cond = self._cond_of(config)
        for k in self.knobs:
            v = config[k.name]
            if not k.is_active(cond):
                if v is not None:
                    out.append(f"{k.name}.inactive")
                continue
            if isinstance(k, Split):
                if not isinstance(v, (tuple, list)) or len(v) != k.parts or not all(
                        isinstance(p, (int, np.integer)) and p >= 1 for p in v):
                    out.append(f"{k.name}.parts")
                elif math.prod(v) != k.extent_for(cond):
                    out.append(f"{k.name}.product")
            elif v not in k.choices:
                out.append(f"{k.name}.choice")
        return out

    def validate(self, config: Mapping[str, Value]) -> list[str]:
        """Names of violated constraints, structural ones first; empty when feasible."""
        bad = self.structural_violations(config)
        if bad:
            return bad
        return self.violations(self.columns([config]))[0]

    def validate_many(self, configs: Sequence[Mapping[str, Value]]) -> list[list[str]]:
        """``validate`` for many configurations, with the known constraints evaluated as one
        batch."""
        out = [self.structural_violations(c) for c in configs]
        sound = [i for i, v in enumerate(out) if not v]
        if sound:
            for i, v in zip(sound, self.violations(self.columns([configs[i] for i in sound]))):
                out[i] = v
        return out

    def is_feasible(self, config: Mapping[str, Value]) -> bool:
        return not self.validate(config)

    @staticmethod
    def key(config: Mapping[str, Value]) -> str:
        """Stable text key of a configuration (sorted JSON, tuples as lists)."""
        return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in config.items()},
                          sort_keys=True, separators=(",", ":"))

    def from_json(self, obj: Mapping[str, Any]) -> Config:
        """Configuration from its JSON form (lists back to tuples for splits; a knob it does not
        name that has a default at that default)."""
        self.check_keys(obj)
        obj = self.complete(obj)
        return {k.name: (tuple(int(x) for x in obj[k.name])
                         if isinstance(k, Split) and obj[k.name] is not None else obj[k.name])
                for k in self.knobs}

    # --- sampling ------------------------------------------------------------------------
    def _draw_columns(self, n: int, rng: np.random.Generator,
                      variants=None) -> dict[str, np.ndarray]:
        """``n`` i.i.d. uniform draws from the structural set (or from ``variants``, a restricted
        copy of it), as columns (inactive knobs hold their fill value, as in :meth:`columns`)."""
        cols, order = self._draw_grouped(n, rng, variants)
        return {name: col[order] for name, col in cols.items()}

    def _draw_grouped(self, n: int, rng: np.random.Generator,
                      variants=None) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The draws of :meth:`_draw_columns` before their shuffle
        (:func:`bocast.space.structural.draw_grouped`)."""
        return structural.draw_grouped(self.knobs, self._variants if variants is None
                                       else variants, n, rng)

    def _draw_feasible(self, n: int, rng: np.random.Generator, variants=None):
        """Columns of ``n`` draws (grouped, derived included) and the indices of the feasible
        ones in shuffled order: the rows :meth:`_draw_columns` would have, filtered."""
        cols, order = self._draw_grouped(n, rng, variants)
        cols = self._with_derived(cols)
        return cols, order[np.flatnonzero(self.feasible_mask(cols)[order])]

    def sample_restricted(self, n: int, rng: np.random.Generator,
                          allowed: Mapping[str, Sequence[Value]], *, max_draws: int = 200_000
                          ) -> list[Config]:
        """Up to ``n`` feasible configurations, uniform among those whose knobs in ``allowed``
        take one of the listed values (knobs that are inactive ignore their restriction). Fewer
        (possibly none) when the restricted feasible set is small or empty."""
        variants = structural.restrict(self.knobs, self._variants, allowed)
        out: list[Config] = []
        drawn = 0
        while variants and len(out) < n and drawn < max_draws:
            batch = min(max(256, 20 * (n - len(out))), max_draws - drawn)
            cols, idx = self._draw_feasible(batch, rng, variants)
            drawn += batch
            out += self._rows(cols, idx[: n - len(out)])
        return out

    def _rows(self, cols: Mapping[str, np.ndarray], index: Iterable[int]) -> list[Config]:
        """Configurations (python values, ``None`` where inactive) for the given rows."""
        return structural.rows(self.knobs, cols, index)

    _active_mask = staticmethod(structural.active_mask)

    def sample(self, n: int, rng: np.random.Generator | int | None = None, *,
               unique: bool = False, max_draws: int = 50_000_000) -> list[Config]:
        """``n`` feasible configurations, i.i.d. uniform over the feasible set (or, with
        ``unique``, uniform without replacement): :mod:`bocast.space.sampling`."""
        return sampling.sample(self, n, np.random.default_rng(rng), unique=unique,
                               max_draws=max_draws)

    def size(self, *, draws: int = 200_000, rng: np.random.Generator | int | None = 0,
             exact_limit: int = 2_000_000) -> SpaceSize:
        """Size of the feasible set: exact by enumeration when the structural set has at most
        ``exact_limit`` members, otherwise estimated as structural size times the acceptance
        rate of ``draws`` uniform draws (Wilson 95% interval)."""
        total = self.structural_size
        if total <= exact_limit:
            feasible = self.count_feasible()
            return SpaceSize(total, float(feasible), True, (feasible, feasible), total)
        rng = np.random.default_rng(rng)
        acc = 0
        for start in range(0, draws, 100_000):
            m = min(100_000, draws - start)
            # a count needs no shuffle: the grouped draws (same rng stream) are enough
            cols = self._with_derived(self._draw_grouped(m, rng)[0])
            acc += int(self.feasible_mask(cols).sum())
        return SpaceSize.estimate(total, acc, draws)

    # --- exhaustive enumeration ----------------------------------------------------------
    def enumerate_feasible(self, allowed: Mapping[str, Sequence[Value]] | None = None, *,
                           max_structural: int = MAX_ENUMERATION) -> list[Config]:
        """Every feasible configuration whose knobs in ``allowed`` take one of the listed values
        (a knob that is inactive ignores its restriction, as in :meth:`sample_restricted`), in a
        fixed order: variant by variant, the last knob varying fastest. The exhaustive benchmark
        tables measure exactly this set. Raises SpaceError when the restricted structural set
        exceeds ``max_structural`` (fix more knobs)."""
        out: list[Config] = []
        for cols, idx in self._enumerate_chunks(allowed, max_structural):
            out += self._rows(cols, idx)
        return out

    def count_feasible(self, allowed: Mapping[str, Sequence[Value]] | None = None, *,
                       max_structural: int = MAX_ENUMERATION) -> int:
        """``len(enumerate_feasible(allowed))`` without building the configurations."""
        return sum(len(idx) for _, idx in self._enumerate_chunks(allowed, max_structural))

    def restricted_structural_size(
            self, allowed: Mapping[str, Sequence[Value]] | None = None) -> int:
        """Structural configurations an enumeration of ``allowed`` visits."""
        return sum(c for _, _, c in self._variants_for(allowed))

    def _variants_for(self, allowed):
        return self._variants if allowed is None else structural.restrict(
            self.knobs, self._variants, allowed)

    def _enumerate_chunks(self, allowed, max_structural: int, chunk: int = 1 << 18):
        """(columns with derived ones, indices of their feasible rows) over the structural set
        restricted to ``allowed``, ``chunk`` rows at a time
        (:func:`bocast.space.structural.chunks`)."""
        variants = self._variants_for(allowed)
        total = sum(c for _, _, c in variants)
        if total > max_structural:
            raise SpaceError(f"the (sub-)space has {total:,} structural configurations, more than "
                             f"the {max_structural:,} an enumeration may visit: fix more knobs")
        for cols in structural.chunks(self.knobs, variants, chunk):
            cols = self._with_derived(cols)
            yield cols, np.flatnonzero(self.feasible_mask(cols))

    def _enumerate_structural(self) -> Iterable[Config]:
        return structural.every(self._variants)

    # --- neighbours ----------------------------------------------------------------------
    def neighbours(self, config: Mapping[str, Value]) -> list[Config]:
        """Feasible configurations that differ from ``config`` in one knob (the moves of
        :mod:`bocast.space.neighbours`)."""
        if self.validate(config):
            raise SpaceError(f"neighbours of an infeasible configuration: {self.validate(config)}")
        cands = [c for c in moves(self.knobs, config, self._cond_of(config))
                 if not self.structural_violations(c)]
        if not cands:
            return []
        mask = self.feasible_mask(self.columns(cands))
        out, seen = [], {self.key(config)}
        for c, ok in zip(cands, mask):
            key = self.key(c)
            if ok and key not in seen:
                seen.add(key)
                out.append(c)
        return out

    # --- encoding (bocast.space.encoding) --------------------------------------------------------
    @property
    def encoded_width(self) -> int:
        return encoding.width(self.knobs)

    def column_names(self) -> list[str]:
        return encoding.column_names(self.knobs)

    def encoding_bounds(self) -> np.ndarray:
        """(2, encoded_width) lower and upper bounds of every encoded column."""
        return encoding.bounds(self.knobs, (cond for cond, _, _ in self._variants))

    def encode(self, configs: Sequence[Mapping[str, Value]]) -> np.ndarray:
        """Numeric matrix ``(n, encoded_width)`` for the GP: log2 of split factors and power-of-two
        knobs, one-hot categoricals, rank/(n-1) for ordinals; inactive knobs encode as zeros."""
        return encoding.encode(self.knobs, configs)

    def decode(self, x: np.ndarray) -> list[Config]:
        """Nearest structural configuration of each row of ``x`` (conditioning knobs first, then
        every other knob under them). The result may violate known constraints."""
        return encoding.decode(self.knobs, self.conditioning, x)

    def describe(self) -> str:
        return describe_knobs(self.knobs, self.constraints)
