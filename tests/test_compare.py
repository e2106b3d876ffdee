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
    "workload": {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
                 "space": "v1"},
    "runner": "replay",
    "dataset": "gemm_32_2048_1000",
    "strategies": [{"label": "bo", "name": "bo", "n_init": 16, "pool_size": 256,
                    "fit_maxiter": 20},
                   {"label": "cga", "name": "cga", "pop_size": 64, "generations": 2},
                   {"label": "random", "name": "random", "trials": 96, "batch_size": 8}],
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
    import csv

    from bocast.records.store import Store
    from bocast.run.tuner import best_so_far
    from bocast.space.operators.operator import from_workload

    proc = compare(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out["strategies"]) == {"bo", "cga", "random"}
    assert set(out["mann_whitney_u"]) == {"bo vs cga", "random vs cga"}
    for ext in ("md", "csv", "json", "png", "pdf"):
        assert os.path.getsize(tmp_path / "res" / f"t.{ext}") > 0
    assert sorted(os.listdir(tmp_path / "runs")) == sorted(
        f"{s}_seed{i}.db" for s in ("bo", "cga", "random") for i in (0, 1))
    assert "| random (runs 96 trials, batch 8) |" in (tmp_path / "res" / "t.md").read_text()
    saved = json.loads((tmp_path / "res" / "t.json").read_text())
    assert saved["provenance"]["git_sha"] and saved["config_sha256"]
    # every figure of the table is the stores' own best-so-far at that budget
    workload = from_workload(GOOD["workload"]).workload
    rows = list(csv.DictReader((tmp_path / "res" / "t.csv").read_text().splitlines()))
    assert len(rows) == 6
    optimum = saved["optimum_tflops"]
    for row in rows:
        with Store(str(tmp_path / "runs" / f"{row['strategy']}_seed{row['seed']}.db"),
                   workload) as store:
            records = store.records()
        assert len(records) == (96 if row["strategy"] == "random" else 48)
        curve = best_so_far(records)
        for b in (16, 32, 48):
            assert float(row[f"best_at_{b}"]) == pytest.approx(curve[b - 1], rel=1e-3)
        reached = next((i + 1 for i, v in enumerate(curve) if v >= 0.95 * optimum), None)
        assert (int(row["trials_to_95pct"]) if row["trials_to_95pct"] else None) == reached
    for lab, s in out["strategies"].items():
        mine = [float(r["best_at_48"]) for r in rows if r["strategy"] == lab]
        assert s["median_best"]["48"] == pytest.approx(sum(mine) / 2, rel=1e-3)


@pytest.mark.parametrize("change, message", [
    ({"strategies": []}, "strategies: expected a non-empty list"),
    ({"seeds": "x"}, "seeds: expected a number of seeds"),
    ({"baseline": "sa"}, "baseline: 'sa' is not one of the strategy labels"),
    ({"strategies": [{"name": "bo", "acquisition": "pi"}]},
     "strategies[0] (bo): acquisition: expected one of ['logei', 'becbo', 'ts', 'qlogei'], "
     "got 'pi'"),
    ({"strategies": [{"name": "tabu"}]}, "strategies[0] (tabu): name: unknown strategy 'tabu'"),
    ({"budget": {"trials": -1}}, "budget.trials: expected an integer between 1 and"),
    ({"strategies": [{"name": "bo", "batch_size": 0}]},
     "strategies[0].batch_size: expected an integer between 1 and 10000 or null, got 0"),
    ({"strategies": [{"name": "bo", "local_search": -1}]},
     "strategies[0] (bo): local_search: expected an integer between 0 and 100000, got -1"),
    ({"strategies": [{"name": "cga", "features": "foo"}]},
     "strategies[0] (cga): features: expected one of ['knobs', 'derived'], got 'foo'"),
    ({"runner_options": {"reject_spills": 3}},
     "runner_options.reject_spills: expected true or false, got 3"),
    ({"budgets": [1000]}, "budgets: expected distinct integers between 1 and budget.trials"),
    ({"seedz": 3}, "unknown field(s) ['seedz']"),
    ({"dataset": "gemm_1024_1024_1024"}, "was recorded for workload"),
])
def test_bad_compare_config_names_the_field(tmp_path, change, message, bocast_cli, monkeypatch):
    cfg = {**GOOD, **change}
    if change.get("strategies") and "baseline" not in change:
        cfg.pop("baseline")
    cfg = {**cfg, "output": str(tmp_path / "runs"), "results": str(tmp_path / "res" / "t")}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(ROOT)
    code, out, err = bocast_cli("compare", str(tmp_path / "c.yaml"), "--json")
    assert code == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert not os.path.exists(tmp_path / "runs") and not os.path.exists(tmp_path / "res")


