"""A space's structural set (every knob in its domain, every split a valid factorisation,
inactive knobs ``None``), held as *variants*: one per assignment of the conditioning knobs,
with each knob's domain under it and the number of configurations it holds. The functions here
draw uniform rows from the variants, restrict them to allowed values, enumerate them by mixed
radix, and turn rows back into configurations; :class:`~bocast.space.space.Space` adds the derived
columns and the known constraints. :class:`SpaceSize` is the size of both sets."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bocast.space.knobs import Categorical, Config, Knob, SpaceError, Split, Value, _Choice

Knobs = Sequence[Split | _Choice]
#: (conditioning assignment, each knob's domain under it, structural configurations it holds)
Variant = tuple[dict[str, Value], dict[str, list], int]


@dataclass(frozen=True)
class SpaceSize:
    """Number of structural configurations (exact) and of feasible ones (exact or estimated)."""

    structural: int
    feasible: float
    exact: bool
    ci95: tuple[float, float]
    draws: int

    @classmethod
    def estimate(cls, total: int, accepted: int, draws: int) -> SpaceSize:
        """The feasible count estimated from ``accepted`` of ``draws`` uniform structural
        draws: ``total`` times the acceptance rate, with its Wilson 95% interval."""
        p = accepted / draws
        z = 1.96
        denom = 1 + z * z / draws
        centre = (p + z * z / (2 * draws)) / denom
        half = z * math.sqrt(p * (1 - p) / draws + z * z / (4 * draws * draws)) / denom
        return cls(total, p * total, False,
                   (max(0.0, centre - half) * total, (centre + half) * total), draws)

    def describe(self) -> str:
        if self.exact:
            return f"{int(self.feasible):,} feasible of {self.structural:,} structural (exact)"
        lo, hi = self.ci95
        return (f"~{self.feasible:.3g} feasible of {self.structural:,} structural "
                f"(estimate from {self.draws:,} uniform draws, 95% CI {lo:.3g}..{hi:.3g})")


def enumerate_variants(knobs: Knobs, conditioners: Mapping[str, Categorical]) -> list[Variant]:
    """For each assignment of the conditioning knobs: its domains and structural count."""
    variants = []
    conditioning = list(conditioners)
    choices = [conditioners[n].choices for n in conditioning]
    for combo in itertools.product(*choices):
        cond = dict(zip(conditioning, combo))
        domains, count = {}, 1
        for k in knobs:
            if k.name in cond:
                domains[k.name] = [cond[k.name]]
            elif not k.is_active(cond):
                domains[k.name] = [None]
            else:
                domains[k.name] = k.domain(cond)
                count *= len(domains[k.name])
        variants.append((cond, domains, count))
    return variants


def restrict(knobs: Knobs, variants: Sequence[Variant],
             allowed: Mapping[str, Sequence[Value]]) -> list[Variant]:
    """``variants`` with the domains of the knobs in ``allowed`` cut to the listed values (an
    inactive knob ignores its restriction); variants left empty are dropped."""
    unknown = set(allowed) - {k.name for k in knobs}
    if unknown:
        raise SpaceError(f"unknown knob(s) {sorted(unknown)}")
    out = []
    for cond, domains, _ in variants:
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


def _domain_or_fill(k: Split | _Choice, dom: list) -> list:
    """``dom``, or for an inactive knob the fill value of
    :meth:`~bocast.space.space.Space.columns`."""
    if dom == [None]:
        return [(1,) * k.parts] if isinstance(k, Split) else [k.choices[0]]
    return dom


class Coded(np.ndarray):
    """A categorical knob's column of string values that also holds each row's index among the
    knob's choices: ``column == "value"`` and ``!=``, how derived columns and constraints test
    such a knob (dozens of times a draw), compare the integer codes, 35-45x faster than numpy's
    string comparison (a third of a BO ask's pool went there). Otherwise it is the string array;
    a slice or gather of it loses the codes and compares strings again."""

    _codes: np.ndarray | None = None
    _index: dict[str, int] | None = None

    @classmethod
    def of(cls, strings: np.ndarray, codes: np.ndarray, choices: Sequence[Any]) -> Coded:
        col = strings.view(cls)
        col._codes, col._index = codes, {c: i for i, c in enumerate(choices)}
        return col

    def __array_finalize__(self, obj):
        self._codes = self._index = None  # a view or a gather: the string array only

    def _compare(self, other, equal: bool):
        if isinstance(other, str) and self._codes is not None and self._index is not None:
            hit = self._codes == self._index.get(other, -1)
            return hit if equal else ~hit
        plain = self.view(np.ndarray)
        return plain == other if equal else plain != other

    def __eq__(self, other):
        return self._compare(other, True)

    def __ne__(self, other):
        return self._compare(other, False)


def draw_grouped(knobs: Knobs, variants: Sequence[Variant], n: int, rng: np.random.Generator
                 ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``n`` i.i.d. uniform draws from ``variants`` before their shuffle: columns grouped by
    variant and the permutation that shuffles them. Samplers test the grouped rows and shuffle
    only the accepted ones (at 1% acceptance, gathering every column was a third of the time).
    A categorical knob of string choices comes as a :class:`Coded` column."""
    weights = np.array([c for _, _, c in variants], dtype=float)
    counts = rng.multinomial(n, weights / weights.sum())
    parts: dict[str, list[np.ndarray]] = {k.name: [] for k in knobs}
    coded = {k.name: k for k in knobs
             if isinstance(k, Categorical) and all(isinstance(c, str) for c in k.choices)}
    codes: dict[str, list[np.ndarray]] = {name: [] for name in coded}
    for (_, domains, _), m in zip(variants, counts):
        if m == 0:
            continue
        for k in knobs:
            dom = _domain_or_fill(k, domains[k.name])
            drawn = rng.integers(0, len(dom), m)
            parts[k.name].append(np.array(dom)[drawn])
            if k.name in coded:
                choices = coded[k.name].choices
                codes[k.name].append(np.array([choices.index(v) for v in dom])[drawn])
    order = rng.permutation(n)
    # one variant (most spaces): its columns as drawn, not copied
    cols = {name: _joined(chunks) for name, chunks in parts.items()}
    for name, knob in coded.items():
        cols[name] = Coded.of(cols[name], _joined(codes[name]), knob.choices)
    return cols, order


def _joined(chunks: list[np.ndarray]) -> np.ndarray:
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def chunks(knobs: Knobs, variants: Sequence[Variant], chunk: int
           ) -> Iterator[dict[str, np.ndarray]]:
    """Columns of every structural configuration of ``variants``, ``chunk`` rows at a time. A
    running index is decoded into one domain index per knob (mixed radix), so nothing is built
    row by row."""
    for _, domains, count in variants:
        arrays = {}
        for k in knobs:
            dom = _domain_or_fill(k, domains[k.name])
            arrays[k.name] = np.array(dom, dtype=np.int64) if isinstance(k, Split) \
                else np.array(dom)
        for start in range(0, count, chunk):
            rest = np.arange(start, min(start + chunk, count), dtype=np.int64)
            cols = {}
            for k in reversed(knobs):
                arr = arrays[k.name]
                rest, digit = np.divmod(rest, len(arr))
                cols[k.name] = arr[digit]
            yield {k.name: cols[k.name] for k in knobs}


def every(variants: Sequence[Variant]) -> Iterable[Config]:
    """Every structural configuration, one by one (for tests: :func:`chunks` is the fast way)."""
    for _, domains, _ in variants:
        names = list(domains)
        for combo in itertools.product(*(domains[n] for n in names)):
            yield dict(zip(names, combo))


def rows(knobs: Knobs, cols: Mapping[str, np.ndarray], index: Iterable[int]) -> list[Config]:
    """Configurations (python values, ``None`` where inactive) for the given rows."""
    index = np.asarray(index, dtype=np.int64)
    values = {}  # per knob, python values of the selected rows (one tolist per column)
    for k in knobs:
        col = cols[k.name][index].tolist()
        if isinstance(k, Split):
            col = [tuple(v) for v in col]
        # the mask of the selected rows alone (a sampler's batch holds 100x more rows)
        active = active_mask(k, {d: cols[d][index] for d in k.active_when}, len(index)).tolist()
        values[k.name] = [v if a else None for v, a in zip(col, active)]
    return [dict(zip(values, row)) for row in zip(*values.values())] if len(index) else []


def active_mask(k: Knob, cols: Mapping[str, np.ndarray], n: int | None = None) -> np.ndarray:
    """Whether ``k`` is active in each row of ``cols`` (``n`` rows: needed where ``cols`` holds
    no column)."""
    n = len(next(iter(cols.values()))) if n is None else n
    mask = np.ones(n, dtype=bool)
    for dep, vals in k.active_when.items():
        mask &= np.isin(cols[dep], list(vals))
    return mask


def _hashable(value: Value) -> Any:
    """A value as a set member that equals its JSON round trip (lists become tuples)."""
    return tuple(value) if isinstance(value, (list, tuple)) else value
