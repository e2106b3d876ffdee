"""Feasibility classifiers for the unknown constraints (configurations that satisfy every known
constraint and still fail to build, launch, or compute the right result).

Labels: 1 for ``ok``, 0 for any attempted failure (``invalid`` rows are excluded: the known
constraints already remove them). Until both labels have been seen there is nothing to learn and
:class:`AlwaysFeasible` answers 1 everywhere.

- :class:`GPClassifier`: a variational GP with a Bernoulli likelihood (GPyTorch), inducing points
  on (a subset of) the training inputs;
- :class:`EnsembleClassifier`: a deep ensemble of small MLPs, as BE-CBO uses; members disagree
  where data is thin, which gives the optimistic bound its width.

Both report, per candidate, the probability of feasibility and an uncertainty, and can draw
samples of the feasibility indicator for Thompson sampling.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch

DTYPE = torch.float64


class Classifier(ABC):
    def fit(self, x: torch.Tensor, labels: torch.Tensor) -> None:
        """x: (n, d) in [0, 1]; labels: (n,) of 0/1."""
        # fits seed torch's global generator (weight initialisation draws from it): in a fork
        # of it, so that the caller's torch random stream is left as it was
        with torch.random.fork_rng(devices=[]):
            self._fit(x, labels)

    @abstractmethod
    def _fit(self, x: torch.Tensor, labels: torch.Tensor) -> None:
        """:meth:`fit`'s work."""

    @abstractmethod
    def predict(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(probability of feasibility, uncertainty in probability units), each (m,)."""

    @abstractmethod
    def sample(self, x: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
        """(n, m) boolean samples of feasibility."""

    def optimistic(self, x: torch.Tensor, beta: float) -> torch.Tensor:
        """An optimistic (upper) bound on the probability of feasibility, ``beta`` wide."""
        p, spread = self.predict(x)
        return (p + beta * spread).clamp(0, 1)


class AlwaysFeasible(Classifier):
    def _fit(self, x, labels):
        pass

    def predict(self, x):
        return torch.ones(len(x), dtype=DTYPE), torch.zeros(len(x), dtype=DTYPE)

    def sample(self, x, n, generator):
        return torch.ones(n, len(x), dtype=torch.bool)


class GPClassifier(Classifier):
    def __init__(self, *, inducing: int = 128, iters: int = 150, seed: int = 0):
        self.inducing, self.iters, self.seed = inducing, iters, seed

    def _fit(self, x, labels):
        import gpytorch

        torch.manual_seed(self.seed + len(x))
        gen = torch.Generator().manual_seed(self.seed + len(x))
        idx = torch.randperm(len(x), generator=gen)[: self.inducing]

        class _VGP(gpytorch.models.ApproximateGP):
            def __init__(self, z):
                dist = gpytorch.variational.CholeskyVariationalDistribution(len(z))
                strat = gpytorch.variational.VariationalStrategy(self, z, dist,
                                                                 learn_inducing_locations=False)
                super().__init__(strat)
                self.mean_module = gpytorch.means.ConstantMean()
                self.covar_module = gpytorch.kernels.ScaleKernel(
                    gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=x.shape[-1]))

            def forward(self, z):
                return gpytorch.distributions.MultivariateNormal(self.mean_module(z),
                                                                 self.covar_module(z))

        self.model = _VGP(x[idx].to(DTYPE)).to(DTYPE)
        self.lik = gpytorch.likelihoods.BernoulliLikelihood()
        self.model.train()
        self.lik.train()
        opt = torch.optim.Adam(list(self.model.parameters()) + list(self.lik.parameters()), lr=0.05)
        mll = gpytorch.mlls.VariationalELBO(self.lik, self.model, num_data=len(x))
        y = labels.to(DTYPE)
        for _ in range(self.iters):
            opt.zero_grad()
            loss = -mll(self.model(x.to(DTYPE)), y)
            loss.backward()
            opt.step()
        self.model.eval()
        self.lik.eval()

    def _latent(self, x):
        with torch.no_grad():
            f = self.model(x.to(DTYPE))
            return f.mean, f.variance.clamp_min(1e-12).sqrt()

    def predict(self, x):
        mu, sd = self._latent(x)
        normal = torch.distributions.Normal(0.0, 1.0)
        # probit link with the latent uncertainty integrated out; spread from +-1 sd
        p = normal.cdf(mu / torch.sqrt(1 + sd * sd))
        spread = (normal.cdf(mu + sd) - normal.cdf(mu - sd)) / 2
        return p, spread

    def optimistic(self, x, beta: float) -> torch.Tensor:
        mu, sd = self._latent(x)
        return torch.distributions.Normal(0.0, 1.0).cdf(mu + beta * sd)

    def sample(self, x, n, generator):
        mu, sd = self._latent(x)
        z = torch.randn(n, len(x), dtype=DTYPE, generator=generator)
        return (mu + sd * z) > 0


class EnsembleClassifier(Classifier):
    def __init__(self, *, members: int = 5, hidden: int = 64, epochs: int = 300, seed: int = 0):
        self.members, self.hidden, self.epochs, self.seed = members, hidden, epochs, seed

    def _fit(self, x, labels):
        self.nets = []
        y = labels.to(torch.float32)
        xf = x.to(torch.float32)
        for m in range(self.members):
            torch.manual_seed(self.seed * 1000 + m + len(x))
            net = torch.nn.Sequential(torch.nn.Linear(x.shape[-1], self.hidden), torch.nn.ReLU(),
                                      torch.nn.Linear(self.hidden, self.hidden), torch.nn.ReLU(),
                                      torch.nn.Linear(self.hidden, 1))
            opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)
            gen = torch.Generator().manual_seed(self.seed * 1000 + m)
            boot = torch.randint(0, len(x), (len(x),), generator=gen)  # bootstrap per member
            for _ in range(self.epochs):
                opt.zero_grad()
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    net(xf[boot]).squeeze(-1), y[boot])
                loss.backward()
                opt.step()
            self.nets.append(net.eval())

    def _probs(self, x):
        with torch.no_grad():
            return torch.stack([torch.sigmoid(n(x.to(torch.float32)).squeeze(-1))
                                for n in self.nets]).to(DTYPE)

    def predict(self, x):
        p = self._probs(x)
        return p.mean(0), p.std(0)

    def optimistic(self, x, beta: float) -> torch.Tensor:
        p = self._probs(x)
        return (p.mean(0) + beta * p.std(0)).clamp(0, 1)

    def sample(self, x, n, generator):
        p = self._probs(x)
        pick = torch.randint(0, len(self.nets), (n,), generator=generator)
        u = torch.rand(n, len(x), dtype=DTYPE, generator=generator)
        return u < p[pick]


def make_classifier(kind: str, labels: np.ndarray, *, seed: int) -> Classifier:
    if labels.min() == labels.max():
        return AlwaysFeasible() if labels.max() == 1 else _NeverSeenFeasible()
    if kind == "gp":
        return GPClassifier(seed=seed)
    if kind == "ensemble":
        return EnsembleClassifier(seed=seed)
    raise ValueError(f"unknown classifier {kind!r}: use gp or ensemble")


class _NeverSeenFeasible(AlwaysFeasible):
    """Every attempt failed so far: no evidence either way; treat all as equally uncertain."""

    def predict(self, x):
        return torch.full((len(x),), 0.5, dtype=DTYPE), torch.full((len(x),), 0.5, dtype=DTYPE)

    def optimistic(self, x, beta):
        return torch.ones(len(x), dtype=DTYPE)