LIVE = {
    "name": "live",
    "workload": {"op": "gemm", "shape": [256, 256, 256], "dtype": "fp16:fp32", "layout": "NT",
                 "space": "v2"},
    "runner": "local",
    "strategies": [{"label": "cga", "name": "cga", "pop_size": 32, "generations": 1},
                   {"label": "random", "name": "random", "seeds": [0]}],
    "seeds": 2,
    "budget": {"trials": 8},
    "batch_size": 4,
    "budgets": [4, 8],
    "baseline": "cga",
}


def test_live_compare_interleaves_runs_and_resumes(tmp_path):
    """The live path on the CPU: real TVM lowering (no nvcc) and the stand-in runner, whose
    timings are SYNTHETIC. Every run gets its own store; a second call measures nothing new."""
    from bocast.measure.builder import Builder
    from bocast.measure.standin import StandinRunner
    from bocast.records.store import Store
    from bocast.run import comparison as cmp

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**LIVE, "output": str(tmp_path / "runs"),
                                    "results": str(tmp_path / "res" / "live")}))
    cfg = cmp.load(str(path))
    workload = cmp.validate(cfg)[0].workload
    lines = []
    with StandinRunner() as runner, Builder(workers=2, compile=False) as builder:
        first = cmp.run(cfg, progress=lines.append, runner=runner, builder=builder)
        stores = sorted(os.listdir(tmp_path / "runs"))
        assert stores == ["cga_seed0.db", "cga_seed1.db", "random_seed0.db"]
        with Store(str(tmp_path / "runs" / "cga_seed1.db"), workload) as s:
            rows = s.records()
        assert len(rows) == 8 and len({r.key for r in rows}) == 8
        turns = [ln.split(":")[0].strip() for ln in lines if "trials, best" in ln]
        assert turns[:3] == ["cga seed 0", "cga seed 1", "random seed 0"], "runs take turns"
        again = cmp.run(cfg, progress=lambda m: None, runner=runner, builder=builder)
    # every run finished: the outputs can be written again from the stores, with no runner
    again_summary = cmp.run(cfg, progress=lambda m: None, only=[])
    assert again_summary["strategies"]["cga"]["median_best"] == \
        first["strategies"]["cga"]["median_best"]
    with StandinRunner() as runner, Builder(workers=2, compile=False) as builder:
        os.remove(tmp_path / "runs" / "random_seed0.db")
        part = cmp.run(cfg, progress=lambda m: None, runner=runner, builder=builder,
                       only=["cga"])
        assert part["missing"] == ["random seed 0"], "results wait for every run"
    assert first["optimum_kind"] == "best known"
    for lab in ("cga", "random"):
        for k in ("median_best", "median_trials_to_95pct", "median_trials_to_95pct_of_baseline"):
            assert again["strategies"][lab][k] == first["strategies"][lab][k]
    with Store(str(tmp_path / "runs" / "cga_seed1.db"), workload) as s:
        assert len(s.records()) == 8, "the rerun resumed finished runs and measured nothing"
    md = (tmp_path / "res" / "live.md").read_text()
    assert "trials to 95% of cga" in md and "random (1 seed(s))" in md


# A live comparison without a GPU, and MetaSchedule on replay: tests/test_bad_inputs.py.
