"""Schedule spaces: knobs, named known constraints, and operations on the feasible set.

A configuration is a plain ``dict`` from knob name to value:

- ``Split``      -> ``tuple[int, ...]`` whose product equals the knob's extent;
- ``Categorical``, ``Ordinal``, ``PowerOfTwo`` -> one of the knob's choices;
- a knob that is inactive under the configuration's categorical choices -> ``None``.

Sampling is exactly uniform over the feasible set. Candidates are drawn uniformly from the
*structural* set (every knob in its domain, every split a valid factorisation, inactive knobs
``None``); the known constraints are evaluated on whole numpy batches and the violators are
rejected. Rejection from a uniform proposal leaves the accepted draws uniform over the feasible
subset, so no approximation is involved; only the speed depends on the acceptance rate.

A knob's domain may depend on the categorical knobs it names in ``depends_on`` (the GEMM space's
tile splits count WMMA tiles, so their extents depend on the WMMA shape). The assignments of those
*conditioning* knobs are enumerated ("variants"); a variant is drawn with probability proportional
to the number of structural configurations it holds, which keeps the proposal uniform.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bocast.errors import InputError

Value = Any  # int | str | tuple[int, ...] | None
Config = dict[str, Value]


#: structural configurations an enumeration of a (sub-)space may visit, by default
MAX_ENUMERATION = 200_000_000


class SpaceError(InputError):
    """A configuration or space definition that cannot be interpreted (not a constraint
    violation)."""


#: Largest extent a split accepts. Divisors come from the prime factorisation (trial division up
#: to the square root: 46k steps at 2^31), so a split of any extent up to this is instant; beyond
#: it the kernels could not index the tensors anyway (int32 loops, TVM's default).
MAX_EXTENT = 2**31 - 1


@functools.lru_cache(maxsize=4096)
def factorizations(extent: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """All ordered tuples of ``parts`` positive integers whose product is ``extent``, in
    lexicographic order (the order fixes which configuration a seed draws)."""
    if extent < 1 or parts < 1:
        raise SpaceError(f"cannot split extent {extent} into {parts} parts")
    if extent > MAX_EXTENT:
        raise SpaceError(f"cannot split extent {extent}: larger than {MAX_EXTENT} (2^31 - 1)")
    if parts == 1:
        return ((extent,),)
    out: list[tuple[int, ...]] = []
    for d in _divisors(extent):
        out.extend((d, *rest) for rest in factorizations(extent // d, parts - 1))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order, from its prime factorisation (testing every
    integer up to ``n`` took 49 s for an extent of 2^31 - 1)."""
    divs = [1]
    for p, k in collections.Counter(_prime_factors(n)).items():
        divs = [d * p**e for d in divs for e in range(k + 1)]
    return tuple(sorted(divs))


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


# --------------------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Knob:
    """Base of all knob kinds.

    ``active_when`` maps a categorical knob to the values under which this knob matters; when the
    condition fails the knob is inactive and its value is ``None``.
    """

    name: str
    active_when: Mapping[str, tuple] = field(default_factory=dict, kw_only=True)
    doc: str = field(default="", kw_only=True)
    #: the value of a configuration that does not name this knob: a knob added to a space after
    #: configurations of it were recorded (stores, datasets, hand-written ones) gives them the
    #: value they were built with (:meth:`Space.complete`); None: every configuration names it
    default: Any = field(default=None, kw_only=True)

    @property
    def depends_on(self) -> tuple[str, ...]:
        return tuple(self.active_when)

    def is_active(self, cond: Mapping[str, Value]) -> bool:
        return all(cond[k] in vals for k, vals in self.active_when.items())

    def domain(self, cond: Mapping[str, Value]) -> list:
        raise NotImplementedError

    # Encoding: a fixed number of float columns per knob.
    width: int = field(default=1, init=False)

    def encode_value(self, value: Value) -> list[float]:
        raise NotImplementedError

    def decode_columns(self, cols: np.ndarray, cond: Mapping[str, Value]) -> Value:
        raise NotImplementedError


