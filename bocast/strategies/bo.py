"""Bayesian optimisation: GP surrogate of log(TFLOPS), feasibility classifier, batch acquisition
over a discrete candidate pool.

Each round: fit the surrogate on the successful measurements and, once failures have been seen,
the classifier on all attempted ones; build a pool of fresh uniform samples plus the feasible
neighbours of the best configurations so far (never anything already proposed); score it with
the chosen acquisition (``logei``, ``becbo`` or ``ts``, see :mod:`bocast.bo.acquisition`); return
``q`` picks. The first ``n_init`` proposals are uniform samples.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from bocast.bo import acquisition as acq
from bocast.bo.feasibility import make_classifier
from bocast.bo.surrogate import Surrogate
from bocast.measure.status import Status
from bocast.schema import Field, Section
from bocast.space import Space
from bocast.strategies.base import Strategy, register

ACQUISITIONS = ("logei", "becbo", "ts")


@register
class BayesOpt(Strategy):
    name = "bo"
    options = Section((
        Field("acquisition", str, "logei", choices=ACQUISITIONS),
        Field("n_init", int, 32, min=1, max=1_000_000, doc="uniform samples before the model"),
        Field("pool_size", int, 4096, min=1, max=1_000_000,
              doc="fresh samples scored per round"),
        Field("incumbents", int, 16, min=0, max=100_000,
              doc="best configurations whose neighbours join the pool"),
        Field("classifier", str, "gp", choices=("gp", "ensemble")),
        Field("fit_points", int, 384, min=3, max=100_000,
              doc="observations used to fit hyperparameters"),
        Field("fit_maxiter", int, 75, min=1, max=100_000),
        Field("boundary_share", float, 0.25, min=0, max=1,
              doc="becbo: share of the batch on the feasibility boundary"),
        Field("beta0", float, 2.0, min=0, max=1000,
              doc="becbo: initial width of the optimistic feasibility bound"),
        # torch threads for a round, at most: its matrices (the fit on fit_points observations,
        # then up to 1000 observations x a pool of ~4500) are too small for the 16 threads of
        # the H100 host, which were slower than 4 (experiments/bench_proposal.py)
        Field("threads", int, 4, min=1, max=1024),
    ), noun="option")

    def __init__(self, candidates, *, seed=0, **hyper):
        super().__init__(candidates, seed=seed, **hyper)
        self.surrogate = Surrogate(candidates.bounds(), fit_points=self.hyper["fit_points"],
                                   maxiter=self.hyper["fit_maxiter"], seed=seed)
        self.last_round: dict = {}
        self.classifier = None  # the last round's feasibility classifier (for diagnostics)

    def _ask(self, n):
        with _torch_threads(self.hyper["threads"]):
            return self._round(n)

    def _round(self, n):
        ok = self.measured_ok()
        if len(self.history) < self.hyper["n_init"] or len(ok) < 3:
            return self.fresh_samples(n)
        pool = self._pool()
        if not pool:
            return []
        x_ok = self.candidates.encode([self.config_of(r) for r in ok])
        y_ok = np.log([r.tflops for r in ok])
        self.surrogate.fit(x_ok, y_ok)
        attempted = [r for r in self.history if r.status is not Status.INVALID]
        labels = np.array([1.0 if r.ok else 0.0 for r in attempted])
        clf = make_classifier(self.hyper["classifier"], labels, seed=self.seed)
        if labels.min() != labels.max():
            x_att = self.surrogate.scale(self.candidates.encode([self.config_of(r) for r in attempted]))
            clf.fit(x_att, torch.as_tensor(labels))
        self.classifier = clf
        x_pool = self.candidates.encode(pool)
        pred = self.surrogate.predict(x_pool)
        xs = self.surrogate.scale(x_pool)
        p_feas, _ = clf.predict(xs)
        best = float(y_ok.max())
        gen = torch.Generator().manual_seed(int(self.rng.integers(2**62)))
        kind = self.hyper["acquisition"]
        if kind == "logei":
            picks = acq.constrained_logei(self.surrogate, pred, p_feas, best, n)
        elif kind == "becbo":
            n_fail = int((labels == 0).sum())
            beta = self.hyper["beta0"] / math.sqrt(1 + n_fail / 10)
            picks = acq.becbo(self.surrogate, pred, p_feas, clf.optimistic(xs, beta), best, n,
                              self.hyper["boundary_share"])
        else:
            picks = acq.thompson(self.surrogate, x_pool, pred, clf, n, gen)
        self.last_round = {"pool": len(pool), "observations": len(ok), "best_log_tflops": best,
                           "failures_seen": int((labels == 0).sum())}
        return [pool[i] for i in picks]

    def _pool(self) -> list:
        """Fresh uniform samples plus neighbours of the incumbents, all unproposed."""
        pool = self.fresh_samples(self.hyper["pool_size"])
        seen = set(self.proposed) | {Space.key(c) for c in pool}
        best = sorted(self.measured_ok(), key=lambda r: r.tflops, reverse=True)
        for r in best[: self.hyper["incumbents"]]:
            for nb in self.candidates.neighbours(self.config_of(r)):
                key = Space.key(nb)
                if key not in seen:
                    seen.add(key)
                    pool.append(nb)
        return pool


@contextlib.contextmanager
def _torch_threads(cap: int):
    """Lower torch's intra-op threads to ``cap`` (never raise them) for the block."""
    before = torch.get_num_threads()
    torch.set_num_threads(min(cap, before))
    try:
        yield
    finally:
        torch.set_num_threads(before)
