"""Paired trials (runner option ``paired``, on by default): a live run times each kernel with the
reference, their replays alternating, and ranks its kernels by that ratio (the record's
``vs_reference``), not by TFLOPS that carry the GPU clock's drift over the run. On the CPU
stand-in (SYNTHETIC timings) with a clock of our choosing: the method, not a measurement."""

import bocast
from bocast.measure.builder import Builder
from bocast.measure.retime import top_configs
from bocast.measure.standin import StandinRunner
from bocast.records.record import Record, best_record, speed
from bocast.records.status import Status
from bocast.records.store import Store

QUICK = {"op": "gemm", "shape": (256, 256, 256), "space": "v2", "trials": 16,
         "batch_size": 4, "strategy": "random"}


class DriftingStandin(StandinRunner):
    """The stand-in on a GPU whose clock falls batch after batch: each batch's TFLOPS read 1.6,
    1.2, 1.0, 0.8 x the kernel's own (the reference slows with it, so the paired ratio is the
    kernel's alone: the stand-in's ratio is 1 / latency whatever the batch)."""

    batches = 0

    def run(self, op, builds, *, on_result=None):
        self.batches += 1
        clock = (1.6, 1.2, 1.0, 0.8)[min(self.batches, 4) - 1]

        def drifted(i, res):
            if res.tflops:
                res.tflops *= clock
                res.latency_ms /= clock
            if on_result is not None:
                on_result(i, res)

        return super().run(op, builds, on_result=drifted)


def _record(key, tflops, ratio):
    return Record(key=key, config={}, status=Status.OK, tflops=tflops, vs_reference=ratio)


def test_speed_is_the_paired_ratio_only_where_every_succeeded_kernel_has_one():
    fast_clock, fast_kernel = _record("a", 120.0, 0.9), _record("b", 100.0, 1.1)
    failed = Record(key="c", config={}, status=Status.RUNTIME_ERROR)
    assert best_record([fast_clock, fast_kernel, failed]) is fast_kernel
    assert speed([fast_clock, failed])(fast_clock) == 0.9
    alone = _record("d", 130.0, None)  # one kernel timed alone: the whole run ranks by TFLOPS
    assert best_record([fast_clock, fast_kernel, alone]) is alone
    assert best_record([fast_clock, fast_kernel, _record("e", 110.0, None)]) is fast_clock
    assert [r.key for r in top_configs([fast_clock, fast_kernel], 2)] == ["b", "a"]


def test_a_run_on_a_falling_clock_ranks_and_retimes_its_kernels_by_the_paired_ratio(tmp_path):
    with DriftingStandin() as runner, Builder(workers=1, compile=False) as builder:
        result = bocast.tune(**QUICK, runner=runner, builder=builder, output=str(tmp_path),
                             retime_top=3)
    with Store.open(result.store) as store:
        records = store.records()
    assert len(records) == 16 and all(r.vs_reference for r in records if r.succeeded)
    by_tflops = max((r for r in records if r.succeeded), key=lambda r: r.tflops)
    by_ratio = max((r for r in records if r.succeeded), key=lambda r: r.vs_reference)
    assert by_tflops.key != by_ratio.key  # the drift reorders them: the case is there
    assert result.summary["in_run"]["best_vs_reference"] == by_ratio.vs_reference
    assert result.summary["in_run"]["ratio"] == "paired"
    top3 = sorted((r for r in records if r.succeeded), key=lambda r: -r.vs_reference)[:3]
    retimed = {k["key"] for k in result.summary["retimed"]["kernels"]}
    assert retimed == {r.key for r in top3}
    assert result.summary["timing"]["paired"] is True
    assert result.summary["timing"]["repeats"] == 30  # TRIAL_PAIRS: 10 pairs were too few


def test_paired_false_times_each_kernel_alone_and_ranks_by_tflops(tmp_path):
    with DriftingStandin(paired=False) as runner, Builder(workers=1, compile=False) as builder:
        result = bocast.tune(**QUICK, runner=runner, builder=builder, output=str(tmp_path),
                             retime_top=0)
    with Store.open(result.store) as store:
        records = store.records()
    assert not any(r.vs_reference for r in records)
    best = max((r for r in records if r.succeeded), key=lambda r: r.tflops)
    assert result.best_tflops == best.tflops
    assert result.summary["timing"]["paired"] is False
    assert result.summary["timing"]["repeats"] == 10


def test_the_configuration_option_reaches_the_runner(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("workload: {op: gemm, shape: [256, 256, 256], space: v2}\n"
                   "strategy: {name: random}\nbudget: {trials: 4}\nbatch_size: 4\n"
                   "runner: standin\nrunner_options: {paired: false, retime_top: 0}\nseed: 0\n"
                   f"output: {tmp_path / 'out'}\n")
    result = bocast.tune(str(cfg))
    with Store.open(result.store) as store:
        assert not any(r.vs_reference for r in store.records())


def test_the_progress_line_gives_the_paired_ratio(tmp_path, bocast_cli):
    code, _, err = bocast_cli("tune", "gemm", "--shape", "256,256,256", "--space", "v2",
                              "--runner", "standin", "--trials", "8", "--batch-size", "4",
                              "--strategy", "random", "--output", str(tmp_path / "run"),
                              "--retime-top", "0")
    assert code == 0, err
    assert "x stand-in (paired)" in err
