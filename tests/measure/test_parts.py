"""The measuring parts made in one place (:mod:`bocast.measure.parts`): replay is a runner
(one that answers whole records), and its measurer writes what the replay measurer wrote
before it was one, row for row."""

import dataclasses
import os

import pytest

import bocast
from bocast import interrupt
from bocast.measure.engine import Measurer, RecordMeasurer
from bocast.measure.parts import make_measurer, make_runner
from bocast.measure.replay import ReplayDataset, ReplayRunner
from bocast.measure.runner import RecordRunner, Runner
from bocast.records.datasets import locate
from bocast.records.library import portable
from bocast.records.store import Store
from bocast.run.tuner import Tuner
from bocast.space.operators.operator import get_operator
from bocast.strategies import make_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMM = locate("gemm_32_2048_1000")
OP = get_operator("gemm").from_args((32, 2048, 1000), space="v1")
# a table with failures (launch errors), so that failed rows are replayed too
FAILING = locate("conv3d_4_16_28_28_64_64_3_3_3_1_1_1")
CONV = {"op": "conv3d", "shape": [4, 16, 28, 28, 64, 64, 3, 3, 3, 1, 1, 1], "space": "v1"}


@pytest.fixture(scope="module")
def gemm():
    return ReplayDataset(GEMM, OP)


DECLARED = ("live", "needs_gpu", "compiles", "answers_records", "synthetic", "fleet")


def test_each_kind_is_one_class_that_declares_what_it_is(gemm):
    """The commands ask a runner's class, never its name: the shipped kinds' declarations, the
    old names, and a runner object's kind (a class of one's own registered under its path)."""
    from bocast.measure.kinds import RUNNER_KINDS, kind_of, runner_class

    declared = {k: tuple(getattr(runner_class(k), d) for d in DECLARED) for k in RUNNER_KINDS}
    assert declared == {"local": (True, True, True, False, False, False),
                        "rpc": (True, False, True, False, False, True),
                        "replay": (False, False, False, True, False, False),
                        "standin": (True, False, False, False, True, False)}
    assert runner_class("tvm") is runner_class("local")
    assert kind_of(make_runner("replay", dataset=gemm)) == "replay"

    class Mine(Runner):
        run = None  # type: ignore[assignment]

    kind = kind_of(Mine())
    assert kind.endswith(":test_each_kind_is_one_class_that_declares_what_it_is.<locals>.Mine")
    assert runner_class(kind) is Mine and Mine.live and not Mine.needs_gpu and Mine.compiles

    # the rpc section goes with the class's fleet declaration, not with the name "rpc"
    from bocast.measure.rpc.options import follows_fleet
    from bocast.measure.rpc.runner import RpcRunner
    from bocast.run.config import rpc_options
    from bocast.schema import ConfigError

    class MyFleet(RpcRunner):
        pass

    fleet_kind = kind_of(MyFleet.__new__(MyFleet))
    assert rpc_options(fleet_kind, {"tracker": "h:9190", "key": "k"})["key"] == "k"
    assert follows_fleet({}, fleet_kind, {}) and not follows_fleet({}, kind, {})
    with pytest.raises(ConfigError, match="only for runner rpc"):
        rpc_options(kind, None, {"key": "k"})


