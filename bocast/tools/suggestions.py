"""Zero-measurement suggestions from the records library (issue 26): ``bocast suggest``.

A new shape's best configurations as the library's records of the same schedule predict them, on a
machine without a GPU, or as the first batch on one. The sources are those ``warm_start: auto``
would pick (:func:`bocast.run.warm_sources.choose`); their model is the warm start's source model
(:class:`bocast.strategies.bo.transfer.SourceModel`: a GP on the sources' log TFLOPS, z-scored
within each source workload, in the target's model inputs). It scores a uniform sample of the
target's feasible configurations plus the best source rows the target holds and their one-knob
neighbours, and chooses ``k`` of them: the best source rows and the model's highest means in turn.
Why both: held out, the source rows' best were the better top-1 on four of five exhaustive tables
and the model's the better top-8 on conv2d and bmm, the operators no source is of
(experiments/results/suggest_quality.md, measured when the first of the ``k`` was a source row). The
``k`` are listed by the model's mean, highest first, so in the order of the TFLOPS shown beside
them; ``why`` says which side chose each.

What it predicts is a *rank*: a z-score, the kernel's standing among the sources' kernels. The
TFLOPS beside it are that z-score read on the nearest source's distribution (what the kernel
would get if the target ran like that source; a mean past the source's best reads as its best,
so a band whose both ends are past it is one value: :attr:`Suggestion.past_best`): a first guess
with a band (the GP's standard deviation), not a measurement; read off another operator's or
shape's table (:attr:`Suggestions.read_off`), they can be far from the target's own. How good
the ranks are on held-out tables is measured by ``lab/suggest_quality.py`` (results in
``experiments/results/suggest_quality.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bocast.records import library
from bocast.run import warm_sources
from bocast.space.candidates import Candidates, SpaceCandidates
from bocast.space.features import Features
from bocast.space.knobs import Config
from bocast.space.space import Space
from bocast.strategies.bo.transfer import best_rows, interleave, source_model

#: uniform samples of the target's space scored besides the best source rows
POOL = 4096
#: best source rows (each with its neighbours) added to the scored pool
TOP_ROWS = 64


@dataclass
class Suggestion:
    """One suggested configuration: the source model's mean and standard deviation (z-score
    units), and TFLOPS read on the nearest source (``tflops``, with a one-sd band ``low`` -
    ``high``)."""

    config: Config
    z: float
    z_sd: float
    tflops: float
    low: float
    high: float
    why: str  # "source row": one of the best source rows; "model": the source model's pick
    # (a model pick may also be a source row further down)
    #: the whole band (z - sd) is past the best of the source read on: ``low`` = ``high`` =
    #: that best, which is all the reading can say (it does not extrapolate past a table)
    past_best: bool = False


@dataclass
class Suggestions:
    workload: dict[str, Any]
    sources: list[str]  # as a run's identity names them (bocast.records.library.portable)
    scale: str  # the source whose distribution the TFLOPS are read on
    items: list[Suggestion]  # the model's mean (so the TFLOPS) highest first
    notes: list[str] = field(default_factory=list)
    scale_workload: dict[str, Any] = field(default_factory=dict)  # the workload of ``scale``

    @property
    def read_off(self) -> str | None:
        """The other shape (and operator) the TFLOPS are read off, as ``4096^3`` or ``gemm
        2048x8192x1024``; None where the source read on is of the target's operator and shape."""
        src, dst = self.scale_workload, self.workload
        if not src or (src.get("op"), list(src.get("shape", []))) == (
                dst.get("op"), list(dst.get("shape", []))):
            return None
        shape = [int(x) for x in src.get("shape", [])]
        text = f"{shape[0]}^{len(shape)}" if len(set(shape)) == 1 and len(shape) > 1 else \
            "x".join(map(str, shape))
        return text if src.get("op") == dst.get("op") else f"{src.get('op')} {text}"

    def summary(self) -> dict[str, Any]:
        return {"workload": self.workload, "sources": self.sources, "tflops_read_on": self.scale,
                "tflops_read_off_shape": self.read_off,
                "suggestions": [{"config": s.config, "z": round(s.z, 4),
                                 "z_sd": round(s.z_sd, 4), "tflops": round(s.tflops, 2),
                                 "tflops_band": [round(s.low, 2), round(s.high, 2)],
                                 "past_source_best": s.past_best, "why": s.why}
                                for s in self.items]}