@dataclass(frozen=True)
class _Choice(Knob):
    choices: tuple = ()

    def __post_init__(self):
        if not self.choices or len(set(self.choices)) != len(self.choices):
            raise SpaceError(f"knob {self.name!r}: choices must be non-empty and distinct")

    def domain(self, cond):
        return list(self.choices)

    def _index(self, value) -> int:
        return self.choices.index(value)


@dataclass(frozen=True)
class Categorical(_Choice):
    """Unordered choice; one-hot encoded."""

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "width", len(self.choices))

    def encode_value(self, value):
        v = [0.0] * len(self.choices)
        v[self._index(value)] = 1.0
        return v

    def decode_columns(self, cols, cond):
        return self.choices[int(np.argmax(cols))]


@dataclass(frozen=True)
class Ordinal(_Choice):
    """Ordered choice (compute-at positions, unroll depth); encoded as index / (n - 1)."""

    def encode_value(self, value):
        n = len(self.choices)
        return [self._index(value) / (n - 1) if n > 1 else 0.0]

    def decode_columns(self, cols, cond):
        n = len(self.choices)
        i = int(np.clip(np.rint(cols[0] * (n - 1)), 0, n - 1)) if n > 1 else 0
        return self.choices[i]


@dataclass(frozen=True)
class PowerOfTwo(_Choice):
    """A small set of powers of two, optionally with 0 (vector widths, padding offsets); encoded as
    log2(value), with 0 encoded one below the smallest non-zero choice."""

    def __post_init__(self):
        super().__post_init__()
        for c in self.choices:
            if not isinstance(c, (int, np.integer)) or c < 0 or (c and c & (c - 1)):
                raise SpaceError(f"knob {self.name!r}: {c!r} is not 0 or a power of two")
        if list(self.choices) != sorted(self.choices):
            raise SpaceError(f"knob {self.name!r}: choices must be sorted")

    def _log(self, value: int) -> float:
        if value:
            return math.log2(value)
        nonzero = [c for c in self.choices if c]
        return math.log2(min(nonzero)) - 1 if nonzero else 0.0

    def encode_value(self, value):
        self._index(value)
        return [self._log(value)]

    def decode_columns(self, cols, cond):
        logs = np.array([self._log(c) for c in self.choices])
        return self.choices[int(np.argmin(np.abs(logs - cols[0])))]


@dataclass(frozen=True)
class Split(Knob):
    """Factors of a loop extent across ``parts`` levels, outermost first; their product must equal
    the extent. ``extent`` is an int or a function of the categorical knobs in ``extent_from``.
    Encoded as log2 of every part."""

    parts: int = 2
    extent: int | Callable[[Mapping[str, Value]], int] = 1
    extent_from: tuple[str, ...] = ()

    def __post_init__(self):
        if self.parts < 1:
            raise SpaceError(f"knob {self.name!r}: parts must be >= 1")
        if callable(self.extent) != bool(self.extent_from):
            raise SpaceError(f"knob {self.name!r}: a callable extent needs extent_from, "
                             "and only then")
        object.__setattr__(self, "width", self.parts)

    @property
    def depends_on(self):
        return tuple(self.active_when) + tuple(self.extent_from)

    def extent_for(self, cond: Mapping[str, Value]) -> int:
        return int(self.extent(cond) if callable(self.extent) else self.extent)

    def domain(self, cond):
        return list(factorizations(self.extent_for(cond), self.parts))

    def encode_value(self, value):
        return [math.log2(p) for p in value]

    def decode_columns(self, cols, cond):
        dom = np.log2(np.array(self.domain(cond), dtype=float))
        return tuple(int(x) for x in self.domain(cond)[int(np.argmin(((dom - cols) ** 2).sum(1)))])


def _kind(k: Knob) -> Split | _Choice:
    """A knob of a kind a space knows how to sample, encode and enumerate."""
    if not isinstance(k, (Split, _Choice)):
        raise SpaceError(f"knob {k.name!r}: {type(k).__name__} is not a knob kind "
                         "(Split, Categorical, Ordinal, PowerOfTwo)")
    return k


# --------------------------------------------------------------------------------- constraints


