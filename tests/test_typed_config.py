"""Typed configuration objects (bocast.options): the same fields, defaults and messages as the
sections derived from them (bocast.schema.Section.of), and the same runs as the mappings they
stand for."""

import copy
import dataclasses
import pickle
import subprocess
import sys
import typing

import pytest
import yaml

import bocast
from bocast import options, schema
from bocast.api import prepare_compare
from bocast.schema import ConfigError
from bocast.strategies import strategies, typed_options
from tests.test_api import COMPARE, GOOD, ROOT, SMALL


def sections():
    yield bocast.Budget, options.BUDGET
    yield bocast.RunnerOptions, options.RUNNER_OPTIONS
    yield bocast.Workload, options.WORKLOAD
    for name, cls in strategies().items():
        yield typed_options(name), cls.options


@pytest.mark.parametrize("typed, section", list(sections()), ids=lambda x: getattr(x, "__name__",
                                                                                     ""))
def test_every_field_of_a_section_is_in_its_class_with_its_default(typed, section):
    fields = dataclasses.fields(typed)
    assert [f.name for f in fields] == section.names
    hints = typing.get_type_hints(typed)
    for f in fields:
        want = section[f.name]
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        assert default == want.default or (want.required and default is dataclasses.MISSING)
        if want.choices:
            assert set(typing.get_args(hints[f.name])) >= set(want.choices)


def typed(name):
    return getattr(bocast, name, None) or getattr(bocast.strategies, name)


# (class, its arguments, the same values in a tune configuration): choices, ranges, types,
# a required field left out, in several sections
BAD = [
    ("Budget", {"trials": 0}, {"budget": {"trials": 0}}),
    ("Budget", {"trials": 8, "seconds": -1}, {"budget": {"trials": 8, "seconds": -1}}),
    ("Budget", {}, {"budget": {}}),
    ("RunnerOptions", {"repeats": 0}, {"runner_options": {"repeats": 0}}),
    ("RunnerOptions", {"reject_spills": "yes"}, {"runner_options": {"reject_spills": "yes"}}),
    ("BOOptions", {"acquisition": "pi"}, {"strategy": {"name": "bo", "acquisition": "pi"}}),
    ("BOOptions", {"boundary_share": 1.5}, {"strategy": {"name": "bo", "boundary_share": 1.5}}),
    ("CGAOptions", {"key_ratio": 0}, {"strategy": {"name": "cga", "key_ratio": 0}}),
    ("GAOptions", {"mutation": True}, {"strategy": {"name": "ga", "mutation": True}}),
    ("Workload", {"op": "gemm"}, {"workload": {"op": "gemm"}}),
]


@pytest.mark.parametrize("name, kwargs, override", BAD,
                         ids=[f"{n}-{sorted(k)}" for n, k, _ in BAD])
def test_a_bad_value_is_the_yaml_files_error(tmp_path, name, kwargs, override):
    with pytest.raises(ConfigError) as typed_error:
        typed(name)(**kwargs)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**GOOD, **override, "output": str(tmp_path / "out")}))
    with pytest.raises(ConfigError) as yaml_error:
        bocast.tune(path)
    assert str(yaml_error.value) == f"{path}: {typed_error.value}"
    assert "\n" not in str(typed_error.value) and not (tmp_path / "out").exists()


def test_to_dict_and_values():
    bo = bocast.strategies.BOOptions(acquisition="logei", n_init=8, beta0=3)
    assert bo.to_dict() == {"n_init": 8, "beta0": 3.0} and isinstance(bo.beta0, float)
    assert bo.mapping() == {"name": "bo", "n_init": 8, "beta0": 3.0}
    assert set(bo.to_dict(defaults=True)) == set(strategies()["bo"].options.names)
    assert bocast.Budget(trials=4).to_dict() == {"trials": 4}  # a required field is always there
    with pytest.raises(dataclasses.FrozenInstanceError):
        bo.n_init = 9
    assert bo.warm_start == "auto"  # the default since issue 26: the records library's choice
    listed = bocast.strategies.BOOptions(warm_start=["a"])  # a list default is not shared
    assert listed.warm_start == ["a"] and listed.warm_start is not \
        bocast.strategies.BOOptions(warm_start=["a"]).warm_start
    with pytest.raises(AttributeError):
        bocast.strategies.AnnealingOptions  # noqa: B018


def test_positional_values_copies_and_pickles():
    with pytest.raises(ConfigError, match=r"^budget: give the fields by name \(trials, seconds\)"):
        bocast.Budget(4)
    budget, bo = bocast.Budget(trials=4), bocast.strategies.BOOptions(warm_start=["a"])
    assert copy.deepcopy(budget) == budget == pickle.loads(pickle.dumps(budget))
    assert copy.deepcopy(bo) == bo == pickle.loads(pickle.dumps(bo))


def test_a_shared_field_must_agree_with_the_class():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Bad(options.Options):
        seed: str = schema.SEED.opt()  # SEED is an integer

    with pytest.raises(TypeError, match="Bad.seed: the annotation or default"):
        schema.Section.of(Bad)


def test_a_typed_tune_config_is_the_same_run_as_the_mapping(tmp_path):
    mapping = bocast.tune({**GOOD, "budget": {"trials": 16}, "runner_options": {"repeats": 3},
                           "output": str(tmp_path / "mapping")})
    BOOptions = bocast.strategies.BOOptions
    typed = bocast.tune({
        "workload": bocast.Workload(**SMALL),
        "strategy": BOOptions(n_init=8, pool_size=128, fit_maxiter=10, warm_start="none"),
        "batch_size": 8, "budget": bocast.Budget(trials=16), "seed": 0,
        "runner": "replay", "dataset": GOOD["dataset"],
        "runner_options": bocast.RunnerOptions(repeats=3), "output": str(tmp_path / "typed")})
    assert (typed.trials, typed.best_tflops, typed.best_config) == \
        (mapping.trials, mapping.best_tflops, mapping.best_config)
    assert typed.summary["strategy_options"] == mapping.summary["strategy_options"]
    assert list(bocast.load(typed.store)["key"]) == list(bocast.load(mapping.store)["key"])


def test_a_typed_comparison_is_checked_as_the_mapping(tmp_path):
    where = {"output": str(tmp_path / "out"), "results": str(tmp_path / "res")}
    s = bocast.strategies
    mapping = prepare_compare({**COMPARE, **where})
    typed = prepare_compare({**COMPARE, **where, "workload": bocast.Workload(**SMALL),
                             "budget": bocast.Budget(trials=16),
                             "strategies": [s.BOOptions(n_init=8).entry(label="bo"),
                                            s.RandomOptions()]})
    assert {k: v for k, v in vars(typed).items() if k != "raw"} == \
        {k: v for k, v in vars(mapping).items() if k != "raw"}


def test_create_study_takes_typed_workload_and_strategy():
    options = dict(n_init=4, pool_size=64)
    typed = bocast.create_study(bocast.Workload(**SMALL), seed=1,
                                strategy=bocast.strategies.BOOptions(n_init=4), pool_size=64)
    mapping = bocast.create_study(SMALL, strategy="bo", seed=1, **options)
    assert typed.strategy.hyper == mapping.strategy.hyper
    assert typed.ask(4) == mapping.ask(4)


def test_typed_classes_keep_import_cheap():
    code = ("import sys, bocast; bocast.Budget(trials=1); bocast.RunnerOptions(repeats=2); "
            "bocast.Workload(op='gemm', shape=[8, 8, 8]); heavy = [m for m in "
            "('torch', 'tvm', 'pandas') if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