def suggest(target_op, *, k: int = 8, gpu: str | None = None, records: str | None = None,
            candidates: Candidates | None = None, exclude: Sequence[str] = (),
            other_workloads: bool = False, shipped_only: bool = False,
            seed: int = 0) -> Suggestions:
    """The ``k`` configurations of ``target_op`` the library's records rank best.

    ``gpu``: only records of this GPU model (None: every GPU's, named in the notes); ``records``:
    the library's folder; ``candidates``: the configurations to choose among (a replay table's;
    default the whole feasible space); ``exclude``, ``other_workloads``, ``shipped_only``: as
    :func:`bocast.run.warm_sources.choose` (held-out evaluation: the table's own dataset, no record
    of its workload). Raises :class:`bocast.records.library.LibraryError` when the library holds no
    record of the same schedule."""
    if not (isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= 1000):
        raise library.LibraryError(f"k: expected an integer from 1 to 1000, got {k!r}")
    choice = warm_sources.choose(target_op, gpu=gpu, records=records, exclude=exclude,
                            other_workloads=other_workloads, shipped_only=shipped_only)
    if not choice.sources:
        raise library.LibraryError(
            f"no records of the same schedule as {target_op.name} "
            f"{list(target_op.workload['shape'])} (space {target_op.workload.get('space', 'v1')})"
            + (f" on {gpu}" if gpu else "") + " in the records library "
            f"({library.directory(records)} and the shipped datasets): nothing to suggest "
            "from; `bocast tune` measures instead")
    cands = candidates if candidates is not None else SpaceCandidates(target_op.space,
                                                                      target_op.workload)
    features = Features(cands, "knobs")
    model = source_model(choice.sources, target_op, features, points=1024, maxiter=75)
    pool, n_rows = _pool(cands, model, seed)
    pred = model.surrogate.predict(features(pool)[:, model.columns])
    mean = pred.mean.numpy().astype(float)
    sd = np.sqrt(pred.var.numpy().astype(float))
    order = interleave([(i, "source row") for i in range(min(n_rows, k))],
                       [(int(i), "model") for i in np.argsort(-mean, kind="stable")[:k]],
                       key=lambda t: t[0])[:k]
    nearest = model.sources[0]  # the closest workload: choose ranks them
    log_mu, log_sd = float(nearest.log_tflops.mean()), float(nearest.log_tflops.std() or 1.0)
    z_max = (float(nearest.log_tflops.max()) - log_mu) / log_sd

    def tflops(z: float) -> float:  # a GP mean past the source's best reads as its best
        return math.exp(log_mu + min(float(z), z_max) * log_sd)

    # chosen in turn, listed by the model's mean: the order of the TFLOPS shown (a stable sort:
    # the cap at the source's best makes ties)
    order.sort(key=lambda t: -mean[t[0]])
    items = [Suggestion(pool[i], float(mean[i]), float(sd[i]), tflops(mean[i]),
                        tflops(mean[i] - sd[i]), tflops(mean[i] + sd[i]), why,
                        past_best=bool(mean[i] - sd[i] >= z_max))
             for i, why in order]
    return Suggestions(dict(target_op.workload), [library.portable(p) for p in choice.sources],
                       library.portable(choice.sources[0]), items, list(choice.notes),
                       dict(nearest.workload))


def _pool(cands: Candidates, model, seed: int) -> tuple[list[Config], int]:
    """(a pool: the best source rows the candidates hold, best first, then their one-knob
    neighbours and a uniform sample of the candidates, each once; how many source rows lead
    it)."""
    rng = np.random.default_rng(seed)
    pool = best_rows(model.ranked, cands, set(), TOP_ROWS)
    seen = {Space.key(c) for c in pool}
    n_rows = len(pool)
    for c in pool[:n_rows]:
        for nb in cands.neighbours(c):
            if Space.key(nb) not in seen:
                seen.add(Space.key(nb))
                pool.append(nb)
    pool += cands.sample(POOL, rng, seen)
    return pool, n_rows
