"""Runner isolation on the CPU: the stand-in worker injects every GPU fault kind."""

import pytest

from bocast.measure.builder import BuildResult
from bocast.measure.pool import TaskFailure, TimedPool
from bocast.measure.standin import StandinRunner
from bocast.records.status import Status
from bocast.space.operators.operator import get_operator

OP = get_operator("gemm").from_args((64, 64, 64))


def build(kernel: str, key: str | None = None) -> BuildResult:
    return BuildResult(key=key or kernel, status=Status.OK, kernel=kernel, grid=(1, 1, 1),
                       block=(32, 1, 1), args=("A", "B", "C"))


def test_every_fault_is_recorded_and_the_run_goes_on():
    builds = [build("ok1"), build("hang"), build("ok2"), build("crash"), build("ok3"),
              build("sticky"), build("ok4"), build("wrong"), build("launch"), build("ok5")]
    with StandinRunner(timeout_s=3, startup_timeout_s=120) as runner:
        results = runner.run(OP, builds)
    status = {b.kernel: r.status for b, r in zip(builds, results)}
    assert status == {
        "ok1": Status.OK, "hang": Status.RUN_TIMEOUT, "ok2": Status.OK,
        "crash": Status.RUNTIME_ERROR, "ok3": Status.OK, "sticky": Status.RUNTIME_ERROR,
        "ok4": Status.OK, "wrong": Status.WRONG_RESULT, "launch": Status.LAUNCH_ERROR,
        "ok5": Status.OK}
    assert all(r.latency_ms for r in results if r.status is Status.OK)


def test_worker_is_replaced_after_a_sticky_error():
    with StandinRunner(timeout_s=10) as runner:
        before = runner._single({"kind": "device"}, 60)["pid"]
        runner.run(OP, [build("sticky")])
        after = runner._single({"kind": "device"}, 60)["pid"]
        runner.run(OP, [build("ok")])
        again = runner._single({"kind": "device"}, 60)["pid"]
    assert before != after == again


def test_run_refuses_failed_builds():
    with StandinRunner() as runner, pytest.raises(ValueError, match="build status"):
        runner.run(OP, [BuildResult(key="x", status=Status.BUILD_ERROR)])


def test_pool_reports_errors_as_data():
    with TimedPool("tests.measure.pool_tasks:task", 2) as pool:
        out = pool.map([{"do": "ok", "v": 1}, {"do": "raise"}, {"do": "ok", "v": 3}], timeout_s=30)
    assert out[0] == 1 and out[2] == 3
    assert isinstance(out[1], TaskFailure) and out[1].kind == "error" and "boom" in out[1].detail


def test_a_pool_hides_the_libraries_it_is_told_to_and_the_builders_hides_torch():
    """tvm_ffi imports torch when it can; a builder worker, which never uses it, saves its
    second and its memory. Checked in the worker itself."""
    import bocast.measure.builder as builder

    with TimedPool("tests.measure.pool_tasks:task", 1, hide=("torch",)) as pool:
        out = pool.map([{"do": "import", "libs": ["torch", "json"]}], timeout_s=60)
    assert out == [["json"]]
    with builder.Builder(workers=1, compile=False) as b:
        assert b._pool.hide == ("torch",)


def test_every_runner_takes_the_call_the_engine_makes():
    """run(op, builds, *, on_result) on each runner; the results come back by index, once."""
    import inspect

    from bocast.measure.rpc.runner import RpcRunner
    from bocast.measure.runner import GpuRunner, Runner

    declared = inspect.signature(Runner.run).parameters
    for cls in (GpuRunner, StandinRunner, RpcRunner):
        assert issubclass(cls, Runner) and not inspect.isabstract(cls), cls
        got = inspect.signature(cls.run).parameters
        assert [(p.name, p.kind) for p in got.values()] == \
            [(p.name, p.kind) for p in declared.values()], cls
    seen = []
    builds = [build("ok1"), build("wrong"), build("ok2")]
    with StandinRunner(timeout_s=10) as runner:
        results = runner.run(OP, builds, on_result=lambda i, r: seen.append((i, r)))
    assert sorted(i for i, _ in seen) == [0, 1, 2]
    assert all(results[i] is r and r.key == builds[i].key for i, r in seen)


def test_measurers_offer_what_the_tuner_calls(tmp_path):
    from bocast.measure.builder import Builder
    from bocast.measure.parts import make_measurer, make_runner
    from bocast.measure.replay import ReplayDataset
    from bocast.records.public import Store, load_dataset
    from bocast.run.tuner import SupportsPrepareRun, Tuner, run_interleaved
    from bocast.space.operators.operator import from_workload
    from bocast.strategies import make_strategy

    prefix = "gemm_1024_1024_1024"
    op = from_workload(load_dataset(prefix)[1]["workload"])
    dataset = ReplayDataset(prefix, op)
    replay = make_measurer(op, None, make_runner("replay", dataset=dataset))
    with Store(str(tmp_path / "s.db"), OP.workload) as store, Builder(workers=1) as builder:
        live = make_measurer(OP, store, None, builder)
        assert isinstance(live, SupportsPrepareRun) and isinstance(replay, SupportsPrepareRun)

    class OnlyMeasure:
        def measure(self, configs, *, source=""):
            return replay.measure(configs, source=source)

    def trajectory(measurer):  # a measure-only measurer runs in the same loop, unpipelined
        strategy = make_strategy("random", dataset.candidates(), seed=0)
        return run_interleaved([Tuner(strategy, measurer, trials=8, batch_size=4)])[0]

    one_phase = trajectory(OnlyMeasure())
    assert [r.key for r in one_phase.records] == [r.key for r in trajectory(replay).records]
    assert len(one_phase.records) == 8
