"""Batch acquisitions over a finite pool of candidate configurations: one registry
(:data:`ACQUISITIONS`, the names of option ``acquisition``), one interface.

Every acquisition is an :class:`Acquisition` whose ``select(ctx, q)`` returns ``q`` distinct
rows of a round's pool, best first (never a continuous relaxation: the pool holds only
configurations the space contains). :class:`Context` is what a round knows. Shapes, as in
BoTorch: the pool has ``m`` rows of ``d`` model inputs, ``x`` and ``xs`` are ``(m, d)``,
``pred`` carries ``(m,)`` mean and latent variance of the GP's y, feasibility tensors are
``(m,)``; ``n`` is the number of observations.

- ``logei``: constrained LogEI, log EI(x) + log P(feasible | x); the batch is built greedily with
  a Kriging believer (after each pick, the GP is conditioned on its predicted mean, which leaves the
  mean unchanged and shrinks the variance around the pick). Its log EI is BoTorch's
  ``LogExpectedImprovement`` on :meth:`~bocast.strategies.bo.surrogate.Surrogate.botorch_model` to
  1e-6 (tests/bo/test_pieces.py), computed from the surrogate's fast posterior.
- ``becbo``: BE-CBO adapted to a discrete pool: EI over the candidates whose *optimistic*
  feasibility (mean + beta * spread, beta shrinking as evidence grows) reaches 1/2, and a share
  of the batch spent on the learned boundary (feasibility near 1/2, weighted by EI); when fewer
  rows are eligible than the batch has slots, the rest go to the most optimistically feasible.
- ``qlogei``: BoTorch's qLogExpectedImprovement (Monte Carlo, quasi-random normal samples) on
  the surrogate's BoTorch model, batch built greedily as BoTorch's ``optimize_acqf_discrete``
  does (each pick maximises the joint qLogEI of itself with the rows already picked, BoTorch's
  ``X_pending``), plus log P(feasible), which ``optimize_acqf_discrete`` has no place for. The
  joint improvement replaces the Kriging believer's conditioning on predicted means.
- ``ts``: constrained Thompson sampling (SCBO style): per batch slot, one joint posterior sample
  of the objective and one sample of feasibility; the best sampled value among the rows sampled
  feasible wins (if none is, the most probably feasible row).
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from bocast.strategies.bo.feasibility import Classifier
from bocast.strategies.bo.surrogate import Prediction, Surrogate, log_ei


@dataclass
class Context:
    """What a round knows when it picks its batch (shapes: see the module docstring)."""

    surrogate: Surrogate           # fitted on the round's n observations
    x: np.ndarray                  # (m, d) the pool in model inputs
    pred: Prediction               # the surrogate's posterior at x: (m,) mean and variance
    classifier: Classifier         # feasibility model (fitted on the attempted rows)
    p_feasible: torch.Tensor       # (m,) the classifier's P(feasible) at x
    best: float                    # the best observed y
    generator: torch.Generator     # the round's random stream
    failures: int = 0              # attempted rows that failed so far

    @property
    def xs(self) -> torch.Tensor:
        """(m, d) the pool scaled to the models' [0, 1] inputs."""
        return self.surrogate.scale(self.x)


class Acquisition(ABC):
    """Picks a batch from a round's pool."""

    #: the strategy options (``bocast.strategies.bo.strategy``) its constructor takes, by name
    options: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def select(self, ctx: Context, q: int) -> list[int]:
        """Up to ``q`` distinct rows of ``ctx``'s pool (indices in ``range(m)``), best first;
        fewer only where the pool has fewer rows it may pick."""


def make(name: str, options: Mapping[str, Any]) -> Acquisition:
    """The acquisition called ``name``, made with the strategy ``options`` it takes."""
    cls = ACQUISITIONS[name]
    return cls(**{k: options[k] for k in cls.options})


