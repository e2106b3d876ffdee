"""One-knob moves of a configuration, the steps of :meth:`bocast.space.space.Space.neighbours`.

Splits move one prime factor between two levels; ordinals and power-of-two sets step to an
adjacent choice; categoricals take any other choice. When a conditioning categorical changes, the
splits whose extent it sets are rescaled at their innermost levels (keeping the outer tiling) and
knobs that become active take their first choice. The moves here are structural candidates only:
the space filters them by its constraints."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from bocast.space.knobs import Categorical, Config, Split, Value, _Choice, _prime_factors


def moves(knobs: Sequence[Split | _Choice], config: Mapping[str, Value],
          cond: Mapping[str, Value]) -> list[Config]:
    """Every configuration one move away from ``config``, whose conditioning knobs take
    ``cond``; unfiltered, possibly repeated."""
    cands: list[Config] = []
    for k in knobs:
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
                moved = recondition(knobs, config, {**cond, k.name: c}) if k.name in cond \
                    else {**config, k.name: c}
                if moved is not None:
                    cands.append(moved)
        else:
            i = k.choices.index(v)
            for j in (i - 1, i + 1):
                if 0 <= j < len(k.choices):
                    cands.append({**config, k.name: k.choices[j]})
    return cands


def recondition(knobs: Sequence[Split | _Choice], config: Mapping[str, Value],
                cond: Mapping[str, Value]) -> Config | None:
    """``config`` under the conditioning values ``cond``, or None when a split cannot follow."""
    new = dict(config)
    new.update(cond)
    for k in knobs:
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
