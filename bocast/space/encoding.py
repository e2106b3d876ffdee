"""The numeric encoding of configurations for the GP: a fixed number of float columns per knob (log2
of split factors and power-of-two knobs, one-hot categoricals, rank/(n-1) for ordinals; inactive
knobs encode as zeros), its column names and bounds, and the decoding of a row back to the nearest
structural configuration. :class:`~bocast.space.space.Space` exposes these as methods."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from bocast.space.knobs import Categorical, Config, PowerOfTwo, SpaceError, Split, Value, _Choice

Knobs = Sequence[Split | _Choice]


def width(knobs: Knobs) -> int:
    return sum(k.width for k in knobs)


def column_names(knobs: Knobs) -> list[str]:
    names = []
    for k in knobs:
        if isinstance(k, Categorical):
            names += [f"{k.name}={c}" for c in k.choices]
        elif isinstance(k, Split):
            names += [f"log2 {k.name}[{i}]" for i in range(k.parts)]
        elif isinstance(k, PowerOfTwo):
            names.append(f"log2 {k.name}")
        else:
            names.append(f"{k.name} (rank)")
    return names


def bounds(knobs: Knobs, conds: Iterable[Mapping[str, Value]]) -> np.ndarray:
    """(2, encoded width) lower and upper bounds of every encoded column; a split's upper bound
    is log2 of its largest extent under the conditioning assignments ``conds``."""
    conds = list(conds)
    lo: list[float] = []
    hi: list[float] = []
    for k in knobs:
        if isinstance(k, Split):
            top = max(k.extent_for(cond) for cond in conds)
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


def encode(knobs: Knobs, configs: Sequence[Mapping[str, Value]]) -> np.ndarray:
    """Numeric matrix ``(n, encoded width)`` of ``configs``."""
    out = np.zeros((len(configs), width(knobs)))
    col = 0
    for k in knobs:  # a knob's block at once, each distinct value encoded once (issue 41)
        vals = [c[k.name] for c in configs]
        at = [r for r, v in enumerate(vals) if v is not None]
        try:  # equal values encode alike (encode_value reads a value's index or log2)
            distinct = {v: i for i, v in enumerate(dict.fromkeys(vals[r] for r in at))}
        except TypeError:  # an unhashable value (a list for a split): row by row
            for r in at:
                out[r, col:col + k.width] = k.encode_value(vals[r])
        else:
            if at:
                table = np.reshape([k.encode_value(v) for v in distinct], (-1, k.width))
                out[at, col:col + k.width] = table[[distinct[vals[r]] for r in at]]
        col += k.width
    return out


def decode(knobs: Knobs, conditioning: Sequence[str], x: np.ndarray) -> list[Config]:
    """Nearest structural configuration of each row of ``x`` (the ``conditioning`` knobs first,
    then every other knob under them). The result may violate known constraints."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    if x.shape[1] != width(knobs):
        raise SpaceError(f"expected {width(knobs)} columns, got {x.shape[1]}")
    by_name = {k.name: k for k in knobs}
    offsets, col = {}, 0
    for k in knobs:
        offsets[k.name] = col
        col += k.width
    out = []
    for row in x:
        cond = {n: by_name[n].decode_columns(
            row[offsets[n]:offsets[n] + by_name[n].width], {}) for n in conditioning}
        cfg = {}
        for k in knobs:
            if k.name in cond:
                cfg[k.name] = cond[k.name]
            elif not k.is_active(cond):
                cfg[k.name] = None
            else:
                at = offsets[k.name]
                cfg[k.name] = k.decode_columns(row[at:at + k.width], cond)
        out.append(cfg)
    return out
