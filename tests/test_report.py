"""`bocast report` and bocast.report: runs read from their stores (read only), per budget; the
figures against a hand computation on tiny stores, the warm-start criterion, a replay
comparison's own figures, and one clear error per bad input."""

import json
import os
import re

import pytest

import bocast
from bocast.records.datasets import locate
from bocast.records.record import Record
from bocast.records.status import Status
from bocast.records.store import Store

WORKLOAD = {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
            "space": "v1"}
CUBLAS = {"tflops": 2.0, "what": "torch.mm(A, B) (cuBLAS, fp32 out)"}
F = None  # a failed trial: no TFLOPS, not counted in the best so far
#: (arm, seed): TFLOPS of each trial in order; "shared" is one configuration both arms measured
TRIALS = {("a", 0): [("shared", 1.0), 3.0, F, 2.0, 5.0], ("a", 1): [2.0, 2.0, 4.0, 4.0, 4.0],
          ("a", 2): [F, 1.0, 6.0, 6.0, 6.0],
          ("b", 0): [("shared", 2.0), 4.0, F], ("b", 1): [1.0, 1.0, 1.0]}


def _store(path, label, seed, trials, reference=None):
    with Store(str(path), WORKLOAD) as s:
        for i, t in enumerate(trials):
            key, tflops = t if isinstance(t, tuple) else (f"{label}{seed}-{i}", t)
            s.append(Record(key=key, config={"k": key}, status=Status.OK if tflops else
                            Status.BUILD_ERROR, tflops=tflops, latency_ms=1.0 if tflops else None))
        if reference:
            s.set_meta("reference", reference)
        s.set_meta("run", {"seed": seed})


