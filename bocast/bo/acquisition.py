"""Batch acquisitions over a finite pool of candidate configurations.

Every acquisition picks ``q`` distinct rows of the pool (never a continuous relaxation: the
pool holds only configurations the space contains). Shapes: the pool has ``m`` rows; ``pred``
carries ``(m,)`` mean and latent variance of log(TFLOPS); feasibility tensors are ``(m,)``.

- ``logei``: constrained LogEI, log EI(x) + log P(feasible | x); the batch is built greedily with
  a Kriging believer (after each pick, the GP is conditioned on its predicted mean, which leaves
  the mean unchanged and shrinks the variance around the pick).
- ``becbo``: BE-CBO adapted to a discrete pool: EI over the candidates whose *optimistic*
  feasibility (mean + beta * spread, beta shrinking as evidence grows) reaches 1/2, and a share
  of the batch spent on the learned boundary (feasibility near 1/2, weighted by EI); when fewer
  rows are eligible than the batch has slots, the rest go to the most optimistically feasible.
- ``qlogei``: BoTorch's qLogExpectedImprovement (Monte Carlo, quasi-random normal samples),
  batch built greedily as BoTorch's ``optimize_acqf_discrete`` does: each pick maximises the
  joint qLogEI of itself with the rows already picked (``X_pending``), plus log P(feasible).
  The joint improvement replaces the Kriging believer's conditioning on predicted means.
- ``ts``: constrained Thompson sampling (SCBO style): per batch slot, one joint posterior sample
  of the objective and one sample of feasibility; the best sampled value among the rows sampled
  feasible wins (if none is, the most probably feasible row).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from bocast.bo.surrogate import Prediction, Surrogate, log_ei


def _next_pick(score: torch.Tensor, picked: list[int]) -> int | None:
    """The best-scored row not picked yet; None when only rows scored -inf are left (argmax
    would return one of them, or a row already picked). ``score`` is modified."""
    if picked:
        score[picked] = -torch.inf
    j = int(torch.argmax(score))
    return None if score[j] == -torch.inf else j


def kriging_believer(model: Surrogate, pred: Prediction, score, q: int) -> list[int]:
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


def constrained_logei(model: Surrogate, pred: Prediction, p_feasible: torch.Tensor,
                      best: float, q: int) -> list[int]:
    # LogEI spans hundreds of orders of magnitude late in a run; a floor of 1e-12 on P(feasible)
    # let a row the classifier rules out (p = 0) outscore feasible rows 1e-12 times less
    # promising (tests/bo/test_pieces.py). 1e-300 keeps log finite and the ranking honest.
    log_pf = torch.log(p_feasible.clamp_min(1e-300))
    return kriging_believer(model, pred, lambda mu, sd: log_ei(mu, sd, best) + log_pf, q)


def becbo(model: Surrogate, pred: Prediction, p_feasible: torch.Tensor,
          p_optimistic: torch.Tensor, best: float, q: int, boundary_share: float) -> list[int]:
    eligible = p_optimistic >= 0.5
    if not bool(eligible.any()):
        eligible = p_optimistic >= p_optimistic.max()
    mask = torch.where(eligible, 0.0, -torch.inf).to(pred.mean)
    n_boundary = int(round(boundary_share * q)) if bool((p_feasible < 0.95).any()) else 0
    picks = kriging_believer(model, pred, lambda mu, sd: log_ei(mu, sd, best) + mask,
                             q - n_boundary)
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


def thompson(model: Surrogate, x_pool: np.ndarray, pred: Prediction, classifier, q: int,
             generator: torch.Generator, screen: int = 768) -> list[int]:
    """Joint samples over a screened subset (top rows by an optimistic bound, plus random rows),
    which keeps the joint covariance small enough to factor each round."""
    m = len(x_pool)
    ucb = pred.mean + 3 * pred.var.sqrt()
    top = torch.argsort(ucb, descending=True)[: screen]
    rest = torch.tensor(sorted(set(range(m)) - set(top.tolist())), dtype=torch.long)
    if len(rest):
        rest = rest[torch.randperm(len(rest), generator=generator)[: screen // 4]]
    sub = torch.cat([top, rest])
    xs = torch.as_tensor(x_pool, dtype=torch.float64)[sub]
    f = model.joint_samples(x_pool[sub.numpy()], q, generator)            # (q, s)
    feas = classifier.sample(model.scale(xs), q, generator)               # (q, s)
    p, _ = classifier.predict(model.scale(xs))
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


def q_log_ei(model: Surrogate, xs: torch.Tensor, log_pf: torch.Tensor, best: float, q: int,
             *, seed: int, samples: int = 256, chunk: int = 1024,
             tau_max: float = 1e-4) -> list[int]:
    """``q`` rows of the pool ``xs`` (``(m, d)``, scaled model inputs), each the argmax of
    qLogEI(row + the picks so far as ``X_pending``) + ``log_pf`` (``(m,)``); ``best`` in y
    units. Rows scored -inf are never picked. ``tau_max``: the temperature of qLogEI's smooth
    max over the batch, in y units; BoTorch's default 0.01 is 1% of a kernel's speed on our y
    scales, and its smoothing bonus (about tau log 2 for two equal values) made a near-copy of
    a pending row outscore distinct rows (tests/bo/test_pieces.py)."""
    from botorch.acquisition.logei import qLogExpectedImprovement
    from botorch.sampling import SobolQMCNormalSampler

    sampler = SobolQMCNormalSampler(torch.Size([samples]), seed=seed)
    acq = qLogExpectedImprovement(model.botorch_model(), best_f=best, sampler=sampler,
                                  tau_max=tau_max)
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
