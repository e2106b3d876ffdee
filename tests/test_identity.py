"""A store resumes only the run it holds (bocast.run.identity): `bocast tune`, a study and a
comparison refuse a store of another strategy, options or seed, and a default that changed
since the run began, and say which."""

import hashlib
import os

import pytest
import yaml

import bocast
from bocast.records.datasets import locate
from bocast.records.store import Store
from bocast.run import identity
from bocast.schema import ConfigError
from bocast.strategies import strategy_class

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
         "space": "v1"}
TUNE = {"workload": SMALL, "strategy": {"name": "random"}, "batch_size": 8,
        "budget": {"trials": 8}, "seed": 0, "runner": "replay",
        "dataset": locate("gemm_32_2048_1000")}


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _store(path):
    from bocast.space.operators.operator import from_workload

    return Store(path, from_workload(SMALL).workload)


def _tune(tmp_path, **change):
    return bocast.tune({**TUNE, "output": str(tmp_path / "run"), **change})


@pytest.mark.parametrize("change, named", [
    ({"strategy": {"name": "ga"}}, "strategy: 'random' there, 'ga' here"),
    ({"seed": 3}, "seed: 0 there, 3 here"),
    ({"batch_size": 4}, "batch_size: 8 there, 4 here"),
])
def test_tune_refuses_a_store_of_another_run_and_leaves_it(tmp_path, change, named):
    first = _tune(tmp_path)
    before = _digest(first.store)
    with pytest.raises(ConfigError, match="holds a run of another configuration") as e:
        _tune(tmp_path, **change)
    assert named in str(e.value) and str(tmp_path / "run" / "records.db") in str(e.value)
    assert "default changed" not in str(e.value)  # nothing here is a default's doing
    assert _digest(first.store) == before
    assert _tune(tmp_path, budget={"trials": 16}).trials == 16  # the same run resumes


def test_an_option_set_to_its_default_is_the_same_run(tmp_path):
    _tune(tmp_path, strategy={"name": "bo", "n_init": 8, "pool_size": 64, "fit_maxiter": 5})
    same = {"name": "bo", "n_init": 8, "pool_size": 64, "fit_maxiter": 5, "y_transform": "log"}
    assert _tune(tmp_path, strategy=same, budget={"trials": 12}).trials == 12
    with pytest.raises(ConfigError, match="option y_transform: 'log' there, 'relative' here"):
        _tune(tmp_path, strategy={**same, "y_transform": "relative"})


def test_a_changed_default_stops_a_resumed_run_and_says_so(tmp_path):
    first = _tune(tmp_path, strategy={"name": "ga"})
    with _store(first.store) as store:  # as if the run had begun under another default
        held = store.get_meta("run")
        default = held["resolved"]["elite"]
        held["resolved"]["elite"] = default + 1
        store.set_meta("run", held)
    with pytest.raises(ConfigError) as e:
        _tune(tmp_path, strategy={"name": "ga"})
    assert f"option elite: {default + 1} there, {default} here" in str(e.value)
    assert "elite set in neither configuration: its default changed" in str(e.value)
    # setting it as it was resumes the run
    assert _tune(tmp_path, strategy={"name": "ga", "elite": default + 1},
                 budget={"trials": 16}).trials == 16


def test_an_option_added_since_the_run_began_does_not_stop_it_at_its_default(tmp_path):
    first = _tune(tmp_path, strategy={"name": "ga"})
    with _store(first.store) as store:  # as if "mutation" had not existed then
        held = store.get_meta("run")
        del held["resolved"]["mutation"]
        store.set_meta("run", held)
    assert _tune(tmp_path, strategy={"name": "ga"}, budget={"trials": 16}).trials == 16
    with _store(first.store) as store:
        held = store.get_meta("run")
        del held["resolved"]["mutation"]
        store.set_meta("run", held)
    with pytest.raises(ConfigError, match="option mutation: None there, 0.2 here"):
        _tune(tmp_path, strategy={"name": "ga", "mutation": 0.2})


def test_a_store_from_before_resolved_options_resumes_and_records_them(tmp_path):
    first = _tune(tmp_path)
    with _store(first.store) as store:
        held = store.get_meta("run")
        del held["resolved"]
        store.set_meta("run", held)
    assert _tune(tmp_path, budget={"trials": 16}).trials == 16
    with _store(first.store) as store:
        assert store.get_meta("run")["resolved"] == strategy_class("random").options.defaults()