def constrained_log_ei(pred: Prediction, p_feasible: torch.Tensor, best: float) -> torch.Tensor:
    """(m,) log EI + log P(feasible): LogEI's score of a pool before any pick (the local search
    climbs it). LogEI spans hundreds of orders of magnitude late in a run; a floor of 1e-12 on
    P(feasible) let a row the classifier rules out (p = 0) outscore feasible rows 1e-12 times
    less promising (tests/bo/test_pieces.py). 1e-300 keeps log finite and the ranking honest."""
    return log_ei(pred.mean, pred.var.sqrt(), best) + _log_pf(p_feasible)


def _log_pf(p_feasible: torch.Tensor) -> torch.Tensor:
    return torch.log(p_feasible.clamp_min(1e-300))


class LogEI(Acquisition):
    def select(self, ctx: Context, q: int) -> list[int]:
        log_pf = _log_pf(ctx.p_feasible)
        return kriging_believer(ctx.surrogate, ctx.pred,
                                lambda mu, sd: log_ei(mu, sd, ctx.best) + log_pf, q)


@dataclass
class BECBO(Acquisition):
    options: ClassVar[tuple[str, ...]] = ("boundary_share", "beta0")
    boundary_share: float = 0.25  # share of the batch on the feasibility boundary
    beta0: float = 2.0  # initial width of the optimistic bound; / sqrt(1 + failures / 10)

    def select(self, ctx: Context, q: int) -> list[int]:
        pred, p_feasible, best = ctx.pred, ctx.p_feasible, ctx.best
        p_optimistic = ctx.classifier.optimistic(ctx.xs,
                                                 self.beta0 / math.sqrt(1 + ctx.failures / 10))
        eligible = p_optimistic >= 0.5
        if not bool(eligible.any()):
            eligible = p_optimistic >= p_optimistic.max()
        mask = torch.where(eligible, 0.0, -torch.inf).to(pred.mean)
        n_boundary = int(round(self.boundary_share * q)) if bool((p_feasible < 0.95).any()) else 0
        picks = kriging_believer(ctx.surrogate, pred,
                                 lambda mu, sd: log_ei(mu, sd, best) + mask, q - n_boundary)
        if n_boundary:
            closeness = torch.log((1 - 2 * (p_feasible - 0.5).abs()).clamp_min(1e-6))
            score = log_ei(pred.mean, pred.var.sqrt(), best) + closeness + mask
            score[picks] = -torch.inf
            extra = torch.argsort(score, descending=True)[:n_boundary]
            picks += [int(i) for i in extra if torch.isfinite(score[i])]
        if len(picks) < q:  # fewer eligible rows than slots: the rest by optimistic feasibility
            rest = p_optimistic.clone()
            rest[picks] = -torch.inf
            order = torch.argsort(rest, descending=True, stable=True)[: q - len(picks)]
            picks += [int(i) for i in order if rest[i] > -torch.inf]
        return picks


