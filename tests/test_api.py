"""The Python API: the README's example as written, tune() against `bocast tune`, ask/tell."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import bocast
from bocast.errors import InputError
from bocast.records.datasets import locate
from bocast.records.status import Status
from bocast.schema import ConfigError
from bocast.space.space import Space

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
         "space": "v1"}
GOOD = {
    "workload": SMALL,
    "strategy": {"name": "bo", "acquisition": "logei", "n_init": 8, "pool_size": 128,
                 "fit_maxiter": 10, "warm_start": "none"},
    "batch_size": 8,
    "budget": {"trials": 24},
    "seed": 0,
    "runner": "replay",
    "dataset": "gemm_32_2048_1000",
}


def readme_example() -> str:
    text = Path(ROOT, "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- readme-example: python-api -->\n```python\n(.*?)\n```", text, re.S)
    assert m, "README.md lost its Python API example (or its marker)"
    return m.group(1)


def test_readme_example_runs_as_written(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example's dataset path is the repository's
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), "README.md", "exec"), {"__name__": "readme"})
    printed = out.getvalue()
    assert re.search(r"^32 trials, best \d+\.\d TFLOPS: \{", printed, re.M), printed
    assert re.search(r"^4 told, best \d+\.\d TFLOPS$", printed, re.M), printed


def test_tune_is_bocast_tune(tmp_path, bocast_cli):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "output": str(tmp_path / "cli")}))
    code, out, err = bocast_cli("tune", str(path), "--json")
    assert code == 0, err
    cli = json.loads(out.strip().splitlines()[-1])

    result = bocast.tune({**GOOD, "output": str(tmp_path / "api")})
    assert result.trials == cli["trials"] == 24
    assert result.best_tflops == cli["best_tflops"] and result.best_config == cli["best_config"]
    assert result.store == str(tmp_path / "api" / "records.db")
    assert list(bocast.load(result.store)["key"]) == \
        list(bocast.load(tmp_path / "cli" / "records.db")["key"])
    assert json.loads((tmp_path / "api" / "summary.json").read_text())["provenance"]["git_sha"]
    # a path runs the same; the store is resumed, so nothing more is measured
    again = bocast.tune(path)
    assert (again.trials, again.best_tflops) == (24, cli["best_tflops"])
    assert again.summary["config_sha256"] == cli["config_sha256"]


COMPARE = {"name": "api_compare", "workload": GOOD["workload"], "runner": "replay",
           "dataset": locate(GOOD["dataset"]),
           "strategies": [{"label": "bo", "name": "bo", "n_init": 8},
                          {"label": "random", "name": "random"}],
           "seeds": 2, "budget": {"trials": 16}, "batch_size": 8}


def test_compare_is_bocast_compare(tmp_path, bocast_cli):
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump({**COMPARE, "output": str(tmp_path / "cli"),
                                    "results": str(tmp_path / "cli" / "res")}))
    code, _, err = bocast_cli("compare", str(path), "--json")
    assert code == 0, err
    cli = json.loads((tmp_path / "cli" / "res.json").read_text())

    api = bocast.compare({**COMPARE, "output": str(tmp_path / "api"),
                          "results": str(tmp_path / "api" / "res")})
    assert json.loads(json.dumps(api)) == json.loads((tmp_path / "api" / "res.json").read_text())
    for label in ("bo", "random"):
        assert api["strategies"][label]["median_best"] == cli["strategies"][label]["median_best"]
    # a path runs the same: the CLI's finished stores are resumed, nothing is measured again
    again = bocast.compare(path)
    assert again["strategies"]["bo"]["median_best"] == cli["strategies"]["bo"]["median_best"]


@pytest.mark.parametrize("config, message", [
    ({**COMPARE, "seeds": 0}, "seeds"),
    ({**COMPARE, "strategies": [{"label": "x", "name": "annealing"}]}, "unknown strategy"),
    ("no/such/compare.yaml", "no/such/compare.yaml: no such file"),
])
def test_compare_bad_input_is_one_line_and_writes_nothing(tmp_path, config, message):
    if isinstance(config, dict):
        config = {**config, "output": str(tmp_path / "out"), "results": str(tmp_path / "res")}
    with pytest.raises(InputError) as e:
        bocast.compare(config)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("res*"))


@pytest.mark.parametrize("config, error, message", [
    ({**GOOD, "seed": "zero"}, ConfigError, "seed: expected an integer"),
    ({**GOOD, "strategy": {"name": "annealing"}}, ConfigError,
     "strategy.name: unknown strategy 'annealing'"),
    ({k: v for k, v in GOOD.items() if k != "dataset"}, ConfigError,
     "dataset: the replay runner needs"),
    ("no/such/config.yaml", ConfigError, "no/such/config.yaml: no such file"),
])
def test_tune_bad_input_is_the_commands_error_and_writes_nothing(tmp_path, config, error,
                                                                 message):
    if isinstance(config, dict):
        config = {**config, "output": str(tmp_path / "out")}
    with pytest.raises(error) as e:
        bocast.tune(config)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not os.path.exists(tmp_path / "out")


def study(**kw):
    return bocast.create_study(workload=SMALL, strategy="random", seed=0, **kw)


def test_ask_tell_builds_typed_records_and_best():
    s = study()
    a, b, c = s.ask(3)
    assert len({json.dumps(x, sort_keys=True, default=list) for x in (a, b, c)}) == 3
    ra = s.tell(a, tflops=10.0, latency_ms=0.5)
    rb = s.tell(b, status="build_error", error="ptxas: too many registers")
    rc = s.tell(c, tflops=12.5, status=Status.OK)
    assert ra.status is Status.OK and rb.status is Status.BUILD_ERROR and rc.ok
    assert ra.key == Space.key(a) and ra.config["tile_i"] == list(a["tile_i"])
    assert s.best is rc and s.best.tflops == 12.5
    df = s.trials
    assert list(df["status"]) == ["ok", "build_error", "ok"] and list(df["tflops"])[2] == 12.5
    assert {"tile_i_0", "vec", "latency_ms"} <= set(df.columns)
    assert len(s.strategy.history) == 3  # the strategy was told


def test_tell_rejects_bad_input_in_one_line():
    s = study()
    (config,) = s.ask()
    for kwargs, message in [
        (dict(status="exploded"), "tell: unknown status 'exploded'; known: ok, invalid"),
        (dict(), "tell: tflops: status ok needs tflops > 0"),
        (dict(tflops=1.0, colour="red"), "tell: unknown field(s) ['colour']"),
    ]:
        with pytest.raises(InputError) as e:
            s.tell(config, **kwargs)
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"^tell: configuration not in the space \(vec.choice\)"):
        s.tell({**config, "vec": 3}, tflops=1.0)
    with pytest.raises(InputError, match=r"missing knob\(s\) \['vec'\]"):
        s.tell({k: v for k, v in config.items() if k != "vec"}, tflops=1.0)
    s.tell(config, tflops=1.0)
    with pytest.raises(InputError, match="already told"):
        s.tell(config, tflops=2.0)
    with pytest.raises(ConfigError, match="strategy.acquisition: expected one of"):
        bocast.create_study(workload=SMALL, strategy="bo", acquisition="ucb")
    with pytest.raises(ConfigError, match="^workload: gemm: shape needs 3"):
        bocast.create_study(workload={"op": "gemm", "shape": [1, 2]})


def test_a_study_on_a_store_resumes(tmp_path):
    db = tmp_path / "study.db"
    with study(store=db) as s:
        told = s.ask(3)
        for i, config in enumerate(told):
            s.tell(config, tflops=float(i + 1))
    assert len(bocast.load(db)) == 3
    with study(store=db) as again:
        assert len(again.trials) == 3 and again.best.tflops == 3.0
        assert len(again.strategy.history) == 3  # fed back to the strategy
        keys = {json.dumps(c, sort_keys=True, default=list) for c in told}
        fresh = again.ask(8)
        assert not keys & {json.dumps(c, sort_keys=True, default=list) for c in fresh}
        again.tell(fresh[0], status="run_timeout")
    assert list(bocast.load(db)["status"]) == ["ok", "ok", "ok", "run_timeout"]


def test_optimize_asks_measures_and_tells(tmp_path):
    calls = []

    def objective(config):
        calls.append(config)
        return "build_error" if len(calls) == 2 else float(len(calls))

    db = tmp_path / "opt.db"
    with study(store=db) as s:
        best = s.optimize(objective, n_trials=5, batch_size=2)
        assert len(calls) == 5 and best is s.best and best.tflops == 5.0
    assert list(bocast.load(db)["status"]) == ["ok", "build_error", "ok", "ok", "ok"]

    def broken(config):
        raise RuntimeError("the GPU fell over")

    with study(store=db) as s, pytest.raises(RuntimeError):
        s.optimize(broken, n_trials=3)
    assert len(bocast.load(db)) == 5  # what was told before stays; nothing half-written
    with study() as s, pytest.raises(InputError, match="n_trials must be a positive integer"):
        s.optimize(objective, n_trials=0)


def test_import_is_cheap():
    code = ("import sys, bocast; heavy = [m for m in ('torch', 'tvm', 'pandas', 'matplotlib') "
            "if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