def test_replay_is_a_runner_made_in_one_place(gemm, tmp_path):
    runner = make_runner("replay", dataset=gemm)
    assert isinstance(runner, ReplayRunner) and isinstance(runner, RecordRunner)
    assert isinstance(runner, Runner) and runner.name == "replay"
    assert runner.device() == gemm.meta["device"] and runner.reference(OP) == gemm.reference
    with pytest.raises(TypeError, match="answers whole records"):
        runner.run(OP, [])
    measurer = make_measurer(OP, None, runner)
    assert isinstance(measurer, RecordMeasurer)
    rec = measurer.measure(gemm.configs[:2], source="x")
    assert rec == [gemm.record(c, "x") for c in gemm.configs[:2]]
    assert measurer.clock_s == pytest.approx(sum(r.build_s + r.run_s for r in rec))
    with pytest.raises(ValueError, match="takes no builder"):
        make_measurer(OP, None, runner, object())
    with pytest.raises(ValueError, match="needs dataset"):
        make_runner("replay")
    with pytest.raises(ValueError, match="no dataset"):
        make_runner("standin", timeout_s=1.0, repeats=1, dataset=gemm)
    with pytest.raises(ValueError, match="runner: expected one of"):
        make_runner("fpga", dataset=gemm)
    with pytest.raises(ValueError, match="needs a store and a builder"):
        make_measurer(OP, None, None)
    with Store(str(tmp_path / "s.db"), OP.workload) as store:
        assert isinstance(make_measurer(OP, store, None, builder=_NoBuild()), Measurer)


class _NoBuild:
    """Stands for a builder where none is called."""


class _OldReplayMeasurer:
    """The replay measurer as it was before replay became a runner (bocast.measure.replay at
    63f3d8c), kept here to show that the new path writes the same store."""

    def __init__(self, dataset, store):
        self.dataset, self.store = dataset, store
        self.clock_s = 0.0
        self.session = store.start_session({"runner": "replay", "dataset": dataset.prefix})

    def prepare(self, configs, *, source="", on_record=None):
        return list(configs), source, on_record

    def run(self, batch):
        configs, source, on_record = batch
        return self.measure(configs, source=source, on_record=on_record)

    def measure(self, configs, *, source="", on_record=None):
        out = []
        for c in configs:
            interrupt.check()
            rec = self.dataset.record(c, source)
            self.clock_s += (rec.build_s or 0.0) + (rec.run_s or 0.0)
            self.store.append(rec, self.session)
            out.append(rec)
        return out


def _store(path):
    with Store.open(str(path)) as store:
        rows = [{k: v for k, v in dataclasses.asdict(r).items() if k != "created"}
                for r in store.records()]
        return rows, store.sessions()


@pytest.mark.parametrize("table, workload, strategy, trials", [
    pytest.param(FAILING, CONV, "random", 96, id="failing-random"),
    pytest.param(GEMM, OP.workload, "cga", 48, id="gemm-cga")])
def test_a_replay_tune_stores_what_the_old_replay_measurer_stored(tmp_path, table, workload,
                                                                   strategy, trials):
    """``bocast.tune`` on replay (the runner and measurer from bocast.measure.parts) against
    the old measurer under the same strategy and seed: the same records (statuses, failures,
    order, every column), the same session, the same simulated clock."""
    options = {"warm_start": "none"} if strategy == "cga" else {}
    result = bocast.tune({"workload": workload, "strategy": {"name": strategy, **options},
                          "batch_size": 16, "budget": {"trials": trials}, "seed": 4,
                          "runner": "replay", "dataset": table,
                          "output": str(tmp_path / "new")})
    dataset = ReplayDataset(table, get_operator(workload["op"]).from_args(
        tuple(workload["shape"]), space="v1"))
    with Store(str(tmp_path / "old.db"), dataset.op.workload) as store:
        old = Tuner(make_strategy(strategy, dataset.candidates(), seed=4, **options),
                    _OldReplayMeasurer(dataset, store), trials=trials, batch_size=16).run()
    new_rows, new_sessions = _store(result.store)
    old_rows, old_sessions = _store(tmp_path / "old.db")
    assert len(new_rows) == trials and new_rows == old_rows
    # the session names the dataset as a run names a source (a shipped one by its name), where
    # the old measurer wrote the path it was given
    assert new_sessions == [{**s, "dataset": portable(s["dataset"])} for s in old_sessions]
    assert result.summary["simulated_seconds"] == round(old.simulated_seconds, 1)
    if table == FAILING:
        assert {r["status"] for r in new_rows} > {"ok"}, "the failing table's failures replayed"
