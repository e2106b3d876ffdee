"""The performance surrogate: a BoTorch GP on encoded configurations, y = log(TFLOPS).

Hyperparameters are fitted with BoTorch (``SingleTaskGP`` + ``fit_gpytorch_mll``) on at most
``fit_points`` observations (a uniform subset once there are more), warm-started from the
previous round (a third of the L-BFGS iterations of a cold fit). A fit that fails (BoTorch's
``ModelFittingError`` after its retries, or a linear-algebra error it lets through: see
:func:`fit_errors`) keeps the hyperparameters it started from (the previous round's, or the
initial ones), counts in :attr:`Surrogate.fit_failures` and warns (:class:`FitWarning`); any
other exception propagates.

Predictions then condition on *all* observations with those hyperparameters, through one
Cholesky factor that this class keeps (the fast path), so that scoring thousands of candidates
and Kriging-believer batch selection cost matrix products rather than repeated GP calls
(``lab/bench_posterior.py``). The GP is BoTorch's all the same: :meth:`botorch_model`
is it as a ``SingleTaskGP`` conditioned on every observation, and :meth:`predict`'s mean and
latent variance are its ``posterior`` (y units) with the noise variance raised by ``jitter``
(1e-8 of standardised y, added when factoring); with ``jitter=0`` they equal its posterior to
1e-9 (tests/bo/test_pieces.py checks both to 1e-6, on random data and a replay fit).

Inputs are scaled to [0, 1] with fixed bounds (from the candidate set), so lengthscales keep
their meaning from one round to the next.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

DTYPE = torch.float64


class FitWarning(UserWarning):
    """A GP fit failed: the surrogate kept the hyperparameters the fit started from."""


def fit_errors() -> tuple[type[BaseException], ...]:
    """What a failed hyperparameter fit raises: BoTorch's ``ModelFittingError`` (every attempt
    of ``fit_gpytorch_mll`` failed), and the numerical errors an attempt raises that BoTorch
    does not catch (a covariance that is not positive definite, NaNs, a failed factorisation,
    NaN gradients). Anything else is a bug and propagates."""
    from botorch.exceptions.errors import ModelFittingError, OptimizationGradientError
    from gpytorch.utils.errors import NanError, NotPSDError  # linear_operator's

    return (ModelFittingError, OptimizationGradientError, NotPSDError, NanError,
            torch.linalg.LinAlgError)


@dataclass
class Prediction:
    mean: torch.Tensor  # (m,) in y units
    var: torch.Tensor   # (m,) latent (noise-free) variance in y units


class Surrogate:
    def __init__(self, bounds: np.ndarray, *, fit_points: int = 384, maxiter: int = 75,
                 seed: int = 0, noise_sd_max: float = 0.0, jitter: float = 1e-8):
        """``bounds``: (2, d), the inputs' lower and upper bounds. ``noise_sd_max`` > 0 caps
        the fitted observation noise at that standard deviation of y (log TFLOPS): a stationary
        kernel that cannot follow a table's steps otherwise explains them as noise (a fitted
        noise of 0.16, i.e. 16%, on the 1024^3 GEMM table, whose repeats spread by under 1%)
        and then predicts its best observations ~15% low. ``jitter``: added to the noise
        variance (standardised y) when factoring; 0 makes :meth:`predict` BoTorch's posterior
        itself, and removing the 1e-8 changed 4 of 36 golden replay trajectories (warm-start
        ones), so it stays the default."""
        lo, hi = np.asarray(bounds[0], float), np.asarray(bounds[1], float)
        self.lo = torch.tensor(lo, dtype=DTYPE)
        self.span = torch.tensor(np.where(hi > lo, hi - lo, 1.0), dtype=DTYPE)
        self.fit_points, self.maxiter, self.seed = fit_points, maxiter, seed
        self.noise_sd_max, self.jitter = noise_sd_max, jitter
        #: fits that failed (kept their starting hyperparameters), and the last fit's error
        self.fit_failures = 0
        self.fit_error: str | None = None
        self._hyper: dict[str, torch.Tensor] | None = None
        self.model: Any = None  # botorch's SingleTaskGP once fitted (botorch is untyped)

    def scale(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        return (torch.as_tensor(x, dtype=DTYPE) - self.lo) / self.span

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """x: (n, d) encoded configurations; y: (n,) log TFLOPS."""
        from botorch.fit import fit_gpytorch_mll
        from gpytorch.mlls import ExactMarginalLogLikelihood

        X = self.scale(x)
        Y = torch.as_tensor(y, dtype=DTYPE).reshape(-1, 1)
        n = len(X)
        gen = torch.Generator().manual_seed(self.seed + n)
        sub = torch.randperm(n, generator=gen)[: self.fit_points] if n > self.fit_points \
            else torch.arange(n)
        model = self._gp(X[sub], Y[sub])
        if self._hyper is not None:
            model.load_state_dict(self._hyper, strict=False)
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        # from a warm start L-BFGS needs few steps; a cold fit gets the full budget
        maxiter = self.maxiter if self._hyper is None else max(10, self.maxiter // 3)
        start = copy.deepcopy(model.state_dict())
        error = None
        with warnings.catch_warnings():  # BoTorch's warnings about its retries
            warnings.simplefilter("ignore")
            try:
                fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": maxiter}})
            except fit_errors() as e:
                error = e
        self.fit_error = None if error is None else f"{type(error).__name__}: {error}"
        if error is not None:  # keep the hyperparameters the fit started from
            model.load_state_dict(start)
            self.fit_failures += 1
            kept = "the previous round's" if self._hyper is not None else "the initial"
            warnings.warn(FitWarning(f"GP fit on {len(sub)} observations failed "
                                     f"({self.fit_error}); kept {kept} hyperparameters"),
                          stacklevel=2)
        model.eval()
        # (not the constraints' bounds: a capped noise's bound follows each round's data)
        self._hyper = {k: v.detach().clone() for k, v in model.state_dict().items()
                       if k.startswith(("covar_module", "likelihood", "mean_module"))
                       and "_constraint." not in k}
        self.model = model
        self._all_data_model = model if len(sub) == n else None
        self.Y = Y
        # condition on all observations with the fitted hyperparameters (standardised y)
        self.y_mean, self.y_std = float(Y.mean()), float(Y.std()) if n > 1 else 1.0
        if not self.y_std > 0:
            self.y_std = 1.0
        self.X = X
        ys = (Y.squeeze(-1) - self.y_mean) / self.y_std
        # the GP was fitted on its subset's standardisation; re-express its scale parameters
        sub_std = float(Y[sub].std()) if len(sub) > 1 else 1.0
        ratio = (sub_std / self.y_std) ** 2 if sub_std > 0 else 1.0
        self.mean_const = (float(model.mean_module.constant.detach()) * sub_std
                           + float(Y[sub].mean()) - self.y_mean) / self.y_std
        self.kernel = model.covar_module
        self.scale2 = ratio  # multiplies the fitted kernel to the all-data standardisation
        self.noise = float(model.likelihood.noise.detach()) * ratio
        with torch.no_grad():
            K = self._k(X, X)
            K.diagonal().add_(self.noise + self.jitter)
            self.L = _cholesky(K)
            self.alpha = torch.cholesky_solve((ys - self.mean_const).unsqueeze(-1), self.L)

    def believe(self, x: np.ndarray) -> None:
        """Condition on the rows of ``x`` (m, d) as if each had been observed at its posterior
        mean, with the fitted hyperparameters and standardisation (a Kriging believer over a
        round's *pending* points: configurations proposed and still being measured). The mean
        stays what it was; the variance shrinks around them, so a round does not pick next to
        what is already under way. Refitting on the next round's observations forgets them."""
        if len(x) == 0:
            return
        Xp = self.scale(x)
        with torch.no_grad():
            _, mean = self._conditioned(Xp)  # standardised y
            X = torch.cat([self.X, Xp])
            ys = torch.cat([(self.Y.squeeze(-1) - self.y_mean) / self.y_std, mean])
            K = self._k(X, X)
            K.diagonal().add_(self.noise + self.jitter)
            self.L = _cholesky(K)
            self.alpha = torch.cholesky_solve((ys - self.mean_const).unsqueeze(-1), self.L)
        self.X = X
        self.Y = torch.cat([self.Y, (self.y_mean + self.y_std * mean).unsqueeze(-1)])
        self._all_data_model = None  # BoTorch's copy (qlogei) conditions on the fantasies too

    def _gp(self, X: torch.Tensor, Y: torch.Tensor) -> Any:
        """An unfitted SingleTaskGP on (X, Y) with the noise cap, y standardised."""
        from botorch.models import SingleTaskGP
        from botorch.models.transforms import Standardize

        likelihood = None
        if self.noise_sd_max > 0:
            from gpytorch.constraints import Interval
            from gpytorch.likelihoods import GaussianLikelihood

            y_std = float(Y.std()) if len(Y) > 1 else 1.0
            cap = max((self.noise_sd_max / (y_std or 1.0)) ** 2, 2e-6)  # standardised y
            likelihood = GaussianLikelihood(noise_constraint=Interval(1e-6, cap))
            likelihood.noise = cap / 2
        return SingleTaskGP(X, Y, likelihood=likelihood, outcome_transform=Standardize(m=1))

    def botorch_model(self) -> Any:
        """The surrogate's GP as a BoTorch ``SingleTaskGP`` conditioned on every observation
        (for BoTorch's acquisitions): the fitted model itself when it was fitted on them all,
        else a copy of it (the same hyperparameters and standardisation of y) conditioned on
        all of them. Its ``posterior`` is :meth:`predict`'s (module docstring)."""
        if self._all_data_model is None:
            model = copy.deepcopy(self.model)
            y, _ = model.outcome_transform(self.Y)  # eval mode: the fitted standardisation
            model.set_train_data(self.X, y.squeeze(-1), strict=False)
            self._all_data_model = model
        return self._all_data_model

    def _k(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.kernel(a, b).to_dense() * self.scale2

    def _conditioned(self, Xp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(K(X, Xp): (n, m), posterior mean at ``Xp`` (m, d): (m,), standardised y)."""
        Ks = self._k(self.X, Xp)
        return Ks, self.mean_const + (Ks * self.alpha).sum(0)

    def mean(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(m,) posterior mean at the rows of ``x`` (m, d), y units: :meth:`predict`'s."""
        with torch.no_grad():
            _, mean = self._conditioned(self.scale(x))
        return self.y_mean + self.y_std * mean

    def predict(self, x: np.ndarray | torch.Tensor) -> Prediction:
        """Posterior mean and latent variance at the rows of ``x`` (m, d): each (m,), y units."""
        Xp = self.scale(x)
        with torch.no_grad():
            Ks, mean = self._conditioned(Xp)
            A = torch.linalg.solve_triangular(self.L, Ks, upper=False)
            prior = self.kernel(Xp[:1], Xp[:1]).to_dense()[0, 0] * self.scale2  # stationary
            var = (prior - (A * A).sum(0)).clamp_min(1e-12)
        self._last = (Xp, A)
        return Prediction(self.y_mean + self.y_std * mean, var * self.y_std ** 2)

    def posterior_cov_with(self, j: int) -> torch.Tensor:
        """Posterior covariance between every point of the last ``predict`` and its ``j``-th
        point (y units), for Kriging-believer updates."""
        Xp, A = self._last
        with torch.no_grad():
            k = self._k(Xp, Xp[j:j + 1]).squeeze(-1)
            return (k - A.T @ A[:, j]) * self.y_std ** 2

    def _joint(self, x: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean (m,) and latent covariance (m, m) at the rows of ``x`` (m, d), in
        standardised y."""
        Xp = self.scale(x)
        with torch.no_grad():
            Ks, mean = self._conditioned(Xp)
            A = torch.linalg.solve_triangular(self.L, Ks, upper=False)
            return mean, self._k(Xp, Xp) - A.T @ A

    def joint_samples(self, x: np.ndarray, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` joint posterior samples of the latent function at the rows of ``x`` (m, d):
        (n, m), y units."""
        mean, cov = self._joint(x)
        with torch.no_grad():
            cov.diagonal().add_(1e-8)
            Lc = _cholesky(cov)
            z = torch.randn(len(mean), n, dtype=DTYPE, generator=generator)
            f = mean.unsqueeze(-1) + Lc @ z
        return (self.y_mean + self.y_std * f).T


def _cholesky(K: torch.Tensor) -> torch.Tensor:
    jitter = 1e-8
    for _ in range(8):
        L, info = torch.linalg.cholesky_ex(K)
        if int(info) == 0:
            return L
        K = K.clone()
        K.diagonal().add_(jitter * float(K.diagonal().mean()))
        jitter *= 10
    raise RuntimeError("covariance matrix is not positive definite")


def log_ei(mean: torch.Tensor, std: torch.Tensor, best: float) -> torch.Tensor:
    """log E[max(f - best, 0)] for f ~ N(mean, std^2), stable for very negative z."""
    z = (mean - best) / std
    # h(z) = phi(z) + z Phi(z); for z < -1 use the Mills-ratio form through erfcx
    log_phi = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
    big = z > -1
    out = torch.empty_like(z)
    zb = z[big]
    out[big] = torch.log(torch.exp(-0.5 * zb * zb) / math.sqrt(2 * math.pi)
                         + zb * torch.special.ndtr(zb))
    zs = z[~big]
    # h(z) = phi(z) * (1 + z * m(z)),  m(z) = Phi(z)/phi(z) = sqrt(pi/2) * erfcx(-z/sqrt2)
    inner = 1 + zs * math.sqrt(math.pi / 2) * torch.special.erfcx(-zs / math.sqrt(2))
    out[~big] = log_phi[~big] + torch.log(inner.clamp_min(1e-300))
    return out + torch.log(std)
