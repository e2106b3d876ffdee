"""BO's and the CGA's options of issue 11: derived features and the local search on the
acquisition (behaviour on the live space of GEMM 4096^3 with recorded rows as observations)."""

import re

import numpy as np
import pytest

from bocast.measure.replay import ReplayDataset
from bocast.space.candidates import SpaceCandidates
from bocast.space.features import DERIVED, Features
from bocast.space.operators.operator import get_operator
from bocast.space.space import Space
from bocast.strategies import StrategyError, make_strategy
from tests.spaces.test_pipelined import BEST_4096

OP = get_operator("gemm").from_args((4096, 4096, 4096))
FAST = {"n_init": 16, "pool_size": 256, "fit_maxiter": 25}


@pytest.fixture(scope="module")
def records():
    ds = ReplayDataset("gemm_4096_4096_4096_v2", OP)
    return [ds.record(c) for c in ds.configs[:48]]


def test_derived_features_of_the_best_live_kernel():
    f = Features(SpaceCandidates(OP.space), "derived")
    x = f([BEST_4096])
    assert x.shape == (1, OP.space.encoded_width + len(DERIVED)) == (1, f.bounds().shape[1])
    # 128 x 128 block tile, BK 32, 4 warps, 32 x 32 = 1024 blocks
    np.testing.assert_array_equal(x[0, -7:-3], np.log2([128, 128, 32, 128]))
    assert x[0, -1] == 10
    smem = OP.space.columns([BEST_4096])["smem_bytes"][0]
    assert x[0, -3] == np.log2(smem) and 3 * 2 * 128 * 32 * 2 <= smem <= 232448


