"""BO's hand-written pieces (bocast/strategies/bo/) against references: the surrogate's fast
posterior against exact GP algebra and BoTorch's own posterior (to 1e-6, on random data and a replay
fit), LogEI against mpmath and BoTorch's LogExpectedImprovement, the Kriging believer against exact
conditioning on fantasies, BE-CBO and Thompson sampling on hand-checkable pools, the acquisition
registry, failed fits, and seeds that reproduce."""

import copy
import math

import mpmath
import numpy as np
import pytest
import torch

from bocast.strategies.bo import acquisition as acq
from bocast.strategies.bo.feasibility import AlwaysFeasible, EnsembleClassifier, GPClassifier
from bocast.strategies.bo.surrogate import FitWarning, Surrogate, log_ei

D = 3
BOUNDS = np.array([[0.0] * D, [2.0] * D])  # inputs in [0, 2]: scaling to [0, 1] is exercised


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 2, (n, D))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - x[:, 2] + 0.05 * rng.normal(size=n)
    return x, y


def _fitted(n=40, fit_points=384, seed=0, **kw):
    x, y = _data(n, seed)
    s = Surrogate(BOUNDS, fit_points=fit_points, maxiter=40, seed=seed, **kw)
    s.fit(x, y)
    return s, x, y


def _ctx(s, xp, *, best, p=None, clf=None, seed=0, failures=0):
    """An acquisition's context on the pool ``xp`` (m, d) under the fitted surrogate ``s``."""
    p = torch.ones(len(xp), dtype=torch.float64) if p is None else p
    return acq.Context(s, xp, s.predict(xp), clf or AlwaysFeasible(), p, best,
                       torch.Generator().manual_seed(seed), failures)


def _raw_hyper(s):
    """The surrogate's hyperparameters in y units, from the model BoTorch fitted (on its subset,
    standardised by the subset's mean and std)."""
    t = s.model.outcome_transform
    mu, sd = float(t.means.squeeze()), float(t.stdvs.squeeze())
    return {"lengthscale": s.kernel.lengthscale.detach().numpy().ravel(),
            "amplitude": sd ** 2,  # an RBF kernel of unit scale in standardised units
            "noise": float(s.model.likelihood.noise.detach()) * sd ** 2,
            "mean": float(s.model.mean_module.constant.detach()) * sd + mu}


def _reference(h, X, y, Xp, extra=None):
    """Exact GP posterior (numpy): mean and latent variance at Xp given (X, y), plus noisy
    observations at the rows ``extra`` whose values do not matter for the variance."""
    def k(a, b):
        d = (a[:, None, :] - b[None, :, :]) / h["lengthscale"]
        return h["amplitude"] * np.exp(-0.5 * (d ** 2).sum(-1))

    Xa = X if extra is None else np.vstack([X, extra])
    K = k(Xa, Xa) + h["noise"] * np.eye(len(Xa))
    Ks = k(Xa, Xp)
    mean = h["mean"] + Ks[: len(X)].T @ np.linalg.solve(K[: len(X), : len(X)], y - h["mean"])
    var = h["amplitude"] - np.einsum("ij,ij->j", Ks, np.linalg.solve(K, Ks))
    return mean, var


@pytest.mark.parametrize("fit_points", [384, 25])  # all observations fitted; a subset of them
def test_posterior_matches_exact_gp_algebra(fit_points):
    s, x, y = _fitted(40, fit_points)
    xp = np.random.default_rng(1).uniform(0, 2, (30, D))
    pred = s.predict(xp)
    mean, var = _reference(_raw_hyper(s), x / 2, y, xp / 2)
    np.testing.assert_allclose(pred.mean.numpy(), mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pred.var.numpy(), var, rtol=1e-4, atol=1e-7)


