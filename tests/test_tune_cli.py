"""`bocast tune`: a replay run end to end, resume, and one clear error per bad configuration."""

import json
import os
import subprocess
import sys

import pytest
import yaml

GOOD = {
    "workload": {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
                 "space": "v1"},
    "strategy": {"name": "bo", "acquisition": "logei", "n_init": 16, "pool_size": 256,
                 "fit_maxiter": 20, "warm_start": "none"},
    "batch_size": 16,
    "budget": {"trials": 48},
    "seed": 0,
    "runner": "replay",
    "dataset": "gemm_32_2048_1000",
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tune(tmp_path, cfg, *extra):
    cfg = dict(cfg)
    cfg.setdefault("output", str(tmp_path / "out"))
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "bocast.cli", "tune", str(path), *extra],
                          capture_output=True, text=True, cwd=ROOT)


def test_replay_run_writes_records_and_json_summary_and_resumes(tmp_path):
    proc = tune(tmp_path, GOOD, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["trials"] == 48 and summary["best_tflops"] > 0
    assert "trials_to_95pct" in summary and summary["seconds"] >= 0
    assert "replay" in proc.stderr  # says which runner it uses
    assert os.path.exists(tmp_path / "out" / "records.db")
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["provenance"]["git_sha"] and saved["config_sha256"]
    # a larger budget resumes: only the missing trials run
    proc = tune(tmp_path, {**GOOD, "budget": {"trials": 64}}, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "resuming: 48 trials" in proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["trials"] == 64


def _without(d, key):
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize("cfg, message", [
    (_without(GOOD, "seed"), "seed: missing"),
    ({**GOOD, "seed": "zero"}, "seed: expected an integer"),
    ({**GOOD, "budgett": {"trials": 3}}, "unknown field(s) ['budgett']"),
    ({**GOOD, "budget": {"trials": 0}}, "budget.trials: expected an integer between 1 and"),
    ({**GOOD, "strategy": {"name": "annealing"}}, "strategy.name: unknown strategy 'annealing'"),
    ({**GOOD, "strategy": {"name": "bo", "acquisition": "ucb"}},
     "strategy.acquisition: expected one of ['logei', 'becbo', 'ts', 'qlogei'], got 'ucb'"),
    ({**GOOD, "workload": {**GOOD["workload"], "shape": [1024, 1024, 1024]}},
     "data/gemm_32_2048_1000 was recorded for workload"),
    ({**GOOD, "workload": {"op": "gemm", "shape": [1, 2]}}, "workload: gemm: shape needs 3"),
    ({**GOOD, "runner": "fpga"},
     "runner: expected one of ['local', 'rpc', 'replay', 'standin'], an installed runner's "
     "name (entry point group bocast.runners) or package.module:ClassName, got 'fpga'"),
    (_without(GOOD, "dataset"), "dataset: the replay runner needs"),
    ({**GOOD, "runner_options": {"reject_spills": "yes"}},
     "runner_options.reject_spills: expected true or false, got 'yes'"),
    ({**GOOD, "strategy": {"name": "bo", "features": "foo"}},
     "strategy.features: expected one of ['knobs', 'derived'], got 'foo'"),
    ({**GOOD, "strategy": {"name": "bo", "local_search": -1}},
     "strategy.local_search: expected an integer between 0 and 100000, got -1"),
    ({**GOOD, "strategy": {"name": "bo", "local_search_steps": 0}},
     "strategy.local_search_steps: expected an integer between 1 and 100000, got 0"),
    ({**GOOD, "strategy": {"name": "bo", "batch_size": 8}},
     ("strategy: ['batch_size'] belong to comparisons, not to one run (its batch is the "
      "top-level batch_size)")),
])
def test_bad_config_one_error_exit_2_nothing_written(tmp_path, cfg, message, bocast_cli):
    cfg = {**cfg, "output": str(tmp_path / "out")}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    code, out, err = bocast_cli("tune", str(tmp_path / "cfg.yaml"))
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("command", ["tune", "compare"])
@pytest.mark.parametrize("what, make, message", [
    ("missing.yaml", None, "no such file"),
    ("folder", lambda p: p.mkdir(), "is a folder, not a configuration file"),
    ("broken.yaml", lambda p: p.write_text("a: [1,"), "not valid YAML"),
    ("content.yaml", lambda p: p.write_text("seed: [0]\n"), ": "),
])
def test_a_config_files_name_leads_its_error_once(tmp_path, command, what, make, message,
                                                 bocast_cli):
    path = tmp_path / what
    if make is not None:
        make(path)
    code, out, err = bocast_cli(command, str(path))
    assert code == 2 and not out
    assert err.startswith(f"bocast: error: {path}: ") and message in err, err
    assert err.count(str(path)) == 1, err


def test_old_runner_names_still_work_and_say_their_new_name(tmp_path, capsys, monkeypatch):
    from bocast.measure import kinds
    from bocast.run import comparison, config

    monkeypatch.setattr(kinds, "_told", set())
    good = {**GOOD, "output": str(tmp_path / "out")}
    assert config.parse({**good, "runner": "tvm", "dataset": None}).runner == "local"
    assert config.parse(good, runner="gpu").runner == "local"
    with open(os.path.join(ROOT, "experiments/compare/live_v3_gemm_4096_4096_4096.yaml")) as f:
        raw = yaml.safe_load(f)
    raw.update(runner="tvm", output=str(tmp_path / "runs"), results=str(tmp_path / "r"))
    assert comparison.parse(raw, ROOT).runner == "local"
    err = capsys.readouterr().err.splitlines()
    assert err == ["note: runner 'tvm' is now called 'local' (the old name still works)",
                   "note: runner 'gpu' is now called 'local' (the old name still works)"]


def test_every_quick_option_is_a_flag_and_sets_its_field(bocast_cli):
    """bocast.options.QUICK_OPTIONS is the one list of `bocast tune OP` flags and of the
    keywords of bocast.tune(op=...): each is in --help and lands on the field it names."""
    from bocast.api import quick_config
    from bocast.options import QUICK_OPTIONS

    code, out, _ = bocast_cli("tune", "--help")
    assert code == 0 and all(o.flag in out for o in QUICK_OPTIONS)
    # the replay runner: the one that takes every option (--dataset is replay's alone)
    given = {"dtype": "fp16:fp16", "layout": "NN", "fuse": "none", "space": "v2", "strategy": "bo",
             "trials": 7, "seconds": 9.5, "seed": 3, "batch_size": 4, "dataset": "d",
             "output": "o", "store": "s/x.db", "warm_start": "none", "l2": "flushed",
             "retime_top": 3}
    assert set(given) == {o.name for o in QUICK_OPTIONS}
    cfg = quick_config("gemm", (256, 256, 256), runner="replay", **given)
    for o in QUICK_OPTIONS:
        node = cfg
        for part in o.key.split("."):
            node = node[part]
        assert node == given[o.name], o
    left_out = quick_config("gemm", (256, 256, 256), runner="standin", space=None)
    assert (left_out["workload"]["space"], left_out["budget"]["trials"], left_out["seed"],
            left_out["batch_size"], left_out["strategy"]["name"]) == ("auto", 64, 0, 16, "bo")
    # the flag checks what the configuration's field checks (seed: 0 to 2**31 - 1)
    code, _, err = bocast_cli("tune", "gemm", "--shape", "256,256,256", "--seed", str(2**31))
    assert code == 2 and "--seed" in err and "2147483647" in err