def test_cga_credits_derived_importance_to_the_knobs_behind_it():
    f = Features(SpaceCandidates(OP.space), "derived")
    imp = np.zeros(f.bounds().shape[1])
    imp[-1] = 1.0  # all importance on log2 blocks = f(tile_i, tile_j)
    got = f.knob_importance(imp)
    assert got["tile_i"] == got["tile_j"] == 0.5 and sum(got.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("name, h, message", [
    ("bo", {"features": "ptxas"}, "features: expected one of ['knobs', 'derived'], got 'ptxas'"),
    ("cga", {"features": "ptxas"}, "features: expected one of ['knobs', 'derived'], got 'ptxas'"),
    ("bo", {"local_search": -1}, "local_search: expected an integer between 0 and"),
    ("bo", {"local_search": True}, "local_search: expected an integer between 0 and"),
    ("bo", {"local_search": 1.5}, "local_search: expected an integer between 0 and"),
    ("bo", {"local_search_steps": 0}, "local_search_steps: expected an integer between 1 and"),
])
def test_bad_options_name_the_problem(name, h, message):
    with pytest.raises(StrategyError, match=re.escape(message)):
        make_strategy(name, SpaceCandidates(OP.space), seed=0, **h)


def test_local_search_climbs_to_a_local_optimum_of_the_acquisition(records):
    s = make_strategy("bo", SpaceCandidates(OP.space), seed=0, local_search=2,
                      local_search_steps=60, **FAST)
    s.tell(records)
    picks = s.ask(8)
    assert len(picks) == 8 and s.last_round["local_search_added"] > 0
    assert not any(OP.space.validate_many(picks))
    # redo the last round's climb and check where it ended
    from bocast.strategies.bo.feasibility import AlwaysFeasible

    clf, best = AlwaysFeasible(), s.last_round["best_y"]
    pool = s.fresh_samples(64)
    visited = s._local_search(pool, clf, best)
    assert not {Space.key(c) for c in visited} & (s.proposed | {Space.key(c) for c in pool})
    everything = pool + visited
    scores = s._constrained_log_ei(everything, clf, best)
    top = everything[int(np.argmax(scores))]
    assert scores.max() >= s._constrained_log_ei(pool, clf, best).max()
    nbs = [nb for nb in OP.space.neighbours(top) if Space.key(nb) not in s.proposed]
    assert s._constrained_log_ei(nbs, clf, best).max() <= scores.max(), \
        "the best row a climb reached has no better unproposed neighbour"


@pytest.mark.parametrize("name", ["bo", "cga"])
def test_derived_features_reach_the_model(records, name):
    h = FAST if name == "bo" else {"pop_size": 32, "generations": 1}
    s = make_strategy(name, SpaceCandidates(OP.space), seed=0, features="derived", **h)
    s.tell(records)
    assert len(s.ask(8)) == 8
    width = OP.space.encoded_width + len(DERIVED)
    if name == "bo":
        assert s.surrogate.X.shape[1] == width
    else:
        assert s.model.model.n_features_in_ == width


@pytest.fixture(scope="module")
def bmm_table():
    """A complete table (every configuration of a sub-space), so one-knob moves stay in it."""
    op = get_operator("bmm").from_args((12, 512, 512, 64))
    return ReplayDataset("exhaustive/bmm_12_512_512_64_v2", op)


def _moves_from(candidates, centre, limit):
    """{key: fewest one-knob moves from ``centre``} for the rows within ``limit`` moves."""
    dist, front = {Space.key(centre): 0}, [centre]
    for step in range(1, limit + 1):
        nxt = []
        for c in front:
            for nb in candidates.neighbours(c):
                if Space.key(nb) not in dist:
                    dist[Space.key(nb)] = step
                    nxt.append(nb)
        front = nxt
    return dist


@pytest.mark.parametrize("r0", [1, 2])
def test_trust_region_radius_follows_batches_without_improvement(bmm_table, r0):
    ds = bmm_table
    s = make_strategy("bo", ds.candidates(), seed=0, trust_region=r0, **FAST)
    rows = sorted(ds.configs[:40], key=lambda c: ds.record(c).tflops)  # rising: each is best
    s.tell([ds.record(c) for c in rows[:-1]])
    assert s.radius(8) == r0  # the best is the last record told
    worse = [c for c in ds.configs[40:] if ds.record(c).tflops < ds.record(rows[0]).tflops]
    expected = [r0 - k % (r0 + 1) for k in range(1, 2 * r0 + 3)]  # ..., 0 (everywhere), r0, ...
    got = []
    for k in range(len(expected)):
        s.tell([ds.record(c) for c in worse[8 * k: 8 * (k + 1)]])
        got.append(s.radius(8))
    assert got == expected
    s.tell([ds.record(rows[-1])])  # a better one: back to the full radius
    assert s.radius(8) == r0


def test_trust_region_picks_near_the_best(bmm_table):
    ds = bmm_table
    s = make_strategy("bo", ds.candidates(), seed=0, trust_region=1, **FAST)
    s.tell([ds.record(c) for c in ds.configs[:: len(ds.configs) // 24]])
    best = max(s.measured_ok(), key=lambda r: r.tflops)
    dist = _moves_from(ds.candidates(), s.config_of(best), 3)
    region = s._region(8)
    # one move from the best, then a second until 16 (2 x 8) unproposed rows are there
    assert len(region) >= 16 and all(dist.get(Space.key(c), 99) <= 2 for c in region)
    assert {Space.key(c) for c in region if dist[Space.key(c)] == 1} == \
        {k for k, d in dist.items() if d == 1} - s.proposed
    picks = s.ask(8)
    assert len(picks) == 8 and all(dist.get(Space.key(c), 99) <= 2 for c in picks)
    assert not {Space.key(c) for c in picks} & {r.key for r in s.history}


def test_trust_region_of_radius_zero_is_the_whole_pool(bmm_table):
    ds = bmm_table
    s = make_strategy("bo", ds.candidates(), seed=0, trust_region=1, pool_size=4096,
                      **{k: v for k, v in FAST.items() if k != "pool_size"})
    rows = sorted(ds.configs[:24], key=lambda c: ds.record(c).tflops)
    s.tell([ds.record(c) for c in rows])
    worse = [c for c in ds.configs[24:] if ds.record(c).tflops < ds.record(rows[0]).tflops]
    s.tell([ds.record(c) for c in worse[:8]])  # one batch without a better row
    assert s.radius(8) == 0
    assert len(s._region(8)) == len(ds.configs) - len(s.history)


@pytest.mark.parametrize("value", [-1, 65, 1.5, True])
def test_trust_region_rejects_bad_radii(value):
    with pytest.raises(StrategyError, match=re.escape("trust_region: expected an integer "
                                                      "between 0 and 64")):
        make_strategy("bo", SpaceCandidates(OP.space), seed=0, trust_region=value)


def test_trust_region_gain_ignores_small_improvements(bmm_table):
    ds = bmm_table
    rows = sorted(ds.configs, key=lambda c: ds.record(c).tflops)
    top = ds.record(rows[-1]).tflops
    # a first batch, best row first, then a batch whose last row is a hair (< 1%) above it
    first = [c for c in rows if ds.record(c).tflops < 0.97 * top][-8:][::-1]
    level = max(ds.record(c).tflops for c in first)
    small = [c for c in rows if level < ds.record(c).tflops < 1.01 * level][:1]
    worse = [c for c in rows if ds.record(c).tflops < level][:7]
    assert small and len(worse) == 7
    radii = {}
    for gain in (0.0, 0.02):
        s = make_strategy("bo", ds.candidates(), seed=0, trust_region=1,
                          trust_region_gain=gain, **FAST)
        s.tell([ds.record(c) for c in first])
        s.tell([ds.record(c) for c in worse + small])  # the small gain comes last
        radii[gain] = s.radius(8)
    assert radii == {0.0: 1, 0.02: 0}  # counted: radius kept; not counted: a stale batch


@pytest.mark.parametrize("transform", ["log", "relative"])
def test_y_transform_sets_what_the_gp_is_fitted_on(records, transform):
    s = make_strategy("bo", SpaceCandidates(OP.space), seed=0, y_transform=transform, **FAST)
    s.tell(records)
    assert len(s.ask(8)) == 8
    tflops = np.array([r.tflops for r in records if r.ok])
    y = np.log(tflops) if transform == "log" else tflops / tflops.max()
    assert s.last_round["best_y"] == pytest.approx(y.max())
    # the surrogate's standardisation is that of y: its mean prediction at the observations
    # follows y (a 250x spread of TFLOPS is 5.5 in log, 1.0 relative)
    pred = s.surrogate.predict(s._inputs([s.config_of(r) for r in records if r.ok])).mean.numpy()
    assert np.corrcoef(pred, y)[0, 1] > 0.9
    assert s.surrogate.y_mean == pytest.approx(y.mean())


def test_y_transform_rejects_unknown_values():
    with pytest.raises(StrategyError, match=re.escape("y_transform")):
        make_strategy("bo", SpaceCandidates(OP.space), seed=0, y_transform="sqrt")


def test_the_cgas_cost_model_is_an_option_never_a_silent_fallback(records, monkeypatch):
    import sys

    from bocast.run.identity import run_identity

    ident = run_identity(strategy="cga", options={}, seed=0, batch_size=16, runner="replay",
                         dataset=None)
    assert ident["resolved"]["cost_model"] == "xgboost"  # the model is part of the run
    sk = make_strategy("cga", SpaceCandidates(OP.space), seed=0, cost_model="sklearn-gbr")
    sk.tell(records[:40])
    assert sk.model.backend == "sklearn-gbr" and len(sk.ask(8)) == 8
    monkeypatch.setitem(sys.modules, "xgboost", None)  # as where xgboost is not installed
    with pytest.raises(StrategyError, match="cost_model: sklearn-gbr"):
        make_strategy("cga", SpaceCandidates(OP.space), seed=0)
    with pytest.raises(StrategyError, match="cost_model"):
        make_strategy("cga", SpaceCandidates(OP.space), seed=0, cost_model="lightgbm")