@dataclass(frozen=True)
class Constraint:
    """A known constraint. ``ok`` takes the column dict of a batch (knob columns plus the space's
    derived columns) and returns a boolean array, True where the constraint holds."""

    name: str
    doc: str
    ok: Callable[[Mapping[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class SpaceSize:
    """Number of structural configurations (exact) and of feasible ones (exact or estimated)."""

    structural: int
    feasible: float
    exact: bool
    ci95: tuple[float, float]
    draws: int

    def describe(self) -> str:
        if self.exact:
            return f"{int(self.feasible):,} feasible of {self.structural:,} structural (exact)"
        lo, hi = self.ci95
        return (f"~{self.feasible:.3g} feasible of {self.structural:,} structural "
                f"(estimate from {self.draws:,} uniform draws, 95% CI {lo:.3g}..{hi:.3g})")


# ---------------------------------------------------------------------------------------- space


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
        self._defaults = {k.name: k.default for k in self.knobs if k.default is not None}
        for k in self.knobs:
            if k.default is not None and (not isinstance(k, _Choice) or k.active_when
                                          or k.default not in k.choices):
                raise SpaceError(f"knob {k.name!r}: a default must be one of its choices, of "
                                 "an always active choice knob")
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
        self._variants = self._enumerate_variants()

    # --- structure -----------------------------------------------------------------------
    def knob(self, name: str) -> Knob:
        return self._by_name[name]

    @property
    def constraint_names(self) -> list[str]:
        return [c.name for c in self.constraints]

    def _enumerate_variants(self):
        """For each assignment of the conditioning knobs: its domains and structural count."""
        variants = []
        choices = [self._conditioners[n].choices for n in self.conditioning]
        for combo in itertools.product(*choices):
            cond = dict(zip(self.conditioning, combo))
            domains, count = {}, 1
            for k in self.knobs:
                if k.name in cond:
                    domains[k.name] = [cond[k.name]]
                elif not k.is_active(cond):
                    domains[k.name] = [None]
                else:
                    domains[k.name] = k.domain(cond)
                    count *= len(domains[k.name])
            variants.append((cond, domains, count))
        return variants

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
        structural = self.structural_violations(config)
        if structural:
            return structural
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
        """The draws of :meth:`_draw_columns` before their shuffle: columns grouped by variant
        and the permutation that shuffles them. Samplers test the grouped rows and shuffle only
        the accepted ones (at 1% acceptance, gathering every column was a third of the time)."""
        variants = self._variants if variants is None else variants
        weights = np.array([c for _, _, c in variants], dtype=float)
        counts = rng.multinomial(n, weights / weights.sum())
        parts: dict[str, list[np.ndarray]] = {k.name: [] for k in self.knobs}
        for (_, domains, _), m in zip(variants, counts):
            if m == 0:
                continue
            for k in self.knobs:
                dom = domains[k.name]
                if dom == [None]:
                    dom = [(1,) * k.parts] if isinstance(k, Split) else [k.choices[0]]
                arr = np.array(dom)
                parts[k.name].append(arr[rng.integers(0, len(dom), m)])
        order = rng.permutation(n)
        return {name: np.concatenate(chunks) for name, chunks in parts.items()}, order

    def _draw_feasible(self, n: int, rng: np.random.Generator, variants=None):
        """Columns of ``n`` draws (grouped, derived included) and the indices of the feasible
        ones in shuffled order: the rows :meth:`_draw_columns` would have, filtered."""
        cols, order = self._draw_grouped(n, rng, variants)
        cols = self._with_derived(cols)
        return cols, order[np.flatnonzero(self.feasible_mask(cols)[order])]

    def _restricted_variants(self, allowed: Mapping[str, Sequence[Value]]):
        unknown = set(allowed) - set(self._by_name)
        if unknown:
            raise SpaceError(f"unknown knob(s) {sorted(unknown)}")
        out = []
        for cond, domains, _ in self._variants:
            new, count = {}, 1
            for name, dom in domains.items():
                if name in allowed and dom != [None]:
                    ok = {_hashable(v) for v in allowed[name]}
                    dom = [v for v in dom if _hashable(v) in ok]
                new[name] = dom
                if name not in cond and dom != [None]:
                    count *= len(dom)
                if not dom:
                    count = 0
            if count:
                out.append((cond, new, count))
        return out

    def sample_restricted(self, n: int, rng: np.random.Generator,
                          allowed: Mapping[str, Sequence[Value]], *, max_draws: int = 200_000
                          ) -> list[Config]:
        """Up to ``n`` feasible configurations, uniform among those whose knobs in ``allowed``
        take one of the listed values (knobs that are inactive ignore their restriction). Fewer
        (possibly none) when the restricted feasible set is small or empty."""
        variants = self._restricted_variants(allowed)
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
        index = np.asarray(index, dtype=np.int64)
        values = {}  # per knob, python values of the selected rows (one tolist per column)
        for k in self.knobs:
            col = cols[k.name][index].tolist()
            if isinstance(k, Split):
                col = [tuple(v) for v in col]
            active = self._active_mask(k, cols)[index].tolist()
            values[k.name] = [v if a else None for v, a in zip(col, active)]
        return [dict(zip(values, row)) for row in zip(*values.values())] if len(index) else []

    @staticmethod
    def _active_mask(k: Knob, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(cols.values())))
        mask = np.ones(n, dtype=bool)
        for dep, vals in k.active_when.items():
            mask &= np.isin(cols[dep], list(vals))
        return mask

    def sample(self, n: int, rng: np.random.Generator | int | None = None, *,
               unique: bool = False, max_draws: int = 50_000_000) -> list[Config]:
        """``n`` feasible configurations, i.i.d. uniform over the feasible set (or, with
        ``unique``, uniform without replacement)."""
        rng = np.random.default_rng(rng)
        out: list[Config] = []
        seen: set[str] = set()
        drawn, accepted = 0, 0
        while len(out) < n:
            rate = (accepted + 1) / (drawn + 2)
            batch = int(min(max(1024, 1.2 * (n - len(out)) / rate), 500_000))
            cols, idx = self._draw_feasible(batch, rng)
            drawn += batch
            accepted += len(idx)
            for cfg in self._rows(cols, idx[: (n - len(out)) if not unique else None]):
                if unique:
                    key = self.key(cfg)
                    if key in seen:
                        continue
                    seen.add(key)
                out.append(cfg)
                if len(out) == n:
                    break
            if drawn > max_draws and len(out) < n:
                raise SpaceError(f"only {len(out)} feasible configurations after {drawn} draws")
        return out

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
        p = acc / draws
        z = 1.96
        denom = 1 + z * z / draws
        centre = (p + z * z / (2 * draws)) / denom
        half = z * math.sqrt(p * (1 - p) / draws + z * z / (4 * draws * draws)) / denom
        return SpaceSize(total, p * total, False,
                         (max(0.0, centre - half) * total, (centre + half) * total), draws)

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
        return self._variants if allowed is None else self._restricted_variants(allowed)

    def _enumerate_chunks(self, allowed, max_structural: int, chunk: int = 1 << 18):
        """(columns with derived ones, indices of their feasible rows) over the structural set
        restricted to ``allowed``, ``chunk`` rows at a time. A running index is decoded into
        one domain index per knob (mixed radix), so nothing is built row by row."""
        variants = self._variants_for(allowed)
        total = sum(c for _, _, c in variants)
        if total > max_structural:
            raise SpaceError(f"the (sub-)space has {total:,} structural configurations, more than "
                             f"the {max_structural:,} an enumeration may visit: fix more knobs")
        for _, domains, count in variants:
            arrays = {}
            for k in self.knobs:
                dom = domains[k.name]
                if dom == [None]:  # inactive: the fill value of :meth:`columns`
                    dom = [(1,) * k.parts] if isinstance(k, Split) else [k.choices[0]]
                arrays[k.name] = np.array(dom, dtype=np.int64) if isinstance(k, Split) \
                    else np.array(dom)
            for start in range(0, count, chunk):
                rest = np.arange(start, min(start + chunk, count), dtype=np.int64)
                cols = {}
                for k in reversed(self.knobs):
                    arr = arrays[k.name]
                    rest, digit = np.divmod(rest, len(arr))
                    cols[k.name] = arr[digit]
                cols = self._with_derived({k.name: cols[k.name] for k in self.knobs})
                yield cols, np.flatnonzero(self.feasible_mask(cols))

    def _enumerate_structural(self) -> Iterable[Config]:
        for _, domains, _ in self._variants:
            names = list(domains)
            for combo in itertools.product(*(domains[n] for n in names)):
                yield dict(zip(names, combo))

    # --- neighbours ----------------------------------------------------------------------
    def neighbours(self, config: Mapping[str, Value]) -> list[Config]:
        """Feasible configurations that differ from ``config`` in one knob.

        Splits move one prime factor between two levels; ordinals and power-of-two sets step to
        an adjacent choice; categoricals take any other choice. When a conditioning categorical
        changes, the splits whose extent it sets are rescaled at their innermost levels (keeping
        the outer tiling) and knobs that become active take their first choice."""
        if self.validate(config):
            raise SpaceError(f"neighbours of an infeasible configuration: {self.validate(config)}")
        cond = self._cond_of(config)
        cands: list[Config] = []
        for k in self.knobs:
            v = config[k.name]
            if v is None:
                continue
            if isinstance(k, Split):
                for a, b in itertools.permutations(range(k.parts), 2):
                    for p in sorted(set(_prime_factors(v[a]))):
                        new = list(v)
                        new[a] //= p
                        new[b] *= p
                        cands.append({**config, k.name: tuple(new)})
            elif isinstance(k, Categorical):
                for c in k.choices:
                    if c == v:
                        continue
                    moved = self._recondition(config, {**cond, k.name: c}) if k.name in cond \
                        else {**config, k.name: c}
                    if moved is not None:
                        cands.append(moved)
            else:
                i = k.choices.index(v)
                for j in (i - 1, i + 1):
                    if 0 <= j < len(k.choices):
                        cands.append({**config, k.name: k.choices[j]})
        cands = [c for c in cands if not self.structural_violations(c)]
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

    def _recondition(self, config: Mapping[str, Value], cond: Mapping[str, Value]) -> Config | None:
        new = dict(config)
        new.update(cond)
        for k in self.knobs:
            if k.name in cond:
                continue
            if not k.is_active(cond):
                new[k.name] = None
                continue
            if new[k.name] is None:
                new[k.name] = k.domain(cond)[0]
                continue
            if isinstance(k, Split):
                scaled = _rescale(tuple(new[k.name]), k.extent_for(cond))
                if scaled is None:
                    return None
                new[k.name] = scaled
        return new

    # --- encoding ------------------------------------------------------------------------
    @property
    def encoded_width(self) -> int:
        return sum(k.width for k in self.knobs)

    def column_names(self) -> list[str]:
        names = []
        for k in self.knobs:
            if isinstance(k, Categorical):
                names += [f"{k.name}={c}" for c in k.choices]
            elif isinstance(k, Split):
                names += [f"log2 {k.name}[{i}]" for i in range(k.parts)]
            elif isinstance(k, PowerOfTwo):
                names.append(f"log2 {k.name}")
            else:
                names.append(f"{k.name} (rank)")
        return names

    def encoding_bounds(self) -> np.ndarray:
        """(2, encoded_width) lower and upper bounds of every encoded column."""
        lo, hi = [], []
        for k in self.knobs:
            if isinstance(k, Split):
                top = max(k.extent_for(cond) for cond, _, _ in self._variants)
                lo += [0.0] * k.parts
                hi += [math.log2(top)] * k.parts
            elif isinstance(k, PowerOfTwo):
                lo.append(k._log(k.choices[0]))
                hi.append(k._log(k.choices[-1]))
            else:
                lo += [0.0] * k.width
                hi += [1.0] * k.width
            if k.active_when:  # an inactive knob encodes as zeros
                lo[-k.width:] = [min(v, 0.0) for v in lo[-k.width:]]
                hi[-k.width:] = [max(v, 0.0) for v in hi[-k.width:]]
        return np.array([lo, hi])

    def encode(self, configs: Sequence[Mapping[str, Value]]) -> np.ndarray:
        """Numeric matrix ``(n, encoded_width)`` for the GP: log2 of split factors and power-of-two
        knobs, one-hot categoricals, rank/(n-1) for ordinals; inactive knobs encode as zeros."""
        out = np.zeros((len(configs), self.encoded_width))
        for r, c in enumerate(configs):
            col = 0
            for k in self.knobs:
                if c[k.name] is not None:
                    out[r, col:col + k.width] = k.encode_value(c[k.name])
                col += k.width
        return out

    def decode(self, x: np.ndarray) -> list[Config]:
        """Nearest structural configuration of each row of ``x`` (conditioning knobs first, then
        every other knob under them). The result may violate known constraints."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        if x.shape[1] != self.encoded_width:
            raise SpaceError(f"expected {self.encoded_width} columns, got {x.shape[1]}")
        offsets, col = {}, 0
        for k in self.knobs:
            offsets[k.name] = col
            col += k.width
        out = []
        for row in x:
            cond = {n: self._by_name[n].decode_columns(
                row[offsets[n]:offsets[n] + self._by_name[n].width], {}) for n in self.conditioning}
            cfg = {}
            for k in self.knobs:
                if k.name in cond:
                    cfg[k.name] = cond[k.name]
                elif not k.is_active(cond):
                    cfg[k.name] = None
                else:
                    at = offsets[k.name]
                    cfg[k.name] = k.decode_columns(row[at:at + k.width], cond)
            out.append(cfg)
        return out

    def _extent_text(self, k: Split) -> str:
        """``k``'s extent, or each extent its deciding knobs give (``64 (instr mma, ...)``)."""
        if not callable(k.extent):
            return str(k.extent)
        deciders = [d for d in (self._by_name[n] for n in k.extent_from)
                    if isinstance(d, _Choice)]  # an extent is decided by choice knobs
        if len(deciders) != len(k.extent_from):
            return f"an extent set by {', '.join(k.extent_from)}"
        by_extent: dict[int, list[str]] = {}
        for values in itertools.product(*(d.choices for d in deciders)):
            cond = dict(zip(k.extent_from, values))
            by_extent.setdefault(k.extent_for(cond), []).append(
                " ".join(f"{n} {v}" for n, v in cond.items()) if len(cond) > 1
                else str(values[0]))
        name = "" if len(deciders) > 1 else f"{deciders[0].name} "
        return ", ".join(f"{e} ({name}{', '.join(w)})" for e, w in by_extent.items())

    def describe(self) -> str:
        lines = ["knobs:"]
        for k in self.knobs:
            kind = type(k).__name__
            if isinstance(k, Split):
                dom = f"{k.parts} factors, outermost first, of {self._extent_text(k)}"
            else:
                dom = ", ".join(map(str, k.choices))
            when = f"  [active when {dict(k.active_when)}]" if k.active_when else ""
            lines.append(f"  {k.name:<12} {kind:<11} {dom}{when}")
            if k.doc:
                lines.append(f"  {'':<12} {'':<11} {k.doc}")
        lines.append("known constraints:")
        lines += [f"  {c.name:<34} {c.doc}" for c in self.constraints]
        return "\n".join(lines)


def _rescale(parts: tuple[int, ...], extent: int) -> tuple[int, ...] | None:
    """Adjust ``parts`` to multiply to ``extent`` by dividing/multiplying the innermost levels."""
    old = math.prod(parts)
    g = math.gcd(old, extent)
    down, up = old // g, extent // g
    new = list(parts)
    for p in _prime_factors(down):
        for i in reversed(range(len(new))):
            if new[i] % p == 0:
                new[i] //= p
                break
        else:
            return None
    new[-1] *= up
    return tuple(new)


def _hashable(value: Value):
    """A value as a set member that equals its JSON round trip (lists become tuples)."""
    return tuple(value) if isinstance(value, (list, tuple)) else value
