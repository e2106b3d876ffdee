"""`bocast compare` on replay: outputs, statistics, and one clear error per bad field."""

import json
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD = {
    "name": "t",
    "workload": {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT"},
    "runner": "replay",
    "dataset": "experiments/data/gemm_32_2048_1000",
    "strategies": [{"label": "bo", "name": "bo", "n_init": 16, "pool_size": 256,
                    "fit_maxiter": 20},
                   {"label": "cga", "name": "cga", "pop_size": 64, "generations": 2},
                   {"label": "random", "name": "random", "trials": 96}],
    "seeds": 2,
    "budget": {"trials": 48},
    "batch_size": 16,
    "budgets": [16, 32, 48],
    "baseline": "cga",
}


def compare(tmp_path, cfg):
    cfg = {**cfg, "output": str(tmp_path / "runs"), "results": str(tmp_path / "res" / "t")}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "bocast.cli", "compare", str(path), "--json"],
                          capture_output=True, text=True, cwd=ROOT)


def test_compare_writes_tables_plot_records_and_json(tmp_path):
    proc = compare(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out["strategies"]) == {"bo", "cga", "random"}
    for s in out["strategies"].values():
        assert set(s["median_best"]) == {"16", "32", "48"}
        assert s["median_best"]["48"] >= s["median_best"]["16"] > 0
    assert set(out["mann_whitney_u"]) == {"bo vs cga", "random vs cga"}
    for ext in ("md", "csv", "json", "png"):
        assert os.path.getsize(tmp_path / "res" / f"t.{ext}") > 0
    assert len(os.listdir(tmp_path / "runs")) == 6
    saved = json.load(open(tmp_path / "res" / "t.json"))
    assert saved["provenance"]["git_sha"] and saved["config_sha256"]


@pytest.mark.parametrize("change, message", [
    ({"strategies": []}, "strategies: expected a non-empty list"),
    ({"seeds": "x"}, "seeds: expected a positive integer"),
    ({"baseline": "sa"}, "baseline: 'sa' is not one of the strategy labels"),
    ({"strategies": [{"name": "bo", "acquisition": "pi"}]}, "strategies[0] (bo): unknown acquisition"),
    ({"strategies": [{"name": "tabu"}]}, "strategies[0] (tabu): unknown strategy 'tabu'"),
    ({"budget": {"trials": -1}}, "budget.trials: expected an integer >= 1"),
    ({"budgets": [1000]}, "budgets: expected integers between 1 and budget.trials"),
    ({"seedz": 3}, "unknown field(s) ['seedz']"),
    ({"dataset": "experiments/data/gemm_1024_1024_1024"}, "was recorded for workload"),
])
def test_bad_compare_config_names_the_field(tmp_path, change, message):
    cfg = {**GOOD, **change}
    if change.get("strategies") and "baseline" not in change:
        cfg.pop("baseline")
    proc = compare(tmp_path, cfg)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not os.path.exists(tmp_path / "runs") and not os.path.exists(tmp_path / "res")