@pytest.fixture
def runs(tmp_path):
    """A comparison's output folder: a's stores hold cuBLAS's timing, b's none."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for (label, seed), trials in TRIALS.items():
        _store(folder / f"{label}_seed{seed}.db", label, seed, trials,
               CUBLAS if label == "a" else None)
    return folder


def _snapshot(folder):
    return {p: (os.path.getmtime(os.path.join(folder, p)),
                open(os.path.join(folder, p), "rb").read()) for p in sorted(os.listdir(folder))}


def test_figures_are_the_hand_computed_ones(runs):
    before = _snapshot(runs)
    rep = bocast.report(str(runs), at=[2, 4, 5], level=0.95)
    assert _snapshot(runs) == before, "read only: nothing written or created beside a store"
    a, b = rep.arms["a"], rep.arms["b"]
    # best so far (ok trials): a 1 3 3 3 5 | 2 2 4 4 4 | 0 1 6 6 6; b 2 4 4 | 1 1 1
    assert a["best_at"]["2"]["per_seed"] == {"0": 3.0, "1": 2.0, "2": 1.0}
    assert a["best_at"]["2"]["median"] == 2.0 and a["best_at"]["2"]["iqr"] == [1.0, 3.0]
    assert a["best_at"]["5"]["median"] == 5.0 and a["best_at"]["5"]["iqr"] == [4.0, 6.0]
    assert a["best_at"]["5"]["vs_reference"] == 2.5  # 5.0 / cuBLAS's 2.0
    assert a["reference"]["name"] == "cuBLAS" and b["reference"] is None
    assert b["best_at"]["2"]["median"] == 2.5 and b["best_at"]["4"] is None  # b ran 3 trials
    assert b["best"]["per_seed"] == {"0": 4.0, "1": 1.0}
    # 95% of the best of every store (6.0): 5.7; only a seed 2 reaches it, at trial 3; the
    # others count as their trials + 1 (a: 6, b: 4)
    assert rep.target["best"] == 6.0 and rep.target["tflops"] == pytest.approx(5.7)
    assert a["trials_to_target"]["per_seed"] == {"0": None, "1": None, "2": 3}
    assert a["trials_to_target"]["median"] == 6 and a["trials_to_target"]["reached"] == 1
    assert b["trials_to_target"]["median"] == 4 and b["trials_to_target"]["reached"] == 0
    # tests: a vs b at 2 trials, a (3, 2, 1) and b (4, 1); paired on seeds 0 and 1
    from scipy.stats import mannwhitneyu

    t = rep.tests["a vs b"]
    assert set(t["at"]) == {"2"}, "at 4 and 5 b has no seed"
    at2 = t["at"]["2"]
    assert at2["p_a_higher"] == mannwhitneyu([3, 2, 1], [4, 1], alternative="greater").pvalue
    assert at2["p_b_higher"] == mannwhitneyu([4, 1], [3, 2, 1], alternative="greater").pvalue
    assert (at2["paired_seeds"], at2["a_higher"], at2["b_higher"]) == (2, 1, 1)
    assert t["drift"] == {"configurations": 1, "median": 0.5, "iqr": [0.5, 0.5]}
    md = rep.markdown()
    assert "| 5 | 5.0 [4.0-6.0] = 2.50x cuBLAS | - (3 trials each) |" in md
    assert "cuBLAS 2.0 TFLOPS (torch.mm(A, B) (cuBLAS, fp32 out))" in md
    assert "| 0 | not in 5 | not in 3 |" in md and "| 2 | 3 |  |" in md


def test_warm_within_criterion_per_seed(runs):
    """issue 11's criterion (lab/warm_within.py's): each seed's target is the baseline's best at
    --budget on that seed; how many seeds reach it within --within trials."""
    rep = bocast.report(str(runs), baseline="a", budget=2, level=1.0, within=1)
    assert rep.target["tflops"] == {"0": 3.0, "1": 2.0, "2": 1.0}
    b, a = rep.arms["b"]["trials_to_target"], rep.arms["a"]["trials_to_target"]
    assert b["per_seed"] == {"0": 2, "1": None} and b["within"] == 0 and b["reached"] == 1
    assert a["per_seed"] == {"0": 2, "1": 1, "2": 2} and a["within"] == 1
    assert list(rep.tests) == ["b vs a"]
    short = bocast.report(str(runs), baseline="b", budget=3)
    assert short.arms["a"]["trials_to_target"]["per_seed"]["2"] == "no b run"
    assert short.arms["a"]["trials_to_target"]["per_seed"]["0"] == 5  # 95% of 4.0: 5.0 at 5
    longer = bocast.report(str(runs), baseline="b", budget=4)
    assert longer.arms["a"]["trials_to_target"]["per_seed"]["0"] == "b ran 3 trials"


def test_tune_run_folders_and_a_pattern(tmp_path):
    """The layout of experiments/device/warm_default.sh: {label}_s{seed}/records.db."""
    for label, seed in (("cold", 0), ("cold", 1), ("warm", 0), ("warm", 1)):
        (tmp_path / f"{label}_s{seed}").mkdir()
        _store(tmp_path / f"{label}_s{seed}" / "records.db", label, seed,
               TRIALS["a" if label == "cold" else "b", seed])
    (tmp_path / "cold_s0" / "summary.json").write_text("{}")
    found = bocast.report(str(tmp_path))
    assert [(r.label, r.seed) for r in found.runs] == [("cold", 0), ("cold", 1), ("warm", 0),
                                                      ("warm", 1)]
    one = bocast.report(str(tmp_path / "warm_s1"))
    assert [(r.label, r.seed) for r in one.runs] == [("warm", 1)]
    rep = bocast.report(tmp_path, pattern="{label}_s{seed}/records.db", arms=["warm", "cold"],
                        seeds=[0], baseline="cold", budget=5, within=2)
    assert list(rep.arms) == ["warm", "cold"] and rep.arms["warm"]["seeds"] == [0]
    assert rep.arms["warm"]["trials_to_target"]["per_seed"] == {"0": None}  # 4.0 < 0.95 x 5.0


def test_cli_json_agrees_with_the_api_and_out_refuses_to_overwrite(runs, tmp_path, bocast_cli):
    code, out, err = bocast_cli("report", str(runs), "--at", "2", "5", "--baseline", "b",
                                "--within", "3", "--json", "--out", str(tmp_path / "r"))
    assert code == 0, err
    lines = out.strip().splitlines()
    summary = json.loads(lines[-1])
    api = bocast.report(str(runs), at=[5, 2], baseline="b", within=3)
    assert summary == json.loads(json.dumps(api.to_dict()))
    assert api.markdown() in out
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["provenance"]["git_sha"] and written["arms"] == summary["arms"]
    assert (tmp_path / "r.md").read_text().startswith(api.markdown())
    code, out, err = bocast_cli("report", str(runs), "--out", str(tmp_path / "r"))
    assert code == 2 and not out and "r.md exists; give force=True (--force)" in err
    code, _, err = bocast_cli("report", str(runs), "--out", str(tmp_path / "r"), "--force")
    assert code == 0, err
    # a store named like an output is an input: never written over, --force or not
    _store(tmp_path / "s.md", "s", 0, [1.0])
    code, out, err = bocast_cli("report", str(tmp_path / "s.md"), "--out",
                                str(tmp_path / "s"), "--force")
    assert code == 2 and "is also the record store" in err and not out


@pytest.mark.parametrize("make, args, message", [
    (lambda d: (d / "x_seed0.db").write_text("not a store"), [],
     "x_seed0.db is not a bocast record store"),
    (lambda d: (d / "empty").mkdir(), [], "empty: no record store in it"),
    (lambda d: None, ["--baseline", "c"], "baseline: 'c' is not one of the arms ['a', 'b']"),
    (lambda d: None, ["--pattern", "*.db"], "names no {label}"),
    (lambda d: None, ["--arms", "a", "z"], "arms: no store of ['z']"),
    (lambda d: None, ["--budget", "9"], "budget: no run has 9 trials (the longest has 5)"),
])
def test_bad_input_is_one_line_exit_2(runs, bocast_cli, make, args, message):
    make(runs)
    path = runs / "empty" if "empty" in message else runs
    code, out, err = bocast_cli("report", str(path), *args)
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1, err
    assert lines[0].startswith("bocast: error: ") and message in lines[0], err


def test_a_damaged_store_is_named(runs, bocast_cli):
    data = bytearray((runs / "a_seed1.db").read_bytes())
    assert len(data) > 3 * 4096
    data[4096 + 100:3 * 4096] = b"\x55" * (2 * 4096 - 100)
    (runs / "a_seed1.db").write_bytes(bytes(data))
    code, out, err = bocast_cli("report", str(runs))
    assert code == 2 and not out and "a_seed1.db" in err and len(err.strip().splitlines()) == 1


def test_replay_tune_runs_read_as_their_own_summaries(tmp_path, monkeypatch):
    """Real stores (bocast tune on replay, in the tune-run layout): each run's best at its end
    is its summary's, and the trials to 95% of the best of every store are the tuner's."""
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    results = {seed: bocast.tune({
        "workload": WORKLOAD, "runner": "replay", "dataset": "gemm_32_2048_1000",
        "strategy": {"name": "random"}, "budget": {"trials": 24}, "batch_size": 8, "seed": seed,
        "output": str(tmp_path / f"random_s{seed}")}) for seed in (0, 1)}
    rep = bocast.report(str(tmp_path), at=[8, 24])
    assert list(rep.arms) == ["random"] and rep.arms["random"]["seeds"] == [0, 1]
    assert rep.arms["random"]["best"]["per_seed"] == {str(s): r.best_tflops
                                                     for s, r in results.items()}
    best = max(r.best_tflops or 0.0 for r in results.values())
    from bocast.records.store import Store
    from bocast.run.tuner import Trajectory, best_so_far

    for seed, r in results.items():
        with Store.open(r.store) as store:
            curve = best_so_far(store.records())
        expected = Trajectory([], curve, 0.0, None).trials_to(0.95, best)
        assert rep.arms["random"]["trials_to_target"]["per_seed"][str(seed)] == expected
    # a replay times nothing: the reference is the one its (shipped) dataset recorded, so named
    with open(locate("gemm_32_2048_1000") + ".json") as f:
        recorded = json.load(f)["reference"]["tflops"]
    ref = rep.arms["random"]["reference"]
    assert ref["recorded"] == "gemm_32_2048_1000" and ref["tflops"] == recorded
    assert rep.arms["random"]["best_at"]["24"]["vs_reference"] == pytest.approx(
        rep.arms["random"]["best_at"]["24"]["median"] / recorded)
    assert "recorded in dataset gemm_32_2048_1000" in rep.markdown()


def test_report_reads_the_reference_of_the_very_table_a_replay_tune_ran(tmp_path, bocast_cli):
    """A uniform sample and an exhaustive table share the name gemm_1024_1024_1024_v3, each
    with its own cuBLAS timing (342.2 and 352.7 TFLOPS): the report takes the table the run
    replayed (its store's session names it), so it prints the ratio the tune printed."""
    run = tmp_path / "random_s0"
    code, out, err = bocast_cli("tune", "gemm", "--shape", "1024,1024,1024", "--space", "v3",
                                "--runner", "replay", "--strategy", "random", "--trials", "8",
                                "--batch-size", "8", "--output", str(run))
    assert code == 0, err
    assert "runner: replay of " + locate("exhaustive/gemm_1024_1024_1024_v3") in err
    tuned = re.search(r"best ([\d.]+) TFLOPS = ([\d.]+)x", out)
    assert tuned, out
    with open(locate("exhaustive/gemm_1024_1024_1024_v3") + ".json") as f:
        recorded = json.load(f)["reference"]["tflops"]
    with open(locate("gemm_1024_1024_1024_v3") + ".json") as f:
        assert json.load(f)["reference"]["tflops"] != recorded  # the name alone is ambiguous
    rep = bocast.report(str(run), at=[8])
    ref = rep.arms["random"]["reference"]
    assert ref["recorded"] == "exhaustive/gemm_1024_1024_1024_v3" and ref["tflops"] == recorded
    code, out, err = bocast_cli("report", str(run), "--at", "8")
    assert code == 0, err
    assert f"| 8 | {tuned.group(1)} " in out and f"= {tuned.group(2)}x " in out