@dataclass
class Thompson(Acquisition):
    """Joint samples over a screened subset of the pool (the ``screen`` top rows by an
    optimistic bound, plus ``screen / 4`` random rows), which keeps the joint covariance small
    enough to factor each round."""

    screen: int = 768

    def select(self, ctx: Context, q: int) -> list[int]:
        model, x_pool, pred, generator = ctx.surrogate, ctx.x, ctx.pred, ctx.generator
        m = len(x_pool)
        ucb = pred.mean + 3 * pred.var.sqrt()
        top = torch.argsort(ucb, descending=True)[: self.screen]
        rest = torch.tensor(sorted(set(range(m)) - set(top.tolist())), dtype=torch.long)
        if len(rest):
            rest = rest[torch.randperm(len(rest), generator=generator)[: self.screen // 4]]
        sub = torch.cat([top, rest])
        xs = torch.as_tensor(x_pool, dtype=torch.float64)[sub]
        f = model.joint_samples(x_pool[sub.numpy()], q, generator)               # (q, s)
        feas = ctx.classifier.sample(model.scale(xs), q, generator)              # (q, s)
        p, _ = ctx.classifier.predict(model.scale(xs))
        picked: list[int] = []
        for t in range(q):
            score = torch.where(feas[t], f[t], -torch.inf)
            if not bool(torch.isfinite(score).any()):
                score = p.clone()
            order = torch.argsort(score, descending=True)
            for i in order.tolist():
                row = int(sub[i])
                if row not in picked:
                    picked.append(row)
                    break
        return picked


@dataclass
class QLogEI(Acquisition):
    """``samples`` quasi-random normal samples, seeded from the round's stream; the pool is
    scored ``chunk`` rows at a time. ``tau_max``: the temperature of qLogEI's smooth max over
    the batch, in y units; BoTorch's default 0.01 is 1% of a kernel's speed on our y scales,
    and its smoothing bonus (about tau log 2 for two equal values) made a near-copy of a
    pending row outscore distinct rows (tests/bo/test_pieces.py). Rows scored -inf (P(feasible)
    = 0) are never picked."""

    samples: int = 256
    chunk: int = 1024
    tau_max: float = 1e-4

    def select(self, ctx: Context, q: int) -> list[int]:
        from botorch.acquisition.logei import qLogExpectedImprovement
        from botorch.sampling import SobolQMCNormalSampler

        seed = int(torch.randint(2**31, (1,), generator=ctx.generator))
        sampler = SobolQMCNormalSampler(torch.Size([self.samples]), seed=seed)
        acq = qLogExpectedImprovement(ctx.surrogate.botorch_model(), best_f=ctx.best,
                                      sampler=sampler, tau_max=self.tau_max)
        xs, log_pf, chunk = ctx.xs, _log_pf(ctx.p_feasible), self.chunk
        picked: list[int] = []
        # (linear_operator warns each time it adds jitter to a near-singular joint covariance)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(min(q, len(xs))):
                acq.set_X_pending(xs[picked] if picked else None)
                j = _next_pick(torch.cat([acq(xs[i:i + chunk].unsqueeze(-2))
                                          for i in range(0, len(xs), chunk)]) + log_pf, picked)
                if j is None:
                    break
                picked.append(j)
        return picked


#: option ``acquisition``'s choices (bocast.strategies.bo.strategy.ACQUISITIONS names them,
#: torch-free)
ACQUISITIONS: dict[str, type[Acquisition]] = {
    "logei": LogEI, "becbo": BECBO, "ts": Thompson, "qlogei": QLogEI}


# --- the greedy batch of LogEI and BE-CBO ---------------------------------------------------
def _next_pick(score: torch.Tensor, picked: list[int]) -> int | None:
    """The best-scored row not picked yet; None when only rows scored -inf are left (argmax
    would return one of them, or a row already picked). ``score`` is modified."""
    if picked:
        score[picked] = -torch.inf
    j = int(torch.argmax(score))
    return None if score[j] == -torch.inf else j


def kriging_believer(model: Surrogate, pred: Prediction,
                     score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                     q: int) -> list[int]:
    """Greedy batch: ``score(mean, std) -> (m,)`` is re-evaluated after each pick with the
    variance reduced as if the pick had been observed at its mean. Rows scored -inf are never
    picked: the batch ends early when only those are left."""
    var = pred.var.clone()
    noise = model.noise * model.y_std ** 2
    picked: list[int] = []
    columns: list[tuple[torch.Tensor, torch.Tensor]] = []  # conditioned covariance, denominator
    for _ in range(min(q, len(var))):
        j = _next_pick(score(pred.mean, var.sqrt()), picked)
        if j is None:
            break
        picked.append(j)
        c = model.posterior_cov_with(j)
        for c_i, d_i in columns:  # condition the new column on the earlier fantasies
            c = c - c_i * c_i[j] / d_i
        d = c[j] + noise
        columns.append((c, d))
        var = (var - c * c / d).clamp_min(1e-12)
    return picked
