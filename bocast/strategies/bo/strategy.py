"""Bayesian optimisation: GP surrogate of log(TFLOPS) (or TFLOPS relative to the best, option
``y_transform``), feasibility classifier, batch acquisition over a discrete candidate pool.

Each round: fit the surrogate on the successful measurements (conditioned on the pending
configurations, asked and still measured, at their predicted means) and, once failures have been
seen, the classifier on all attempted ones; build a pool of fresh uniform samples plus the feasible
neighbours of the best configurations so far (never anything already proposed); optionally extend it
by local search on the acquisition surface; score it with the chosen acquisition (``logei``,
``becbo``, ``ts``, ``qlogei``: :mod:`bocast.strategies.bo.acquisition`); return ``q`` picks. The
first ``n_init`` proposals are uniform samples. A round whose GP fit failed keeps the previous
round's hyperparameters, warns, and counts in ``last_round``'s ``fit_failures`` (the run's so far).

Options beyond the defaults of 2026-11 (issue 11; each kept off until a benchmark shows a gain):

- ``features: derived``: the models see the derived quantities of :mod:`bocast.space.features`
  (block tile, threads, shared memory, registers, grid, as log2) after the knob encoding.
- ``local_search: S``: from the S best pool rows by constrained LogEI (log EI + log P(feasible);
  for every acquisition), hill-climb over ``candidates.neighbours`` (one-knob moves), moving to
  the best unproposed neighbour while it improves, for at most ``local_search_steps`` steps;
  every row visited joins the pool. A uniform pool of 4096 holds ~4e-6 of a 1e9-member space,
  so its best row is rarely a local optimum of the acquisition. (On replay of a table no
  larger than the pool, the pool already holds every row: local search cannot change a pick.)
- ``trust_region: R``: a round picks only among the unproposed configurations within R
  one-knob moves of the best one so far (grown until they number twice the batch, where the
  candidates allow), as TuRBO / CASMOPOLITAN keep a BO search local; the radius shrinks by one
  for every batch that finds nothing better, and at 0 a round draws from the whole pool, then
  it starts again at R. On a table the pool covers, EI otherwise spreads a batch over uncertain
  rows far from the best, where the GP ranks worst (experiments/ablation/exhaustive.yaml).
  ``trust_region_gain: g`` counts a better kernel as one only when it beats the last counted
  one by the factor 1 + g: on a flat table, gains of a fraction of a percent otherwise keep the
  radius from shrinking, and the search never leaves a local optimum.
- ``y_transform: relative``: the GP models TFLOPS over the best measured so far instead of log
  TFLOPS. On tables with a long slow tail (conv2d: 5% of rows below 0.4% of the optimum) log
  makes that tail most of y's variance, and a stationary kernel fitted to it ranks the fast rows
  poorly: with 64 rows of the conv2d table the GP's 11 best held-out predictions held a row of
  0.80 of the optimum (mean of 10 splits) on log TFLOPS and 0.91 on the relative scale, the
  CGA's trees (which fit the relative scale) 0.92
  (experiments/results/model_quality_exhaustive.md).
  ``noise_sd_max`` is then a fraction of the best kernel.
- ``warm_start: [sources]``: records of the same operator on other shapes, or of another
  operator on the same matmul schedule (GEMM records for a conv2d; dataset prefixes or record
  stores) as a source model (:mod:`bocast.strategies.bo.transfer`). Its mean is one more input of
  the GP, and the first batch is picked by LogEI on it over the candidates (a uniform pool plus the
  best source rows that the candidates contain, and their neighbours) instead of uniform samples,
  with ``warm_start_share`` of it the best source rows themselves (each source's best in turn,
  nearest first); the model takes over from the second batch (``n_init`` does not apply).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from bocast.records.record import best_record, speed
from bocast.records.status import Status
from bocast.schema import Section, opt
from bocast.space.features import FEATURES_OPTION, FeatureKind
from bocast.space.space import Space
from bocast.strategies.base import Strategy, StrategyError, StrategyOptions, register
from bocast.strategies.bo.transfer import (
    WARM_START_OPTION,
    SourceModel,
    WarmStartError,
    best_rows,
    interleave,
    source_model,
    source_paths,
)

if TYPE_CHECKING:
    import torch

    from bocast.strategies.bo import acquisition as acq
    from bocast.strategies.bo.feasibility import AlwaysFeasible, make_classifier
    from bocast.strategies.bo.surrogate import Surrogate


def _import_model() -> None:
    """Bind torch and the BO pieces (GP, classifiers, acquisitions) when a BO strategy is made:
    this module is also imported for BO's options alone, and torch takes 1.5 s to import (a
    refused option must answer well under a second, issue 25). The one documented lazy import."""
    global torch, acq, AlwaysFeasible, make_classifier, Surrogate
    import torch

    from bocast.strategies.bo import acquisition as acq
    from bocast.strategies.bo.feasibility import AlwaysFeasible, make_classifier
    from bocast.strategies.bo.surrogate import Surrogate


#: option ``acquisition``'s choices: bocast.strategies.bo.acquisition.ACQUISITIONS' names (that
#: module imports torch; a check of the options must not)
Acquisition = Literal["logei", "becbo", "ts", "qlogei"]
ACQUISITIONS: tuple[str, ...] = get_args(Acquisition)
YTransform = Literal["log", "relative"]
Y_TRANSFORMS: tuple[str, ...] = get_args(YTransform)


@dataclass(frozen=True, kw_only=True)
class BOOptions(StrategyOptions):
    """Options of strategy ``bo`` (:class:`BayesOpt`; the module docstring says more)."""

    strategy = "bo"
    acquisition: Acquisition = opt(
        "logei", doc="how a round picks its batch from the pool: logei (constrained LogEI, "
                     "Kriging believer), becbo (EI where feasibility is optimistically likely, "
                     "plus the feasibility boundary), ts (constrained Thompson sampling), qlogei "
                     "(BoTorch's joint qLogEI) (bocast.strategies.bo.acquisition)")
    n_init: int = opt(32, min=1, max=1_000_000, doc="uniform samples before the model")
    pool_size: int = opt(4096, min=1, max=1_000_000, doc="fresh samples scored per round")
    incumbents: int = opt(16, min=0, max=100_000,
                          doc="best configurations whose neighbours join the pool")
    classifier: Literal["gp", "ensemble"] = opt(
        "gp", doc="the feasibility classifier, fitted once failures have been seen: gp (a "
                  "variational GP classifier) or ensemble (small MLPs, as BE-CBO uses) "
                  "(bocast.strategies.bo.feasibility)")
    fit_points: int = opt(384, min=3, max=100_000, doc="observations used to fit hyperparameters")
    fit_maxiter: int = opt(75, min=1, max=100_000,
                           doc="iterations of a GP hyperparameter fit (L-BFGS-B; a refit from "
                               "the last round's hyperparameters gets a third, at least 10)")
    boundary_share: float = opt(0.25, min=0, max=1,
                                doc="becbo: share of the batch on the feasibility boundary")
    beta0: float = opt(2.0, min=0, max=1000,
                       doc="becbo: initial width of the optimistic feasibility bound")
    # its matrices (a fit on fit_points observations, then <= 1000 observations x a pool of
    # ~4500) are too small for the H100 host's 16 threads, slower than 4 (lab/bench_proposal.py)
    threads: int = opt(4, min=1, max=1024, doc="torch threads for a round, at most")
    features: FeatureKind = FEATURES_OPTION.opt()
    y_transform: YTransform = opt(
        "log", doc="what the GP models: log TFLOPS, or TFLOPS over the best measured so far")
    noise_sd_max: float = opt(0.0, min=0, max=10,
                              doc="cap on the GP's observation noise, a standard deviation of "
                                  "the GP's y (log TFLOPS, or a fraction of the best) (0: "
                                  "fitted freely)")
    local_search: int = opt(0, min=0, max=100_000,
                            doc="starts of the hill climb on the acquisition (0: none)")
    local_search_steps: int = opt(8, min=1, max=100_000, doc="at most this many moves per start")
    trust_region: int = opt(0, min=0, max=64,
                            doc="radius, in one-knob moves, of the region around the best "
                                "configuration that a round picks from (0: the whole pool; see "
                                "the module docstring)")
    trust_region_gain: float = opt(0.0, min=0, max=1,
                                   doc="trust_region: relative gain over the last counted best "
                                       "that counts as an improvement (resets the radius)")
    warm_start: str | list[str] = WARM_START_OPTION.opt()
    warm_start_top: int = opt(0, min=0, max=100_000,
                              doc="warm_start: the first batch starts with this many of the best "
                                  "source rows (as the CGA's warm start), the rest picked on the "
                                  "source model")
    warm_start_share: float = opt(0.0, min=0, max=1,
                                  doc="warm_start: share of the first batch taken from the best "
                                      "source rows, each followed by one of the source model's "
                                      "picks (0: the model's picks only; not with "
                                      "warm_start_top)")
    warm_start_points: int = opt(1024, min=3, max=100_000,
                                 doc="warm_start: source rows the source model conditions on "
                                     "(a fixed subset)")


def gp_target(tflops: np.ndarray, transform: str) -> np.ndarray:
    """The GP's y of measured TFLOPS (``(n,)``, all > 0) under option ``y_transform``: log
    TFLOPS, or TFLOPS over the largest of them ("relative")."""
    if transform == "relative":
        return tflops / tflops.max()
    return np.log(tflops)


@register
class BayesOpt(Strategy):
    name = "bo"
    options = Section.of(BOOptions)
    # a warm run's first batch: half the best source rows, each followed by one of the source
    # model's picks. Leave-one-table-out over 18 tables (experiments/results/loto_b16.md,
    # loto_b32.md): rows alone were 2-26x slower to 95% than the model's picks on the tables
    # whose best rows do not carry over (conv1d, conv3d, gemv, small-M GEMMs), the model's picks
    # alone 3-60x slower than the rows where they do (conv2d, dilated, bmm, GEMM 2048x8192x1024,
    # 4096^3); in turn, faster than cold BO on 15 of 18 tables at batch 16 (50 seeds,
    # loto_final.md) and tied on 3
    warm_defaults = {"warm_start_share": 0.5}
    warm_defaults_yield_to = ("warm_start_top",)

    def __init__(self, candidates, *, seed=0, **hyper):
        _import_model()
        super().__init__(candidates, seed=seed, **hyper)
        self.features = self.model_inputs()
        if self.hyper["warm_start_top"] and self.hyper["warm_start_share"]:
            raise StrategyError(f"strategy {self.name!r}: warm_start_top and warm_start_share "
                                "both say how many source rows start the first batch; give one")
        paths = source_paths(self.hyper["warm_start"])
        self.source = self._source_model(paths) if paths else None
        bounds = self.features.bounds()
        if self.source is not None:
            bounds = np.hstack([bounds, self.source.bounds[:, None]])
        self.surrogate = Surrogate(bounds, fit_points=self.hyper["fit_points"],
                                   maxiter=self.hyper["fit_maxiter"], seed=seed,
                                   noise_sd_max=self.hyper["noise_sd_max"])
        self.acquisition = acq.make(self.hyper["acquisition"], self.hyper)
        self.last_round: dict = {}
        self.classifier = None  # the last round's feasibility classifier (for diagnostics)

    def _source_model(self, paths):
        target = self.warm_start_target(paths)
        try:
            return source_model(paths, target, self.features,
                                points=self.hyper["warm_start_points"],
                                maxiter=self.hyper["fit_maxiter"])
        except WarmStartError as e:
            raise StrategyError(f"strategy {self.name!r}: {e}") from None

    def _inputs(self, configs) -> np.ndarray:
        """The GP's inputs: the features, then (warm start) the source model's mean."""
        x = self.features(configs)
        if self.source is None:
            return x
        return np.hstack([x, self.source.column(x)[:, None]])

    def _ask(self, n):
        with _torch_threads(self.hyper["threads"]):
            return self._round(n)

    def _round(self, n):
        ok = self.measured_ok()
        if self.source is not None and not self.history:
            return self._first_batch(n, self.source)
        if (self.source is None and len(self.history) < self.hyper["n_init"]) or len(ok) < 3:
            return self.fresh_samples(n)
        pool = self._region(n) if self.hyper["trust_region"] else self._pool()
        if not pool:
            return []
        x_ok = self._inputs([self.config_of(r) for r in ok])
        y_ok = gp_target(np.array(list(map(speed(ok), ok)), float), self.hyper["y_transform"])
        self.surrogate.fit(x_ok, y_ok)
        if self.pending:  # asked before, still measured: a Kriging believer's fantasies
            self.surrogate.believe(self._inputs(self.pending))
        attempted = [r for r in self.history if r.status is not Status.INVALID]
        labels = np.array([1.0 if r.ok else 0.0 for r in attempted])
        clf = make_classifier(self.hyper["classifier"], labels, seed=self.seed)
        if labels.min() != labels.max():
            x_att = self.surrogate.scale(self._inputs([self.config_of(r) for r in attempted]))
            clf.fit(x_att, torch.as_tensor(labels))
        self.classifier = clf
        best = float(y_ok.max())
        climbed = self._local_search(pool, clf, best) if self.hyper["local_search"] else []
        pool = pool + climbed
        x_pool = self._inputs(pool)
        pred = self.surrogate.predict(x_pool)
        p_feas, _ = clf.predict(self.surrogate.scale(x_pool))
        ctx = acq.Context(self.surrogate, x_pool, pred, clf, p_feas, best,
                          torch.Generator().manual_seed(int(self.rng.integers(2**62))),
                          failures=int((labels == 0).sum()))
        picks = self.acquisition.select(ctx, n)
        self.last_round = {"pool": len(pool), "observations": len(ok), "best_y": best,
                           "failures_seen": ctx.failures, "local_search_added": len(climbed),
                           "fit_failures": self.surrogate.fit_failures}
        return [pool[i] for i in picks]

    def _first_batch(self, n: int, source: SourceModel) -> list:
        """Warm start: the best source rows (``warm_start_top`` of them, first; or the
        ``warm_start_share`` of the batch, in turn with the model's picks), and LogEI on the
        source model (Kriging believer) over a uniform pool plus the best source rows the
        candidates contain and their neighbours."""
        share = self.hyper["warm_start_share"]
        top = best_rows(source.ranked, self.candidates, self.proposed,
                        min(n, self.hyper["warm_start_top"] or round(share * n)))
        n -= len(top)
        taken = set(self.proposed) | {Space.key(c) for c in top}
        pool = [c for c in self.fresh_samples(self.hyper["pool_size"])
                if Space.key(c) not in taken]
        seen = taken | {Space.key(c) for c in pool}
        for c in source.top(max(self.hyper["incumbents"], n)):
            if not self.candidates.contains(c):  # infeasible for the target, or not in its table
                continue
            for nb in [c, *self.candidates.neighbours(c)]:
                key = Space.key(nb)
                if key not in seen:
                    seen.add(key)
                    pool.append(nb)
        # Not done: keeping the knobs no source moved at the sources' value (the model cannot
        # tell their values apart; live on the H200, half the first batch went to scalar
        # epilogues and clusters of the best rows). Within noise live, and on held-out tables
        # it kept the first batch from the target's best where that value differs (GEMM
        # 1024^3 v2: writeback direct; 95% in 10 trials became > 64; loto_turns.md)
        self.last_round = {"pool": len(pool), "observations": 0, "warm_start": True,
                           "warm_start_top": len(top)}
        if not pool or n <= 0:
            return top
        x = self.features(pool)[:, source.columns]
        pred = source.surrogate.predict(x)
        ctx = acq.Context(source.surrogate, x, pred, AlwaysFeasible(),
                          torch.ones(len(pool), dtype=pred.mean.dtype), source.best,
                          torch.Generator().manual_seed(0))  # (LogEI draws nothing)
        picks = acq.LogEI().select(ctx, n)
        return (interleave(top, [pool[i] for i in picks], key=Space.key) if share
                else top + [pool[i] for i in picks])

    def _constrained_log_ei(self, configs: list, clf, best: float) -> np.ndarray:
        x = self._inputs(configs)
        p, _ = clf.predict(self.surrogate.scale(x))
        return acq.constrained_log_ei(self.surrogate.predict(x), p, best).numpy()

    def _local_search(self, pool: list, clf, best: float) -> list:
        """Multi-start hill climb on constrained LogEI over one-knob moves; returns the rows it
        visited that the pool did not hold (see the module docstring)."""
        score = dict(zip((Space.key(c) for c in pool), self._constrained_log_ei(pool, clf, best)))
        order = np.argsort([-score[Space.key(c)] for c in pool], kind="stable")
        current = [pool[i] for i in order[: self.hyper["local_search"]]]
        visited: list = []
        for _ in range(self.hyper["local_search_steps"]):
            moves = [[nb for nb in self.candidates.neighbours(c)
                      if Space.key(nb) not in self.proposed] for c in current]
            fresh = {Space.key(nb): nb for nbs in moves for nb in nbs
                     if Space.key(nb) not in score}
            if fresh:  # one model call per step for every climb
                score.update(zip(fresh, self._constrained_log_ei(list(fresh.values()), clf, best)))
                visited += fresh.values()
            nxt = []
            for c, nbs in zip(current, moves):
                top = max(nbs, key=lambda nb: score[Space.key(nb)], default=None)
                if top is not None and score[Space.key(top)] > score[Space.key(c)]:
                    nxt.append(top)
            if not nxt:
                break
            current = list({Space.key(c): c for c in nxt}.values())  # climbs that met merge
        return visited

    def radius(self, n: int) -> int:
        """The trust region's radius for a batch of ``n``: ``trust_region`` while the last
        improvement (a kernel better than the last counted one by ``trust_region_gain``) is at
        most one batch old, one less for each further batch without one, then 0 (one round over
        the whole pool), and round again. A function of the history alone, so a resumed run
        draws the same regions."""
        r0 = self.hyper["trust_region"]
        speed_of = speed(self.history)
        ok = [(i, speed_of(r)) for i, r in enumerate(self.history) if r.succeeded]
        if not ok:
            return 0
        gain = self.hyper["trust_region_gain"]
        found, level = ok[0]
        for i, y in ok[1:]:
            if y > level * (1 + gain):
                found, level = i, y
        stale = (len(self.history) - 1 - found) // max(n, 1)
        return r0 - stale % (r0 + 1)

    def _region(self, n: int) -> list:
        """The unproposed configurations within ``radius(n)`` one-knob moves of the best one
        (grown beyond it until they number 2n, where the table allows); the whole pool when
        the radius is 0 or the region holds fewer than ``n``."""
        r = self.radius(n)
        if r == 0:
            return self._pool()
        best = best_record(self.history)
        assert best is not None  # radius() > 0 only once a trial succeeded
        centre = self.config_of(best)
        seen = {Space.key(centre)}
        front: list = [centre]
        region: list = []
        step = 0
        while front and len(region) < self.hyper["pool_size"] and (step < r
                                                                   or len(region) < 2 * n):
            step += 1
            nxt = []
            for c in front:
                for nb in self.candidates.neighbours(c):
                    key = Space.key(nb)
                    if key not in seen:
                        seen.add(key)
                        nxt.append(nb)
                        if key not in self.proposed:
                            region.append(nb)
            front = nxt
        return region if len(region) >= n else region + [
            c for c in self._pool() if Space.key(c) not in seen]

    def _pool(self) -> list:
        """Fresh uniform samples plus neighbours of the incumbents, all unproposed."""
        pool, keys = self.fresh_samples_keyed(self.hyper["pool_size"])
        seen = set(self.proposed) | set(keys)
        best = sorted(self.measured_ok(), key=speed(self.history), reverse=True)
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