def _botorch_posterior(s, xp, *, jittered=False):
    """(mean, latent variance), y units, of BoTorch's posterior of the surrogate's GP
    (:meth:`Surrogate.botorch_model`) at ``xp``; ``jittered``: of that GP with its noise
    variance raised by the surrogate's jitter, as the fast path factors it."""
    from gpytorch.constraints import GreaterThan

    model = s.botorch_model()
    if jittered:
        model = copy.deepcopy(model)
        model.prediction_strategy = None
        noise = model.likelihood.noise.detach()
        model.likelihood.noise_covar.register_constraint("raw_noise", GreaterThan(0.0))
        # the fast path adds the jitter in the all-data standardisation; the model's own is
        # the fitted subset's, scale2 times smaller in variance
        model.likelihood.noise = noise + s.jitter / s.scale2
    with torch.no_grad():
        post = model.posterior(s.scale(xp))
    return post.mean.squeeze(-1), post.variance.squeeze(-1)


# (n, d): few and many observations, few and many inputs; fit_points below n: the
# hyperparameters fitted on a subset, the posterior conditioned on every row
POSTERIOR_CASES = [(8, 2, 384), (40, 3, 384), (120, 6, 384), (120, 4, 50), (250, 10, 384)]


@pytest.mark.parametrize("noise_sd_max", [0.0, 0.02], ids=["free-noise", "capped-noise"])
@pytest.mark.parametrize("n, d, fit_points", POSTERIOR_CASES)
def test_fast_posterior_is_botorchs(n, d, fit_points, noise_sd_max):
    """The fast path (one Cholesky factor, kept) against BoTorch's ``model.posterior``: with
    ``jitter=0`` its mean and latent variance are BoTorch's posterior of the fitted GP; with the
    default jitter (1e-8 on the noise variance), that of the GP with that noise. Both to 1e-6,
    absolute (y units) and relative (measured: ~1e-10 relative, 1e-12 absolute)."""
    rng = np.random.default_rng(n + d)
    x = rng.uniform(0, 2, (n, d))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - x[:, -1] + 0.05 * rng.normal(size=n)
    xp = np.vstack([rng.uniform(0, 2, (300, d)), x[:20]])  # new rows and observed ones
    bounds = np.array([[0.0] * d, [2.0] * d])
    for jitter in (0.0, 1e-8):
        s = Surrogate(bounds, fit_points=fit_points, maxiter=40, seed=1,
                      noise_sd_max=noise_sd_max, jitter=jitter)
        s.fit(x, y)
        assert (s.model is s.botorch_model()) == (fit_points >= n)
        pred = s.predict(xp)
        mean, var = _botorch_posterior(s, xp, jittered=jitter > 0)
        np.testing.assert_allclose(pred.mean.numpy(), mean.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(pred.var.numpy(), var.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(s.mean(xp).numpy(), mean.numpy(), rtol=1e-6, atol=1e-6)


def test_default_fast_posterior_is_within_the_jitter_of_the_fitted_gps():
    """How far the default jitter moves the fast path from BoTorch's posterior of the fitted
    GP itself: its share of the noise variance (here noise 2.6e-3, standardised y)."""
    s, x, y = _fitted(40)
    xp = np.random.default_rng(2).uniform(0, 2, (200, D))
    mean, var = _botorch_posterior(s, xp)
    pred = s.predict(xp)
    np.testing.assert_allclose(pred.mean.numpy(), mean.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pred.var.numpy(), var.numpy(), rtol=1e-4, atol=1e-6)


def test_fast_posterior_of_a_replay_fit_is_botorchs():
    """On a real fit: BO's GP after 40 trials of replay (relative TFLOPS, noise cap) on the
    GEMM table, scored on the whole table."""
    from bocast.measure.parts import make_measurer, make_runner
    from bocast.measure.replay import ReplayDataset
    from bocast.run.tuner import Tuner
    from bocast.space.operators.operator import get_operator
    from bocast.strategies import make_strategy
    from bocast.strategies.bo.strategy import gp_target

    op = get_operator("gemm").from_args((32, 2048, 1000), space="v1")
    ds = ReplayDataset("gemm_32_2048_1000", op)
    bo = make_strategy("bo", ds.candidates(), seed=0, n_init=16, pool_size=512, fit_maxiter=25,
                       y_transform="relative", noise_sd_max=0.02)
    res = Tuner(bo, make_measurer(op, None, make_runner("replay", dataset=ds)), trials=40,
                batch_size=8).run()
    ok = [r for r in res.records if r.ok]
    x = bo._inputs([bo.config_of(r) for r in ok])
    y = gp_target(np.array([r.tflops for r in ok]), "relative")
    xp = bo._inputs(ds.configs)
    bounds = np.stack([bo.surrogate.lo.numpy(), (bo.surrogate.lo + bo.surrogate.span).numpy()])
    exact = Surrogate(bounds, maxiter=25, noise_sd_max=0.02, jitter=0.0)
    exact.fit(x, y)
    for s in (bo.surrogate, exact):  # BO's own (default jitter); the same data, no jitter
        pred = s.predict(xp)
        mean, var = _botorch_posterior(s, xp, jittered=s.jitter > 0)
        np.testing.assert_allclose(pred.mean.numpy(), mean.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(pred.var.numpy(), var.numpy(), rtol=1e-6, atol=1e-6)


def test_joint_posterior_of_the_believer_and_thompson_sampling_is_botorchs():
    """The posterior covariance the Kriging believer conditions on, and the joint mean and
    covariance Thompson sampling draws from, against BoTorch's joint posterior."""
    s, _, _ = _fitted(40, fit_points=25, jitter=0.0)
    xp = np.random.default_rng(3).uniform(0, 2, (30, D))
    s.predict(xp)
    with torch.no_grad():
        post = s.botorch_model().posterior(s.scale(xp))
    cov = post.distribution.covariance_matrix
    for j in (0, 7, 29):
        np.testing.assert_allclose(s.posterior_cov_with(j).numpy(), cov[:, j].numpy(),
                                   rtol=1e-6, atol=1e-6)
    mean, joint = s._joint(xp)  # standardised y
    np.testing.assert_allclose((s.y_mean + s.y_std * mean).numpy(),
                               post.mean.squeeze(-1).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose((joint * s.y_std ** 2).numpy(), cov.numpy(), rtol=1e-6, atol=1e-6)


def test_fit_is_reproducible_and_depends_on_the_seed():
    a, _, _ = _fitted(40, 25, seed=0)
    b, _, _ = _fitted(40, 25, seed=0)
    xp = np.random.default_rng(3).uniform(0, 2, (10, D))
    assert torch.equal(a.predict(xp).mean, b.predict(xp).mean)
    x, y = _data(40, 0)
    c = Surrogate(BOUNDS, fit_points=25, maxiter=40, seed=1)  # another subset of the same data
    c.fit(x, y)
    assert not torch.equal(a.predict(xp).mean, c.predict(xp).mean)


def test_joint_samples_have_the_posterior_mean_and_covariance():
    s, _, _ = _fitted(30)
    xp = np.random.default_rng(4).uniform(0, 2, (5, D))
    f = s.joint_samples(xp, 20000, torch.Generator().manual_seed(0)).numpy()
    pred = s.predict(xp)
    se = np.sqrt(pred.var.numpy() / 20000)
    assert np.all(np.abs(f.mean(0) - pred.mean.numpy()) < 5 * se + 1e-9)
    np.testing.assert_allclose(f.var(0), pred.var.numpy(), rtol=0.1, atol=1e-8)
    again = s.joint_samples(xp, 3, torch.Generator().manual_seed(0))
    assert torch.equal(again, s.joint_samples(xp, 3, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("z", [-60.0, -30.0, -8.0, -1.5, -1.0, -0.999, 0.0, 0.7, 5.0])
def test_log_ei_matches_the_closed_form_in_high_precision(z):
    mpmath.mp.dps = 60
    sd = 0.3
    zm = mpmath.mpf(z)
    h = mpmath.npdf(zm) + zm * mpmath.ncdf(zm)
    want = float(mpmath.log(sd * h))
    got = float(log_ei(torch.tensor([z * sd + 1.0], dtype=torch.float64),
                       torch.tensor([sd], dtype=torch.float64), 1.0))
    assert math.isfinite(got)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_kriging_believer_conditions_on_each_pick_exactly():
    """With the score = posterior std, the believer's variances after each pick equal those of
    a GP that observed the picks (with noise), computed from scratch."""
    s, x, y = _fitted(30)
    xp = np.random.default_rng(5).uniform(0, 2, (40, D))
    pred = s.predict(xp)
    seen_sd = []

    def score(mu, sd):
        seen_sd.append(sd.clone())
        assert torch.equal(mu, pred.mean), "the believer leaves the mean unchanged"
        return sd.clone()

    picks = acq.kriging_believer(s, pred, score, 6)
    assert len(set(picks)) == 6
    h = _raw_hyper(s)
    h["noise"] = s.noise * s.y_std ** 2  # the fantasies' noise: the all-data one
    for t in range(6):
        _, var = _reference(h, x / 2, y, xp / 2, extra=xp[picks[:t]] / 2 if t else None)
        np.testing.assert_allclose(seen_sd[t].numpy() ** 2, np.maximum(var, 1e-12),
                                   rtol=1e-4, atol=1e-7)
        assert picks[t] == int(np.argmax(np.where(np.isin(np.arange(40), picks[:t]), -1, var)))


def test_constrained_logei_first_pick_is_the_argmax_of_log_ei_plus_log_feasibility():
    s, x, y = _fitted(30)
    xp = np.random.default_rng(6).uniform(0, 2, (20, D))
    pred = s.predict(xp)
    best = float(y.max())
    sd = pred.var.sqrt()
    for seed in range(5):
        p = torch.as_tensor(np.random.default_rng(seed).uniform(0.01, 1, 20))
        want = int(torch.argmax(log_ei(pred.mean, sd, best) + torch.log(p)))
        assert acq.LogEI().select(_ctx(s, xp, best=best, p=p), 1) == [want]
    free = acq.LogEI().select(_ctx(s, xp, best=best), 1)[0]
    p = torch.ones(20, dtype=torch.float64)
    p[free] = 0.0  # the favourite cannot run: another row wins
    assert acq.LogEI().select(_ctx(s, xp, best=best, p=p), 1)[0] != free


def test_log_ei_of_the_fast_posterior_is_botorchs_log_expected_improvement():
    from botorch.acquisition.analytic import LogExpectedImprovement

    s, x, y = _fitted(40, jitter=0.0)
    xp = np.random.default_rng(11).uniform(0, 2, (200, D))
    for best in (float(y.max()), float(np.median(y)), float(y.max()) + 1.0):
        with torch.no_grad():
            want = LogExpectedImprovement(s.botorch_model(), best_f=best)(
                s.scale(xp).unsqueeze(-2))
        got = acq.constrained_log_ei(s.predict(xp), torch.ones(len(xp), dtype=torch.float64),
                                     best)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


class _Optimistic(AlwaysFeasible):
    """A classifier whose optimistic bound is given."""

    def __init__(self, p_optimistic):
        self.p_optimistic = p_optimistic

    def optimistic(self, x, beta):
        return self.p_optimistic


def test_becbo_only_picks_optimistically_feasible_rows_and_never_repeats_one():
    s, x, y = _fitted(30)
    xp = np.random.default_rng(7).uniform(0, 2, (8, D))
    p_opt = torch.tensor([1, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 1], dtype=torch.float64)
    picks = acq.BECBO(boundary_share=0.5).select(
        _ctx(s, xp, best=float(y.max()), clf=_Optimistic(p_opt)), 2)
    assert sorted(picks) == [0, 7], "no failure seen (all p >= 0.95): no boundary share"
    # more slots than eligible rows: each row at most once; the rest by optimistic feasibility
    p_opt = torch.tensor([1, 0.2, 0.4, 0.3, 0.2, 0.2, 0.2, 1], dtype=torch.float64)
    picks = acq.BECBO(boundary_share=0.25).select(
        _ctx(s, xp, best=float(y.max()), clf=_Optimistic(p_opt)), 4)
    assert len(picks) == len(set(picks)) == 4
    assert sorted(picks[:2]) == [0, 7] and picks[2:] == [2, 3]


def test_becbo_spends_its_boundary_share_on_uncertain_feasibility():
    """Rows 6-11 repeat rows 0-5 (same prediction, same EI) with feasibility 1/2 instead of
    0.99. The boundary share takes the rows of highest EI x closeness to 1/2 (log: LogEI +
    log(1 - 2|p - 1/2|)) among those the EI share left, so of two twins it takes the one at 1/2
    first."""
    s, x, y = _fitted(30)
    base = np.random.default_rng(8).uniform(0, 2, (6, D))
    xp = np.vstack([base, base])
    pred = s.predict(xp)
    p = torch.tensor([0.99] * 6 + [0.5] * 6, dtype=torch.float64)
    picks = acq.BECBO(boundary_share=0.5).select(
        _ctx(s, xp, best=float(y.max()), p=p, clf=_Optimistic(torch.ones(12))), 4)
    assert len(picks) == len(set(picks)) == 4
    ei_share, boundary = picks[:2], picks[2:]
    score = log_ei(pred.mean, pred.var.sqrt(), float(y.max())) + torch.log(1 - 2 * (p - 0.5).abs())
    score[ei_share] = -torch.inf
    assert boundary == [int(i) for i in torch.argsort(score, descending=True)[:2]]
    for i in boundary:
        assert i >= 6 or i + 6 in picks, "a row at 0.99 only after its twin at 1/2"


class _Certain:
    """A classifier that knows the answer: rows in ``feasible`` are feasible."""

    def __init__(self, m, feasible):
        self.p = torch.zeros(m, dtype=torch.float64)
        self.p[feasible] = 1.0
        self.rows = None

    def predict(self, x):
        return self.p[self.rows], torch.zeros(len(x), dtype=torch.float64)

    def sample(self, x, n, generator):
        return self.p[self.rows].bool().expand(n, -1)


def test_thompson_picks_distinct_feasible_rows_and_reproduces_with_its_seed(monkeypatch):
    s, x, y = _fitted(30)
    xp = np.random.default_rng(9).uniform(0, 2, (50, D))
    clf = _Certain(50, list(range(0, 50, 2)))  # even rows feasible
    real_sample = s.joint_samples

    def joint(x_sub, n, gen):  # remember which rows were screened, for the classifier
        clf.rows = torch.as_tensor([int(np.flatnonzero((xp == r).all(1))[0]) for r in x_sub])
        return real_sample(x_sub, n, gen)

    monkeypatch.setattr(s, "joint_samples", joint)
    ts = acq.Thompson(screen=16)
    picks = ts.select(_ctx(s, xp, best=float(y.max()), clf=clf, seed=1), 8)
    assert len(picks) == len(set(picks)) == 8 and all(i % 2 == 0 for i in picks)
    again = ts.select(_ctx(s, xp, best=float(y.max()), clf=clf, seed=1), 8)
    other = ts.select(_ctx(s, xp, best=float(y.max()), clf=clf, seed=2), 8)
    assert again == picks and other != picks


@pytest.mark.parametrize("make", [lambda: GPClassifier(inducing=32, iters=40, seed=0),
                                  lambda: EnsembleClassifier(members=3, epochs=80, seed=0)],
                         ids=["gp", "ensemble"])
def test_classifiers_learn_a_boundary_and_reproduce(make):
    rng = np.random.default_rng(10)
    x = torch.as_tensor(rng.uniform(0, 1, (80, 2)))
    labels = (x[:, 0] < 0.5).double()  # feasible on the left half
    probe = torch.tensor([[0.1, 0.5], [0.9, 0.5]], dtype=torch.float64)
    a, b = make(), make()
    torch.manual_seed(1234)
    before = torch.rand(3)
    torch.manual_seed(1234)
    a.fit(x, labels)
    assert torch.equal(torch.rand(3), before)  # the caller's torch random stream is untouched
    b.fit(x, labels)
    p, _ = a.predict(probe)
    assert p[0] > 0.7 and p[1] < 0.3
    assert torch.equal(p, b.predict(probe)[0])
    assert torch.all(a.optimistic(probe, 2.0) >= p - 1e-12)
    draws = a.sample(probe, 200, torch.Generator().manual_seed(0))
    assert draws.shape == (200, 2) and draws[:, 0].float().mean() > draws[:, 1].float().mean()


def test_noise_cap_bounds_the_fitted_noise():
    # a step the smooth kernel cannot follow: fitted freely, it is explained as noise
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 2, (60, D))
    y = np.where(x[:, 0] > 1.0, 1.0, 0.0) + 0.3 * np.sin(7 * x[:, 1]) * (x[:, 2] > 1)
    free = Surrogate(BOUNDS, maxiter=40, seed=0)
    free.fit(x, y)
    capped = Surrogate(BOUNDS, maxiter=40, seed=0, noise_sd_max=0.02)
    capped.fit(x, y)
    sd = {k: (s.noise ** 0.5) * s.y_std for k, s in (("free", free), ("capped", capped))}
    assert sd["capped"] <= 0.02 * 1.01 < sd["free"]
    # the capped GP keeps its best observation near what was measured
    best = int(np.argmax(y))
    assert abs(float(capped.predict(x[best:best + 1]).mean) - y[best]) < 0.05


def test_q_log_ei_of_one_point_is_log_ei_and_its_batch_avoids_repeats():
    s, x, y = _fitted(30)
    rng = np.random.default_rng(8)
    xp = rng.uniform(0, 2, (30, D))
    xp = np.vstack([xp, xp[:5] + 1e-4])  # near-copies: a joint batch gains nothing from both
    best = float(y.max())
    pred = s.predict(xp)
    analytic = log_ei(pred.mean, pred.var.sqrt(), best)
    first = acq.QLogEI(samples=4096).select(_ctx(s, xp, best=best), 1)
    assert first == [int(torch.argmax(analytic))]
    picks = acq.QLogEI().select(_ctx(s, xp, best=best), 6)
    assert len(set(picks)) == 6
    assert acq.QLogEI().select(_ctx(s, xp, best=best), 6) == picks  # the seed reproduces
    # pool: two rows A and B far apart with about equal posteriors, and a near-copy of A.
    # With A pending, the copy adds nearly nothing to the joint improvement (perfectly
    # correlated); B, nearly independent of A, adds E[(f_B - f_A)+], no small amount
    mean, sd = pred.mean[:30].numpy(), pred.var[:30].sqrt().numpy()
    pairs = [(abs(mean[i] - mean[j]) / np.hypot(sd[i], sd[j]), i, j)
             for i in range(30) for j in range(i) if np.linalg.norm(xp[i] - xp[j]) > 1.0]
    gap, a, b = min(pairs)
    assert gap < 0.5  # P(f_B > f_A) > 0.3
    inc = float(min(mean[a], mean[b]))
    ei = log_ei(pred.mean, pred.var.sqrt(), inc)
    if ei[b] > ei[a]:  # A: the first pick; its copy would be the second without X_pending
        a, b = b, a
    three = np.stack([xp[a], xp[a] + 1e-4, xp[b]])
    two = acq.QLogEI().select(_ctx(s, three, best=inc), 2)
    assert two[0] in (0, 1) and two[1] == 2
    cannot = torch.ones(len(xp), dtype=torch.float64)
    cannot[picks[0]] = 0.0  # the favourite cannot run
    assert picks[0] not in acq.QLogEI().select(_ctx(s, xp, best=best, p=cannot), 6)


def test_one_registry_names_every_acquisition_of_the_option():
    from bocast.strategies.bo.strategy import ACQUISITIONS, BayesOpt

    assert tuple(acq.ACQUISITIONS) == ACQUISITIONS
    field = BayesOpt.options["acquisition"]
    assert tuple(field.choices) == ACQUISITIONS and field.default == "logei"
    defaults = BayesOpt.options.defaults()
    s, x, y = _fitted(30)
    xp = np.random.default_rng(12).uniform(0, 2, (40, D))
    for name in ACQUISITIONS:
        a = acq.make(name, defaults)
        assert isinstance(a, acq.ACQUISITIONS[name]) and isinstance(a, acq.Acquisition)
        picks = a.select(_ctx(s, xp, best=float(y.max())), 5)
        assert len(picks) == len(set(picks)) == 5 and all(0 <= i < 40 for i in picks)
    becbo = acq.make("becbo", {**defaults, "boundary_share": 0.5, "beta0": 3.0})
    assert (becbo.boundary_share, becbo.beta0) == (0.5, 3.0)


# --- a failed fit: the hyperparameters it started from, counted and warned; nothing else caught
def _failing_fit(monkeypatch, error):
    """Make BoTorch's fit move the hyperparameters (as a failed optimiser leaves them) and
    raise ``error``."""
    import botorch.fit

    def fit(mll, **kw):
        mll.model.covar_module.lengthscale = 7.0
        raise error

    monkeypatch.setattr(botorch.fit, "fit_gpytorch_mll", fit)


def test_a_failed_fit_keeps_the_previous_hyperparameters_and_says_so(monkeypatch):
    from botorch.exceptions.errors import ModelFittingError

    x, y = _data(40)
    s = Surrogate(BOUNDS, maxiter=40, seed=0)
    s.fit(x[:30], y[:30])
    assert s.fit_failures == 0 and s.fit_error is None
    before = {k: v.clone() for k, v in s._hyper.items()}
    _failing_fit(monkeypatch, ModelFittingError("All attempts to fit the model have failed."))
    with pytest.warns(FitWarning, match=r"ModelFittingError: All attempts.*kept the previous "
                                        r"round's hyperparameters"):
        s.fit(x, y)
    assert s.fit_failures == 1 and s.fit_error.startswith("ModelFittingError")
    assert before.keys() == s._hyper.keys()
    assert all(torch.equal(before[k], s._hyper[k]) for k in before)
    # the round's posterior: those hyperparameters, conditioned on all 40 rows
    xp = np.random.default_rng(1).uniform(0, 2, (20, D))
    mean, var = _reference(_raw_hyper(s), x / 2, y, xp / 2)
    np.testing.assert_allclose(s.predict(xp).mean.numpy(), mean, rtol=1e-6, atol=1e-6)
    # a first fit that fails keeps the initial hyperparameters
    fresh = Surrogate(BOUNDS, maxiter=40, seed=0)
    with pytest.warns(FitWarning, match="kept the initial hyperparameters"):
        fresh.fit(x, y)
    init = Surrogate(BOUNDS)._gp(s.scale(x), torch.as_tensor(y).reshape(-1, 1))
    assert torch.equal(fresh.kernel.lengthscale, init.covar_module.lengthscale)


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyError("raw_noise"), AssertionError()])
def test_any_other_error_of_a_fit_propagates(monkeypatch, error):
    x, y = _data(30)
    s = Surrogate(BOUNDS, maxiter=40, seed=0)
    _failing_fit(monkeypatch, error)
    with pytest.raises(type(error)):
        s.fit(x, y)
    assert s.fit_failures == 0
