"""Knobs and known constraints: the parts a schedule space is made of.

A configuration is a plain ``dict`` from knob name to value:

- ``Split``      -> ``tuple[int, ...]`` whose product equals the knob's extent;
- ``Categorical``, ``Ordinal``, ``PowerOfTwo`` -> one of the knob's choices;
- a knob that is inactive under the configuration's categorical choices -> ``None``.

Each knob kind knows its domain under the conditioning knobs' values and its columns of the GP
encoding; a :class:`Constraint` is a named predicate on a numpy batch. :mod:`bocast.space.space`
assembles them into a :class:`~bocast.space.space.Space`; :func:`describe_knobs` lists them.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bocast.errors import InputError

Value = Any  # int | str | tuple[int, ...] | None
Config = dict[str, Value]


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
    #: value they were built with (:meth:`bocast.space.space.Space.complete`); None: every
    #: configuration names it
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
    #: the choices beyond the first are drawn only while each named categorical knob takes one
    #: of its listed values; otherwise the draws hold the first choice alone. For a knob whose
    #: other values the constraints refuse there anyway: its draws skip what rejection would
    #: discard (uniformity over the feasible set is kept: only infeasible configurations leave
    #: the structural set), and a configuration naming such a value is still refused by the
    #: constraint's name
    open_when: Mapping[str, tuple] = field(default_factory=dict, kw_only=True)

    def __post_init__(self):
        if not self.choices or len(set(self.choices)) != len(self.choices):
            raise SpaceError(f"knob {self.name!r}: choices must be non-empty and distinct")

    @property
    def depends_on(self) -> tuple[str, ...]:
        return tuple(self.active_when) + tuple(k for k in self.open_when
                                               if k not in self.active_when)

    def domain(self, cond):
        if all(cond[k] in vals for k, vals in self.open_when.items()):
            return list(self.choices)
        return [self.choices[0]]

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


def knob_defaults(knobs: Sequence[Knob]) -> dict[str, Any]:
    """The knobs' defaults by name; a default must be a choice of an always active choice
    knob (a configuration that lacks the knob cannot say under which choices it is active)."""
    for k in knobs:
        if k.default is not None and (not isinstance(k, _Choice) or k.active_when
                                      or k.default not in k.choices):
            raise SpaceError(f"knob {k.name!r}: a default must be one of its choices, of an "
                             "always active choice knob")
    return {k.name: k.default for k in knobs if k.default is not None}


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



def describe_knobs(knobs: Sequence[Split | _Choice], constraints: Sequence[Constraint]) -> str:
    """The knob and constraint listing of ``bocast space --describe``."""
    lines = ["knobs:"]
    for k in knobs:
        kind = type(k).__name__
        if isinstance(k, Split):
            dom = f"{k.parts} factors, outermost first, of {_extent_text(k, knobs)}"
        else:
            dom = ", ".join(map(str, k.choices))
        when = f"  [active when {dict(k.active_when)}]" if k.active_when else ""
        lines.append(f"  {k.name:<12} {kind:<11} {dom}{when}")
        if k.doc:
            lines.append(f"  {'':<12} {'':<11} {k.doc}")
    lines.append("known constraints:")
    lines += [f"  {c.name:<34} {c.doc}" for c in constraints]
    return "\n".join(lines)


def _extent_text(k: Split, knobs: Sequence[Knob]) -> str:
    """``k``'s extent, or each extent its deciding knobs give (``64 (instr mma, ...)``)."""
    if not callable(k.extent):
        return str(k.extent)
    by_name = {d.name: d for d in knobs}
    deciders = [d for d in (by_name[n] for n in k.extent_from)
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
