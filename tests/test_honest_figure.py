"""Issue 40: the figure a live run prints is its best kernels re-timed with the reference in
turn (bocast.measure.retime), every batch records the reference re-timed after it and the GPU's
clock, a batch at a low clock is flagged, and `bocast report` prints the run's own figure. On
the CPU stand-in (SYNTHETIC timings) and fake runners: the method, not a measurement."""

import json
import os
import statistics
import subprocess
import sys
import warnings

import pytest

import bocast
from bocast.measure.builder import Builder, BuildResult
from bocast.measure.retime import METHOD, METHOD_PAIRED, retime
from bocast.measure.runner import RunResult
from bocast.measure.standin import StandinRunner
from bocast.measure.telemetry import clock_summary, flag_line
from bocast.records.status import Status
from bocast.records.store import Store
from bocast.space.operators.operator import get_operator

QUICK = {"op": "gemm", "shape": (256, 256, 256), "space": "v2", "trials": 16,
         "batch_size": 4, "strategy": "random"}


class ClockedStandin(StandinRunner):
    """The stand-in with an SM clock on every result: 1900 MHz, except the kernels of its
    third batch (1400 MHz, the reading of a GPU that slowed down)."""

    batches = 0

    def run(self, op, builds, *, on_result=None):
        self.batches += 1
        clock = 1400.0 if self.batches == 3 else 1900.0

        def clocked(i, res):
            res.sm_clock_mhz = clock
            if on_result is not None:
                on_result(i, res)

        out = super().run(op, builds, on_result=clocked)
        for res in out:
            res.sm_clock_mhz = clock
        return out


def test_a_batch_at_a_low_clock_is_flagged_in_the_summary_and_the_store(tmp_path):
    with ClockedStandin() as runner, Builder(workers=1, compile=False) as builder:
        result = bocast.tune(**QUICK, runner=runner, builder=builder, output=str(tmp_path))
    clocks = result.summary["clocks"]
    assert clocks["median_sm_clock_mhz"] == 1900.0 and clocks["with_clock"] == 4
    assert [f["batch"] for f in clocks["flagged"]] == [3]
    assert "batch 3 (1400 MHz)" in flag_line(clocks)
    with Store.open(result.store) as store:
        batches = store.batches()
    assert len(batches) == 4 and [b["sm_clock_mhz"] for b in batches] == [1900.0] * 2 + [
        1400.0, 1900.0]
    assert all(b["reference"]["tflops"] == 1.0 for b in batches)  # re-timed after each batch
    assert sum(len(b["keys"]) for b in batches) == 16


def test_clock_summary_flags_only_batches_well_below_the_median():
    batches = [{"sm_clock_mhz": c} for c in (1980, 1950, 1800, 1700, 1980, None)]
    s = clock_summary(batches)
    assert s["median_sm_clock_mhz"] == 1950 and [f["batch"] for f in s["flagged"]] == [4]
    assert clock_summary([{"x": 1}]) is None and flag_line(None) is None


def test_a_live_run_prints_its_re_timed_figure_and_report_prints_the_same(tmp_path, bocast_cli):
    out = tmp_path / "run"
    args = ["tune", "gemm", "--shape", "256,256,256", "--space", "v2", "--runner", "standin",
            "--trials", "16", "--batch-size", "4", "--strategy", "random",
            "--output", str(out), "--retime-top", "3"]
    code, stdout, err = bocast_cli(*args)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["figure"] == "retimed" and len(summary["retimed"]["kernels"]) == 3
    assert summary["in_run"]["best_tflops"] and summary["retimed"]["method"] == METHOD_PAIRED
    assert summary["timing"]["l2"] == "warm"
    ratio = summary["best_vs_reference"]
    assert f"= {ratio:.2f}x stand-in (re-timed" in stdout
    code, report, err = bocast_cli("report", str(out))
    assert code == 0, err
    row = next(line for line in report.splitlines() if line.startswith("| re-timed"))
    assert f"= {ratio:.2f}x stand-in" in row
    # the same command again: a finished run measures and re-times nothing, the same figure
    with Store.open(str(out / "records.db")) as store:
        kept = store.get_meta("retimed")
    code, again, err = bocast_cli(*args)
    assert code == 0 and "re-timing the best" not in err
    with Store.open(str(out / "records.db")) as store:
        assert store.get_meta("retimed") == kept
    assert json.loads((out / "summary.json").read_text())["best_vs_reference"] == ratio


def test_retime_off_keeps_the_in_run_figure(tmp_path):
    result = bocast.tune(**QUICK, runner="standin", output=str(tmp_path), retime_top=0)
    assert result.summary["figure"] == "in-run" and "retimed" not in result.summary
    assert result.best_tflops == result.summary["in_run"]["best_tflops"]


