"""Warm start from other shapes' records (issue 11, "transfer").

A *source* is a recorded dataset (prefix) or a record store of the target's operator on another (or
the same) shape, or of another operator that runs the same Tensor Core matmul schedule; reading it,
checking it against the target and carrying its configurations into the target's space
(**translation**) is :mod:`bocast.strategies.bo.sources`'. Its successful rows, translated, become
one source model:

- **Model.** One GP (:class:`~bocast.strategies.bo.surrogate.Surrogate`, fixed seed, the same for
  every run) on the translated rows in the target's model inputs, y = log TFLOPS z-scored per source
  workload (shapes run at different speeds; only the ranking transfers). Columns that no source
  varies are left out of it: a source that never moved a knob says nothing about it, and a fixed
  value that differs from the target's (raster 16 at 4096^3, 1 at 1024^3) would otherwise read as
  distance. More than ``points`` rows: a fixed-seed uniform subset.
- **Use.** The target GP gets the source model's mean as one extra input column (the target's
  data decide through its lengthscale how far to trust it), and the first batch is chosen by LogEI
  on the source model over the target's candidates
  (:class:`~bocast.strategies.bo.strategy.BayesOpt`). Heron's CGA (``cga``) has the same option
  without a model: its first population is the best source rows (:func:`ranked_configs`,
  :func:`best_rows`), so a comparison can give both strategies the same records. BO's
  ``warm_start_top: k`` puts the same k rows first in its first batch.

Source rows never become the target's trials: they are not told to the strategy, so they
neither count against the budget nor keep a configuration from being proposed and measured.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bocast.errors import InputError
from bocast.records.datasets import dataset_csv, locate
from bocast.schema import Field
from bocast.space.space import Config, Space
from bocast.strategies.bo.sources import (
    Source,
    WarmStartError,
    cached,
    incompatibility,
    load_sources,
)

#: WarmStartError, incompatibility and load_sources are bocast.strategies.bo.sources', re-exported
#: here
__all__ = ["AUTO", "NONE", "WARM_START_OPTION", "SourceModel", "WarmStartError", "best_rows",
           "incompatibility", "interleave", "load_sources", "ranked_configs", "source_model",
           "source_paths"]

#: the choices of ``warm_start`` besides a list of sources
AUTO, NONE = "auto", "none"


class _WarmStartField(Field):
    """``warm_start``: ``auto``, ``none`` or a list of sources (checked as paths where used)."""

    def check(self, value, where="", error=InputError):
        if value in (AUTO, NONE):
            return value
        if not isinstance(value, list):
            raise error(f"{where}{self.name}: expected a list, got {value!r} (or '{AUTO}': "
                        f"the records library's choice, or '{NONE}': a cold start)")
        return value

    def expected(self, cli=False, *, storage_limits=True):
        return f"'{AUTO}', '{NONE}' or a list of sources"


#: the option of every strategy that can start from other records (bo, cga)
WARM_START_OPTION = _WarmStartField(
    "warm_start", object, AUTO,
    doc="'auto': sources chosen from the records library by `bocast tune` and bocast.tune "
        "(bocast.records.library; a strategy made directly, a comparison and a study start cold); "
        "'none': a cold start; or a list of dataset prefixes or record stores of the operator "
        "on other shapes (or of another operator on the same matmul schedule)")


def source_paths(value) -> list[str]:
    """The sources a strategy uses for its ``warm_start`` option: the list, or none for
    ``none`` and for an ``auto`` nobody resolved (:func:`bocast.run.warm_sources.resolve` does)."""
    return list(value) if isinstance(value, list) else []

#: the fitted source models and source rankings of this process, by what they are made of
#: (every seed of a comparison shares one); small: a comparison has one or two
_CACHE: dict[tuple, Any] = {}
_CACHE_MAX = 4


class SourceModel:
    """The sources' GP in the target's model inputs (see the module docstring)."""

    def __init__(self, sources: Sequence[Source], features, *, points: int, maxiter: int):
        from bocast.strategies.bo.surrogate import Surrogate

        self.sources = list(sources)
        self.ranked = _ranked(sources)  # every row, best first (before the subset below)
        configs = [c for s in sources for c in s.configs]
        y = np.concatenate([_zscores(sources, s) for s in sources])
        x = features(configs)
        if len(configs) > points:  # fixed seed: the same model in every run
            keep = np.sort(np.random.default_rng(0).permutation(len(configs))[:points])
            x, y, configs = x[keep], y[keep], [configs[i] for i in keep]
        self.configs, self.y = configs, y
        self.columns = np.flatnonzero(x.max(0) > x.min(0))
        b = features.bounds()
        lo = np.minimum(b[0], x.min(0))[self.columns]
        hi = np.maximum(b[1], x.max(0))[self.columns]
        self.surrogate = Surrogate(np.stack([lo, hi]), fit_points=384, maxiter=maxiter, seed=0)
        self.surrogate.fit(x[:, self.columns], y)
        self.best = float(y.max())
        self.bounds = mean_bounds(self.mean(features(features.candidates.reference_configs())),
                                  self.mean(x))

    def mean(self, x: np.ndarray) -> np.ndarray:
        """(m,) source mean at the target's model inputs ``x`` (m, d), z-score units."""
        return self.surrogate.mean(x[:, self.columns]).numpy()

    def column(self, x: np.ndarray) -> np.ndarray:
        """(m,) the target GP's extra input at ``x``: :meth:`mean`, kept within
        :attr:`bounds` (:func:`mean_bounds`; a mean beyond them, past the margin, is moved
        to the nearest bound)."""
        return np.clip(self.mean(x), self.bounds[0], self.bounds[1])

    def top(self, n: int) -> list[Config]:
        """The ``n`` best source rows (translated), best first."""
        return [self.configs[i] for i in np.argsort(-self.y, kind="stable")[:n]]


