"""A tune kept in a sub-space (``fix``: ``bocast tune OP --fix KNOB=VALUE``, the configuration's
field, ``bocast.tune``): the candidates' draws, neighbours and projections stay inside it; every
strategy's trials do, warm-started BO's included; the store's identity names the sub-space, so
a resume with another is refused and one with the same goes on."""

import collections
import json

import numpy as np
import pytest

import bocast
from bocast.errors import InputError
from bocast.space.candidates import Restricted, SpaceCandidates
from bocast.space.operators.operator import make
from bocast.space.space import Space

ALLOWED = {"bn": [64, 128], "stages": [8, 10]}


def inside(config, allowed=ALLOWED):
    return all(config.get(k) is None or config[k] in v for k, v in allowed.items())


def test_restricted_candidates_draw_and_walk_only_inside():
    op = make("gemm", (128, 6144, 4096), space="v3")
    whole = SpaceCandidates(op.space, op.workload)
    cands = Restricted(whole, ALLOWED)
    rng = np.random.default_rng(0)
    drawn = cands.sample(200, rng, set())
    assert len(drawn) == 200 and all(map(inside, drawn))
    assert {c["bn"] for c in drawn} == {64, 128} and {c["stages"] for c in drawn} == {8, 10}
    # a caller's own restriction (the CGA's crossover) meets this one: the values in both
    both = cands.sample_restricted(50, rng, {"bn": [128, 256], "swap_ab": ["on"]}, set())
    assert both and all(c["bn"] == 128 and c["swap_ab"] == "on" and c["stages"] in (8, 10)
                        for c in both)
    c = drawn[0]
    assert all(map(inside, cands.neighbours(c)))
    assert len(cands.neighbours(c)) < len(whole.neighbours(c))
    outside = op.space.complete({**c, "bn": 256})
    if whole.contains(outside):
        assert not cands.contains(outside) and cands.project(outside) is None
    assert cands.contains(c) and cands.project(c) == c
    # the excluded keys stay out
    keys = {Space.key(x) for x in drawn}
    assert not keys & {Space.key(x) for x in cands.sample(100, rng, keys)}


def _tune(tmp_path, name, fix, **change):
    cfg = {"workload": {"op": "gemm", "shape": [128, 6144, 4096], "space": "v3"},
           "strategy": {"name": "bo", "n_init": 8, "pool_size": 256, "fit_maxiter": 10,
                        "warm_start": "none"},
           "batch_size": 8, "budget": {"trials": 16}, "seed": 0, "runner": "standin",
           "output": str(tmp_path / name), **({"fix": fix} if fix is not None else {}),
           **change}
    return bocast.tune(cfg, records=str(tmp_path / "library"))


def _configs(store):
    return [json.loads(k) for k in bocast.load(store)["key"]]


def test_a_tune_stays_inside_and_its_identity_names_the_sub_space(tmp_path):
    result = _tune(tmp_path, "bo", ALLOWED)
    configs = _configs(result.store)
    assert len(configs) == 16 and all(map(inside, configs))
    with pytest.raises(InputError, match=r"fix: .*there, .*here"):
        _tune(tmp_path, "bo", {"bn": [64]})  # another sub-space: another run
    with pytest.raises(InputError, match=r"fix: \{.*\} there, None here"):
        _tune(tmp_path, "bo", None)  # the whole space: another run too
    more = _tune(tmp_path, "bo", ALLOWED, budget={"trials": 24})  # the same run, resumed
    assert more.trials == 24 and all(map(inside, _configs(more.store)))
    # the same run of the whole space: no fix in its identity (stores of before resume)
    whole = _tune(tmp_path, "whole", None)
    assert not all(map(inside, _configs(whole.store)))


@pytest.mark.parametrize("strategy", ["bo", "cga", "random"])
def test_every_strategy_on_replay_stays_inside_warm_started_bo_too(tmp_path, strategy):
    fix = {"swap_ab": "on", "split_k": [1, 2]}
    cfg = {"workload": {"op": "gemm", "shape": [32, 4096, 4096], "dtype": "fp16:fp32",
                        "layout": "NT", "space": "v3"},
           "strategy": {"name": strategy,
                        **({"warm_start": "auto", "n_init": 8, "pool_size": 256,
                            "fit_maxiter": 10} if strategy == "bo" else {})},
           "batch_size": 8, "budget": {"trials": 24}, "seed": 0, "runner": "replay",
           "dataset": "exhaustive/gemm_32_4096_4096_v3", "fix": fix,
           "output": str(tmp_path / strategy)}
    result = bocast.tune(cfg, records=str(tmp_path / "library"))
    configs = _configs(result.store)
    assert len(configs) == 24
    assert collections.Counter(c["swap_ab"] for c in configs) == {"on": 24}
    assert {c["split_k"] for c in configs} <= {1, 2}
    if strategy == "bo":
        assert result.summary["warm_start_sources"]  # the sources' rows were projected inside


def test_a_study_asks_inside_its_sub_space_and_its_store_names_it(tmp_path):
    """``bocast.create_study(..., fix=)``: what a study asks lies in the sub-space (BO and
    random); a bad ``fix`` is one line naming it; a study on a store resumes only with the
    same sub-space (the identity names it, as a tune's)."""
    from bocast.schema import ConfigError

    workload = {"op": "gemm", "shape": [128, 6144, 4096], "space": "v3"}
    for strategy, options in (("random", {}), ("bo", {"n_init": 4, "pool_size": 128,
                                                       "fit_maxiter": 5})):
        s = bocast.create_study(workload=workload, strategy=strategy, seed=0, fix=ALLOWED,
                                **options)
        asked = s.ask(8)
        for i, config in enumerate(asked):
            s.tell(config, tflops=1.0 + i)
        asked += s.ask(8)  # BO's model proposes now (4 initial draws told)
        assert len(asked) == 16 and all(map(inside, asked)), strategy
    whole = bocast.create_study(workload=workload, strategy="random", seed=0).ask(32)
    assert not all(map(inside, whole))
    for fix, error, message in [
        ({"colour": "red"}, InputError, "colour"),
        ({"bn": 80}, InputError, "80"),
        ({"bm": 8, "swap_ab": "off"}, ConfigError, "fix: no feasible configuration"),
    ]:
        with pytest.raises(error) as e:
            bocast.create_study(workload=workload, strategy="random", fix=fix)
        assert message in str(e.value) and "\n" not in str(e.value)
    store = str(tmp_path / "study.db")
    first = bocast.create_study(workload=workload, strategy="random", store=store, fix=ALLOWED)
    (config,) = first.ask()
    first.tell(config, tflops=2.0)
    first.close()
    with pytest.raises(InputError, match=r"fix: .*there, None here"):
        bocast.create_study(workload=workload, strategy="random", store=store)
    again = bocast.create_study(workload=workload, strategy="random", store=store, fix=ALLOWED)
    assert len(again.records) == 1 and all(map(inside, again.ask(4)))
