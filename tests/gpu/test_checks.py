"""The checks the GPU machine runs (``experiments/device/engine_checks.sh``): each is a module
here that the device script runs as ``python3 -m tests.gpu.NAME``; pytest runs them too, the
GPU ones under the ``gpu`` marker (skipped, saying why, without a GPU), the resume check on the
CPU stand-in as well."""

import json
import subprocess
import sys

import pytest

from bocast.measure.runner import why_no_gpu
from tests import background

ROOT = __file__.rsplit("/tests/", 1)[0]
NO_GPU = why_no_gpu()
gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"needs a CUDA GPU: {NO_GPU}")


def _module(name, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", f"tests.gpu.{name}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# a background job (tests/background.py): the test only reads what the process printed
RESUME_DEMO = background.job("resume_demo_standin", [
    sys.executable, "-m", "tests.gpu.resume_demo", "--store", "{out}/r.db", "--runner",
    "standin", "--shape", "256,256,256", "--sample", "24", "--kill-at", "8"], timeout_s=600)


@pytest.mark.slow  # tests/test_records.py checks the same in the default suite
@pytest.mark.background(RESUME_DEMO)
def test_a_killed_measure_resumes_without_losing_or_repeating_a_row():
    """The device's resume check on the stand-in: SIGKILL of ``bocast measure`` after 8 rows,
    then the same command: every finished row kept, none measured twice, the sample done."""
    proc, _ = background.result(RESUME_DEMO)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and result["ok"], (result, proc.stderr[-2000:])
    assert result["rows_at_kill"] >= 8 and result["rows_after_resume"] == 24


@pytest.mark.gpu
@gpu
def test_every_fault_is_recorded_and_the_run_goes_on(tmp_path):
    proc = _module("faults", "--out", str(tmp_path / "faults.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["case"]: r["status"] for r in json.loads((tmp_path / "faults.json").read_text())[
        "rows"]}
    assert all(v == "ok" for k, v in rows.items() if k.startswith("good")), rows
    assert rows["build fails (static smem > 48 KB, constraint bypassed)"] == "build_error"
    assert rows["launch over limits (2048 threads/block)"] == "launch_error"
    assert rows["out-of-bounds access"] == "runtime_error"
    assert rows["never ends"] == "run_timeout" and rows["wrong result"] == "wrong_result"


@gpu
def test_the_exported_kernel_called_from_torch_gives_the_printed_ratio(tmp_path):
    """Issue 40: a live tune's printed ratio (its final re-timing) against its best kernel
    exported and timed from torch with the reference in turn (tests/gpu/export_ratio.py):
    within 3%. A small tune: 16 trials of GEMM 2048^3 on space v3, cold."""
    run = tmp_path / "run"
    tune = subprocess.run([sys.executable, "-m", "bocast.cli", "tune", "gemm", "--shape",
                           "2048,2048,2048", "--trials", "16", "--warm-start", "none",
                           "--output", str(run)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert tune.returncode == 0, tune.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["figure"] == "retimed", summary.get("figure")
    export = subprocess.run([sys.executable, "-m", "bocast.cli", "export",
                             str(run / "records.db"), "--best", "--out", str(run / "kernel")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stderr[-2000:]
    proc = _module("export_ratio", str(run), "--out", str(tmp_path / "ratio.json"))
    (row,) = json.loads((tmp_path / "ratio.json").read_text())["runs"]
    assert row["correct"] and row["best_config_matches"], row
    assert abs(row["exported_ratio"] / summary["best_vs_reference"] - 1) <= 0.03, row
    assert proc.returncode == 0, proc.stdout[-2000:]