def test_a_study_refuses_a_store_of_another_strategy(tmp_path):
    db = tmp_path / "study.db"
    with bocast.create_study(SMALL, strategy="random", seed=1, store=db) as s:
        s.tell(s.ask(1)[0], tflops=1.0)
    with pytest.raises(ConfigError, match="strategy: 'random' there, 'ga' here"):
        bocast.create_study(SMALL, strategy="ga", seed=1, store=db)
    with bocast.create_study(SMALL, strategy="random", seed=1, store=db) as again:
        assert len(again.trials) == 1


def test_compare_checks_stores_before_running(tmp_path):
    from bocast.run import comparison as compare

    cfg_path = tmp_path / "c.yaml"
    spec = {"name": "ident", "workload": SMALL, "runner": "replay", "dataset": TUNE["dataset"],
            "strategies": [{"label": "ga", "name": "ga"}], "seeds": 1,
            "budget": {"trials": 8}, "batch_size": 8, "output": str(tmp_path / "runs"),
            "results": str(tmp_path / "res")}
    cfg_path.write_text(yaml.safe_dump(spec))
    cfg = compare.load(str(cfg_path))
    op = compare.validate(cfg)[0]
    s, seed, path, _ = compare.plan(cfg)[0]
    os.makedirs(os.path.dirname(path))
    ident = compare.run_identity(cfg, s, seed)
    ident["resolved"]["elite"] = ident["resolved"]["elite"] + 1
    with Store(path, op.workload) as store:
        store.set_meta("run", ident)
    with pytest.raises(ConfigError, match="elite set in neither configuration"):
        compare.check_stores(cfg, op)


def test_identity_of_metaschedule_keeps_its_options_as_given():
    ident = identity.run_identity(strategy="metaschedule", options={"x": 1}, seed=0,
                                  batch_size=8, runner="local", dataset=None)
    assert ident["resolved"] == {"x": 1}


def test_a_run_of_the_runner_called_tvm_resumes_as_local():
    """The local runner's old name (before 2026-11-26) names the same run."""
    old, new = (identity.run_identity(strategy="random", options={}, seed=0, batch_size=8,
                                      runner=name, dataset=None) for name in ("tvm", "local"))
    assert identity.mismatch(old, new) is None
    rpc = identity.run_identity(strategy="random", options={}, seed=0, batch_size=8,
                                runner="rpc", dataset=None)
    assert "runner: 'local' there, 'rpc' here" in identity.mismatch(old, rpc)


#: a small CGA (the cost model fits after the first batch)
CGA = {"name": "cga", "pop_size": 16, "generations": 1, "select": 4, "history_topk": 4}


def test_the_cgas_cost_model_is_part_of_the_run(tmp_path):
    """Two runs that differ only in the CGA's cost model never resume into each other (the
    models propose differently). A store of before the option existed (its identity has no
    cost_model) resumes at the default, xgboost, and records it: the CGA ran xgboost then
    wherever xgboost was installed, and it was a dependency."""
    first = _tune(tmp_path, strategy={**CGA, "cost_model": "sklearn-gbr"}, budget={"trials": 16})
    with pytest.raises(ConfigError, match="option cost_model: 'sklearn-gbr' there, 'xgboost' here"):
        _tune(tmp_path, strategy=CGA, budget={"trials": 24})
    with _store(first.store) as store:
        assert store.get_meta("run")["resolved"]["cost_model"] == "sklearn-gbr"
        held = store.get_meta("run")  # as if written before the option existed
        del held["resolved"]["cost_model"]
        store.set_meta("run", held)
    assert _tune(tmp_path, strategy=CGA, budget={"trials": 24}).trials == 24
    with _store(first.store) as store:
        assert store.get_meta("run")["resolved"]["cost_model"] == "xgboost"
    with pytest.raises(ConfigError, match="option cost_model: 'xgboost' there, 'sklearn-gbr'"):
        _tune(tmp_path, strategy={**CGA, "cost_model": "sklearn-gbr"}, budget={"trials": 32})
