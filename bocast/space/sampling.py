"""Uniform sampling of a space's feasible set by rejection (:meth:`Space.sample`):
batches of structural draws, each sized from the acceptance rate so far, until enough feasible
rows are found. :func:`feasible_draws` gives those batches without building the rows, so a caller
that needs only some of them (BO's pool, :class:`~bocast.space.candidates.SpaceCandidates`) builds
only those, with the random stream consumed exactly as :func:`sample` consumes it (issue 41:
building and keying rows that were thrown away was a tenth of a BO ask); :func:`keys` keys rows
knob by knob."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from bocast.space.knobs import Config, Knob, SpaceError

Draws = tuple[dict[str, np.ndarray], np.ndarray]


class Space(Protocol):
    """What sampling uses of a :class:`bocast.space.space.Space` (which imports this module)."""

    @property
    def knobs(self) -> Sequence[Knob]: ...

    def _draw_feasible(self, n: int, rng: np.random.Generator) -> Draws: ...

    def _rows(self, cols: Mapping[str, np.ndarray], index: Any) -> list[Config]: ...

    @staticmethod
    def key(config: Mapping[str, Any]) -> str: ...


def _batches(space: Space, n: int, rng: np.random.Generator, max_draws: int
             ) -> Generator[Draws, int, None]:
    """(columns, indices of the feasible rows in shuffled order) of batch after batch, while the
    caller, sent after each one, still wants rows (it sends how many)."""
    drawn, accepted, left = 0, 0, n
    while left > 0:
        rate = (accepted + 1) / (drawn + 2)
        batch = int(min(max(1024, 1.2 * left / rate), 500_000))
        cols, idx = space._draw_feasible(batch, rng)
        drawn += batch
        accepted += len(idx)
        left = yield cols, idx
        if drawn > max_draws and left > 0:
            raise SpaceError(f"only {n - left} feasible configurations after {drawn} draws")


def sample(space: Space, n: int, rng: np.random.Generator, *, unique: bool,
           max_draws: int) -> list[Config]:
    """:meth:`Space.sample`."""
    out: list[Config] = []
    seen: set[str] = set()
    batches = _batches(space, n, rng, max_draws)
    try:
        cols, idx = next(batches)
        while True:
            rows = space._rows(cols, idx[: (n - len(out)) if not unique else None])
            if unique:  # keys made column by column (:func:`keys`: Space.key's texts)
                fresh = []
                for cfg, key in zip(rows, keys(space, rows)):
                    if key not in seen:
                        seen.add(key)
                        fresh.append(cfg)
                rows = fresh
            out += rows[: n - len(out)]
            cols, idx = batches.send(n - len(out))
    except StopIteration:
        return out


def feasible_draws(space: Space, n: int, rng: np.random.Generator, *,
                   max_draws: int = 50_000_000) -> list[dict[str, np.ndarray]]:
    """The rows of ``sample(space, n, rng)`` (not unique) as knob columns, batch by batch,
    unbuilt: :func:`bocast.space.structural.rows` of them in turn is that sample, and ``rng`` is
    left where it leaves it. Only the rows taken are kept (a batch's draws are 100x more)."""
    out: list[dict[str, np.ndarray]] = []
    batches = _batches(space, n, rng, max_draws)
    try:
        cols, idx = next(batches)
        while True:
            take = idx[:n]
            out.append({k.name: cols[k.name][take] for k in space.knobs})
            n -= len(take)
            cols, idx = batches.send(n)
    except StopIteration:
        return out


#: value types whose equal values have one JSON text (not float: 0.0 and -0.0; not a mix of bool
#: and int in one column: True == 1)
_ONE_TEXT = (int, str, tuple, type(None))


def keys(space: Space, rows: Sequence[Mapping]) -> list[str]:
    """:meth:`Space.key` of rows as :func:`bocast.space.structural.rows` makes them (the same
    knob names, each knob's values from one numpy column: ints, strings, tuples of ints, or
    None): the same text, written knob by knob with the JSON of each distinct value made once,
    instead of one ``json.dumps`` a row. A column of any other kind is keyed row by row."""
    if not rows:
        return []
    texts = []
    for name in sorted(rows[0]):
        col = [r[name] for r in rows]
        if set(map(type, col)) <= set(_ONE_TEXT) and len(set(map(type, col)) - {type(None)}) <= 1:
            memo = {v: space.key({name: v})[1:-1] for v in set(col)}
            texts.append([memo[v] for v in col])
        else:
            return [space.key(r) for r in rows]
    return ["{" + ",".join(parts) + "}" for parts in zip(*texts)]