#: margin added to each side of the source column's bounds, as a share of their span
MEAN_MARGIN = 0.1


def mean_bounds(sampled: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Bounds of the source model's mean as the target GP's extra input, for its scaling to
    [0, 1]: the range over a fixed sample of the target's candidates (``sampled``) and the
    source rows themselves (``rows``: the means at their own translated inputs), widened by
    :data:`MEAN_MARGIN` of that range on each side.

    The sample alone was not enough: the warm start measures first what the source model rates
    best, and a 2048-point uniform sample of a live space rarely holds those, so the first
    batch's means lay above the sample's maximum and BoTorch warned that the inputs were not
    in the unit cube in every warm-started live run (issue 40). The mean is no bounded
    function a sample can pin: translated into another shape's space, configurations unlike
    any source row extrapolate above the best row (GEMM 2048x4096x4096 from 4096^3 v3: rows
    up to 2.15, a 20,000-point sample up to 2.66, the first batch 2.68, the 2048 sample's
    maximum 2.57). Measured on four warm starts, the first batch went at most 2.1% of the span
    beyond sample and rows (tests/bo: the unit-cube check); the margin covers that, and
    :meth:`SourceModel.column` clips what goes further."""
    lo = float(min(sampled.min(), rows.min()))
    hi = float(max(sampled.max(), rows.max()))
    if not hi > lo:
        return np.array([lo, lo + 1.0])
    pad = MEAN_MARGIN * (hi - lo)
    return np.array([lo - pad, hi + pad])


def _zscores(sources: Sequence[Source], s: Source) -> np.ndarray:
    """``s``'s log TFLOPS z-scored over every source of its workload."""
    same = np.concatenate([o.log_tflops for o in sources if o.workload == s.workload])
    sd = float(same.std()) if len(same) > 1 and same.std() > 0 else 1.0
    return (s.log_tflops - float(same.mean())) / sd


def source_model(paths: Sequence[str], target_op, features, *, points: int,
                 maxiter: int) -> SourceModel:
    """The source model of ``paths`` for ``target_op`` (built once per process and reused: it
    depends only on the files, the target and the model inputs, never on a run's seed)."""
    # the model's input bounds and its extra column's come from the candidates
    cands = hashlib.sha1(features.bounds().tobytes())
    for c in features.candidates.reference_configs():
        cands.update(Space.key(c).encode())
    key = (_files_key(paths, target_op), features.kind, cands.hexdigest(), points, maxiter)
    return _cached(key, lambda: SourceModel(load_sources(paths, target_op), features,
                                            points=points, maxiter=maxiter))


def _files_key(paths: Sequence[str], target_op) -> tuple:
    return (tuple((os.path.abspath(locate(p)), *_stamp(p)) for p in paths),
            json.dumps(target_op.workload, sort_keys=True))


def _cached(key: tuple, make) -> Any:
    return cached(_CACHE, key, make, _CACHE_MAX)


def ranked_configs(paths: Sequence[str], target_op) -> list[Config]:
    """Every source row translated into ``target_op``'s space, best first by its z-score within
    its workload, each configuration once: the model-free use of the sources (read once per
    process, as :func:`source_model`)."""
    return _cached(("ranked", *_files_key(paths, target_op)),
                   lambda: _ranked(load_sources(paths, target_op)))


def _ranked(sources: Sequence[Source]) -> list[Config]:
    """Every source row, best first: the source workloads in turn, in the order given (``auto``
    gives the nearest first), each's rows by log TFLOPS, each configuration once. In turn, not
    pooled by z-score: pooled, the most skewed table's best rows come first however far its
    shape is (a 1024^3 table's small tiles stand further above its mean than a 4096^3 table's
    best do above its): live on the H200, all eight source rows of the first batch were
    1024^3's for GEMM 2048x6144x4096 and bmm 32x1024x1024x128
    (experiments/results/warm_default_live_h200.md)."""
    groups: dict[str, list[tuple[float, Config]]] = {}
    for s in sources:
        rows = groups.setdefault(json.dumps(s.workload, sort_keys=True, default=str), [])
        rows.extend(zip(s.log_tflops.tolist(), s.configs))
    queues = [[c for _, c in sorted(rows, key=lambda r: -r[0])] for rows in groups.values()]
    out, seen = [], set()
    for turn in itertools.zip_longest(*queues):
        for c in turn:
            if c is not None and Space.key(c) not in seen:
                seen.add(Space.key(c))
                out.append(c)
    return out


def best_rows(ranked: Sequence[Config], candidates, exclude: set[str], n: int) -> list[Config]:
    """The ``n`` first of ``ranked`` not in ``exclude``, each as the closest configuration the
    candidates hold (a table's fixed knobs, e.g. its raster, replace the source's; live, an
    infeasible row is skipped)."""
    out: list[Config] = []
    seen = set(exclude)
    for c in ranked:
        if len(out) >= n:
            break
        p = candidates.project(c)
        if p is not None and Space.key(p) not in seen:
            seen.add(Space.key(p))
            out.append(p)
    return out


def interleave(a: Sequence, b: Sequence, key: Callable[[Any], Any] = lambda x: x) -> list:
    """``a``'s and ``b``'s items in turn, ``a`` first, each (by ``key``) once: a turn takes its
    side's next item not taken yet; the rest of the longer side at the end. A warm start's first
    batch mixes the best source rows with the source model's picks this way: on held-out tables
    neither alone was the better first batch everywhere, and in turn the batch is never far
    behind the better of the two (experiments/results/loto_b16.md)."""
    out: list = []
    seen: set = set()
    sides = [iter(a), iter(b)]
    while sides:
        side = sides.pop(0)
        for item in side:
            if key(item) not in seen:
                seen.add(key(item))
                out.append(item)
                sides.append(side)  # its next turn comes after the other side's
                break
    return out


def _stamp(path: str) -> tuple:
    path = locate(path)
    files = [path] if path.endswith(".db") else [path + ".json", dataset_csv(path)]
    return tuple((os.path.getmtime(f), os.path.getsize(f)) if os.path.exists(f) else None
                 for f in files)
