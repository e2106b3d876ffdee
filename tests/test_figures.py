"""Figures (bocast.run.figures): a comparison's arms each to the end of their own budget with their
seeds named, a tune run's own figure (`bocast tune --plot`, `bocast.tune(plot=True)`), PNG, PDF
and SVG written beside each other, and without matplotlib (the `plot` extra) everything but a
figure still works while asking for one is one error naming the extra."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

import bocast
from bocast.errors import InputError
from bocast.records.datasets import locate
from bocast.run import figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET = locate("gemm_32_2048_1000")
WORKLOAD = {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
            "space": "v1"}
TUNE = {"workload": WORKLOAD, "strategy": {"name": "random"}, "batch_size": 8,
        "budget": {"trials": 16}, "seed": 0, "runner": "replay", "dataset": DATASET}
COMPARE = {"name": "t", "workload": WORKLOAD, "runner": "replay", "dataset": DATASET,
           "strategies": [{"label": "random", "name": "random"},
                          {"label": "random-long", "name": "random", "trials": 24,
                           "seeds": [0]}],
           "seeds": 2, "budget": {"trials": 12}, "batch_size": 4, "budgets": [4, 12],
           "workers": 1}
#: what a Python without the plot extra sees (an entry of None makes the import fail)
NO_PLOT = "import sys; sys.modules['matplotlib'] = sys.modules['PIL'] = None; "


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_each_arm_runs_to_its_own_budget_with_its_seeds_named():
    fig = figures.convergence(
        [("short", [[1.0] * 12, [2.0] * 12, [3.0] * 12]), ("long", [[1.0] * 40])],
        title="gemm 1x1x1", reference=5.0, reference_label="cuBLAS 5.0 TFLOPS (same run)",
        optimum=4.0, optimum_kind="best known")
    ends = {line.get_label(): max(line.get_xdata()) for line in fig.axes[0].get_lines()
            if not line.get_label().startswith("_")}
    assert ends["short (3 seeds)"] == 12 and ends["long (1 seed)"] == 40
    assert "cuBLAS 5.0 TFLOPS (same run)" in _legend(fig)


def test_a_compare_writes_png_pdf_and_svg_titled_with_gpu_and_reference(tmp_path):
    cfg = {**COMPARE, "output": str(tmp_path / "runs"), "results": str(tmp_path / "res" / "t")}
    summary = bocast.compare(cfg)
    assert summary["strategies"]["random-long"]["runs"] == 1
    for ext in ("png", "pdf", "svg"):
        assert os.path.getsize(tmp_path / "res" / f"t.{ext}") > 0
    svg = (tmp_path / "res" / "t.svg").read_text()  # SVG text stays text: the title is readable
    for words in ("gemm 32x2048x1000", "NVIDIA H100", "reference cuBLAS", "random-long (1 seed)",
                  "random (2 seeds)"):
        assert words in svg
    assert "![convergence](t.png)" in (tmp_path / "res" / "t.md").read_text()


def test_a_tune_run_draws_its_own_figure_beside_its_summary(tmp_path):
    out = tmp_path / "run"
    result = bocast.tune({**TUNE, "output": str(out)}, plot=True)
    assert result.figures == [str(out / f"convergence.{e}") for e in ("png", "pdf", "svg")]
    assert result.summary["figures"] == result.figures
    assert result.summary["gpu"] == "NVIDIA H100 80GB HBM3"  # the replayed dataset's
    from PIL import Image

    assert Image.open(out / "convergence.png").mode == "P"  # the small palette PNG
    svg = (out / "convergence.svg").read_text()
    for words in ("gemm 32x2048x1000, space v1", "random seed 0, replay on NVIDIA H100",
                  "cuBLAS (recorded) 30.2 TFLOPS", "measured (16 ok)", "dataset best 19.5"):
        assert words in svg
    # the same figure is the same bytes (committed results): no date inside
    before = {e: (out / f"convergence.{e}").read_bytes() for e in ("pdf", "svg")}
    bocast.tune({**TUNE, "output": str(out)}, plot=True)  # finished: only reads the store
    assert before == {e: (out / f"convergence.{e}").read_bytes() for e in ("pdf", "svg")}


def test_failures_are_marked_and_counted_by_status():
    fig = figures.run_trials([3.0, None, 5.0, None, None], ["ok", "build_error", "ok",
                                                            "run_error", "build_error"],
                             title="t", reference=10.0, reference_label="cuDNN 10.0 TFLOPS")
    assert _legend(fig) == ["best so far", "measured (2 ok)",
                            "failed (2 build_error, 1 run_error)", "cuDNN 10.0 TFLOPS"]
    best = next(line for line in fig.axes[0].get_lines() if line.get_label() == "best so far")
    assert list(best.get_ydata()) == [3.0, 3.0, 5.0, 5.0, 5.0]


def test_a_runs_axis_starts_near_its_kernels_and_marks_the_slow_ones_on_it():
    """The action of a 1024^3 run lies at 200-350 TFLOPS: the axis starts below it, not at 0;
    a kernel below the axis is marked on it and counted, as a failure is."""
    tflops = [None, 277.0, 300.0, 20.0, 320.0] + [250.0 + i for i in range(10)]
    statuses = ["build_error"] + ["ok"] * 14
    fig = figures.run_trials(tflops, statuses, title="t", reference=353.0,
                             reference_label="cuBLAS 353 TFLOPS", optimum=332.0)
    bottom = fig.axes[0].get_ylim()[0]
    assert 150 < bottom < 250 and f"axis from {figures.tflops_text(bottom)}, not 0" in \
        fig.axes[0].get_ylabel()
    assert "1 ok below the axis (lowest 20.0 TFLOPS)" in _legend(fig)
    assert "failed (1 build_error)" in _legend(fig)
    best = next(line for line in fig.axes[0].get_lines() if line.get_label() == "best so far")
    ys = list(best.get_ydata())
    assert ys[0] != ys[0] and ys[1:5] == [277.0, 300.0, 300.0, 320.0]  # no best before an ok
    # kernels spread down to near 0: the axis starts at 0
    near_zero = figures.run_trials([5.0, 300.0, 40.0], ["ok"] * 3, title="t")
    assert near_zero.axes[0].get_ylim()[0] == 0 and near_zero.axes[0].get_ylabel() == "TFLOPS"


def test_arms_alike_over_their_first_trials_are_drawn_once_and_the_optimum_is_drawn():
    first = [[1.0, 2.0, 3.0], [1.5, 2.5, 3.5]]  # two seeds' first three trials
    a = [f + [4.0, 5.0] for f in first]
    b = [f + [3.0, 6.0] for f in first]
    fig = figures.convergence([("a", a), ("b", b)], title="t", reference=None,
                              reference_label="", optimum=6.0, optimum_kind="dataset best")
    assert _legend(fig) == ["all 2 arms to trial 3 (alike, seed by seed)", "a (2 seeds)",
                            "b (2 seeds)", "dataset best 6.0 TFLOPS", "95% of the dataset best"]
    starts = {line.get_label(): min(line.get_xdata()) for line in fig.axes[0].get_lines()}
    assert starts["a (2 seeds)"] == starts["b (2 seeds)"] == 3  # each joins the shared part
    # wholly alike: every trial; another number of seeds, or a first trial that differs: none
    assert figures.shared_trials([np.asarray(a)] * 2) == 5
    assert figures.shared_trials([np.asarray(a), np.asarray(a[:1])]) == 0
    assert figures.shared_trials([np.asarray(a), np.asarray(a) + 1]) == 0


def test_the_cli_plots_and_never_writes_over_an_input(tmp_path, bocast_cli):
    cfg = {**TUNE, "output": str(tmp_path)}
    path = tmp_path / "convergence.svg"  # a configuration file where the figure would go
    path.write_text(yaml.safe_dump(cfg))
    before = path.read_text()
    code, _, err = bocast_cli("tune", str(path), "--plot")
    assert code == 2
    assert "figure: " in err and "is also the configuration file" in err
    assert path.read_text() == before and not (tmp_path / "records.db").exists()
    good = tmp_path / "cfg.yaml"
    good.write_text(yaml.safe_dump(cfg))
    code, out, err = bocast_cli("tune", str(good), "--plot")
    assert code == 0, err
    assert f"figure: {tmp_path}/convergence.png/.pdf/.svg" in out


def test_without_matplotlib_a_figure_is_one_error_and_the_rest_works(tmp_path):
    code = NO_PLOT + (
        "import bocast, json; from bocast.errors import InputError\n"
        f"cfg = {TUNE!r}\n"
        f"try:\n    bocast.tune({{**cfg, 'output': {str(tmp_path / 'a')!r}}}, plot=True)\n"
        "except InputError as e:\n    print(json.dumps(str(e)))\n"
        f"r = bocast.tune({{**cfg, 'output': {str(tmp_path / 'b')!r}}})\n"
        "print(r.trials, r.figures)\n"
        f"s = bocast.compare({{**{COMPARE!r}, 'output': {str(tmp_path / 'runs')!r}, "
        f"'results': {str(tmp_path / 'res' / 't')!r}}})\n"
        "print(sorted(s['strategies']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    error, tuned, compared = proc.stdout.strip().splitlines()
    assert json.loads(error) == ("plot (the run's figure) needs matplotlib and Pillow: "
                                 "matplotlib is not installed (pip install 'bocast[plot]')")
    assert not (tmp_path / "a").exists()  # refused before anything was written
    assert tuned == "16 []"
    assert compared == "['random', 'random-long']"
    assert sorted(os.listdir(tmp_path / "res")) == ["t.csv", "t.json", "t.md"]
    assert ("No figure: matplotlib is not installed (pip install 'bocast[plot]')."
            in (tmp_path / "res" / "t.md").read_text())


def test_the_cli_says_what_a_missing_plot_extra_means(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({**TUNE, "output": str(tmp_path / "out")}))
    code = NO_PLOT + ("from bocast.cli import main; "
                      f"raise SystemExit(main(['tune', {str(cfg)!r}, '--plot']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "pip install 'bocast[plot]'" in proc.stderr and "Traceback" not in proc.stderr


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert figures.missing() == "Pillow is not installed"
    with pytest.raises(InputError, match=r"pip install 'bocast\[plot\]'"):
        figures.require("a figure")