class FakeRunner:
    """Readings of one's choosing: ``paired`` gives each kernel's pair ratios; otherwise the
    reference's TFLOPS in turn and kernels at fixed TFLOPS."""

    name = "fake"

    def __init__(self, kernel_tflops, refs=(), pairs=None):
        self.kernel_tflops, self.refs, self.pairs = kernel_tflops, list(refs), pairs
        if pairs is None:
            self.run_paired = None  # this runner times the reference apart

    def reference(self, op):
        return {"tflops": self.refs.pop(0), "latency_ms": 1.0, "what": "fake"}

    def run(self, op, builds, *, on_result=None):
        return [RunResult(b.key, Status.OK, tflops=self.kernel_tflops[b.key], latency_ms=1.0)
                for b in builds]

    def run_paired(self, op, build):  # noqa: F811 - replaced by None where unpaired
        ratio = self.pairs[build.key].pop(0)
        return (RunResult(build.key, Status.OK, tflops=self.kernel_tflops[build.key],
                          latency_ms=1.0),
                {"ratio": ratio, "reference": {"tflops": 1.0, "what": "fake"}})


class FakeBuilder:
    built = 0

    def build(self, op, configs):
        self.built += len(configs)
        return [BuildResult(key=c["name"], status=Status.OK) for c in configs]


OP = get_operator("gemm").from_args((256, 256, 256), space="v2")


def test_a_paired_round_ratio_is_the_runners_and_the_figure_their_median():
    runner = FakeRunner({"a": 10.0, "b": 12.0}, pairs={"a": [1.0, 1.2, 1.1],
                                                       "b": [0.9, 0.95, 2.0]})
    out = retime(runner, FakeBuilder(), [(OP, [{"name": "a"}, {"name": "b"}])], rounds=3)
    got = {k["key"]: k["vs_reference"] for k in out["kernels"]}
    assert got == {"a": pytest.approx(1.1), "b": pytest.approx(0.95)}
    assert out["paired"] and out["method"] == METHOD_PAIRED


def test_an_unpaired_round_ratio_is_to_the_references_around_it():
    # reference 100 before round 1, 120 between, 80 after round 2: the kernel at 110 is 1.0x
    # in round 1 (mean 110) and 1.1x in round 2 (mean 100), whatever the medians say
    runner = FakeRunner({"a": 110.0}, refs=[100.0, 120.0, 80.0])
    out = retime(runner, FakeBuilder(), [(OP, [{"name": "a"}])], rounds=2)
    (k,) = out["kernels"]
    assert k["ratios"] == pytest.approx([1.0, 1.1])
    assert k["vs_reference"] == pytest.approx(statistics.median([1.0, 1.1]))
    assert not out["paired"] and out["method"] == METHOD


def test_export_best_is_the_kernel_of_the_runs_figure():
    from bocast.kernel import _figure_key, _pick
    from bocast.records.record import Record

    rows = [(1, 1, Record("fast-once", {}, Status.OK, tflops=700.0)),
            (2, 1, Record("steady", {}, Status.OK, tflops=690.0))]
    assert _pick(rows, "best", "s.db")[0] == 1  # no re-timing: the best in-run row
    figure = _figure_key({"best": {"key": "steady"}})
    assert _pick(rows, "best", "s.db", figure)[0] == 2
    assert _figure_key({"best": None}) is None and _figure_key(None) is None


def test_other_libraries_warnings_stay_off_the_terminal_unless_debug(recwarn):
    from bocast.cli import own_warnings_only
    from bocast.strategies.bo.surrogate import FitWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with own_warnings_only(True):
            warnings.warn("a library's advice", UserWarning, stacklevel=1)
            warnings.warn(FitWarning("bocast's own"), stacklevel=1)
        with own_warnings_only(False):
            warnings.warn("shown with --debug", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["bocast's own", "shown with --debug"]


def test_a_warm_started_live_run_prints_no_third_party_warning(tmp_path):
    """The run that printed BoTorch's InputDataWarning (issue 40): warm from the 4096^3 v3
    table on the stand-in, a second round fitted (where BoTorch checks its inputs). A process
    of its own, as a user runs it: what reaches its stderr is what reaches the terminal."""
    proc = subprocess.run(
        [sys.executable, "-m", "bocast.cli", "tune", "gemm", "--shape", "2048,4096,4096",
         "--runner", "standin", "--trials", "20", "--warm-start", "gemm_4096_4096_4096_v3",
         "--output", str(tmp_path / "w"), "--retime-top", "0", "--set", "strategy.n_init=4",
         "--set", "strategy.pool_size=256"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Warning" not in proc.stderr, proc.stderr


def test_a_runs_figure_builds_each_kernel_once_and_confirms_the_chosen_one(tmp_path):
    """final_figure: the top kernels timed with the reference, then the chosen one alone again
    (new rounds), from the build of the choosing rounds."""
    from bocast.measure.retime import final_figure
    from bocast.records.record import Record

    records = [Record(n, {"name": n}, Status.OK, tflops=t)
               for n, t in (("a", 700.0), ("b", 690.0), ("c", 650.0))]
    runner = FakeRunner({"a": 700.0, "b": 690.0, "c": 650.0},
                        pairs={"a": [1.00] * 3, "b": [1.05] * 3 + [1.02] * 3, "c": [0.9] * 3})
    builder = FakeBuilder()

    class Space:  # the configurations as the fake builder takes them
        @staticmethod
        def from_json(c):
            return dict(c)

    op = type("Op", (), {"space": Space, "workload": {}})()
    out = final_figure(runner, builder, op, records, top=3, rounds=3)
    assert builder.built == 3
    assert out["best"]["key"] == "b" and out["best"]["vs_reference"] == pytest.approx(1.02)
    assert out["best"]["choosing_rounds"]["vs_reference"] == pytest.approx(1.05)
