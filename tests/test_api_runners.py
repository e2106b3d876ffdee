"""The API takes runner and builder objects as well as a kind (as MetaSchedule's tune functions
do): the stand-in object gives the store that ``runner="standin"`` gives, a runner of one's own
is recorded by its name, a replay runner replays its dataset, the caller's objects are never
closed, and a wrong type is one InputError. Live runs use the CPU stand-in (SYNTHETIC
timings)."""

import dataclasses
import json
import os
import re

import pytest

import bocast
from bocast.errors import InputError
from bocast.measure.builder import Builder
from bocast.measure.parts import make_runner
from bocast.measure.replay import ReplayDataset
from bocast.measure.standin import StandinRunner
from bocast.records.datasets import locate
from bocast.records.store import Store
from bocast.space.operators.operator import get_operator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDIN = {"workload": {"op": "gemm", "shape": [256, 256, 256], "dtype": "fp16:fp32",
                        "layout": "NT", "space": "v2"},
           "strategy": {"name": "cga", "pop_size": 16, "generations": 1, "warm_start": "none"},
           "batch_size": 4, "budget": {"trials": 8}, "seed": 3,
           "runner_options": {"workers": 1}}
#: wall-clock columns: when a row was written, its session, a live build's seconds
CLOCK = {"created", "session", "build_s"}


class Counted(StandinRunner):
    """The stand-in, counting the calls of close (the caller's object: bocast never closes
    it)."""

    closes = 0

    def close(self) -> None:
        self.closes += 1
        super().close()


class MyRunner(Counted):
    """A runner of one's own (here the stand-in under another name)."""

    name = "mybox"


def _rows(path):
    with Store.open(str(path)) as store:
        return [{k: v for k, v in dataclasses.asdict(r).items() if k not in CLOCK}
                for r in store.records()], store.sessions(), store.get_meta("run")


def test_a_standin_object_gives_the_store_of_the_standin_kind(tmp_path):
    kind = bocast.tune({**STANDIN, "runner": "standin", "output": str(tmp_path / "kind")})
    with Counted() as runner:
        given = bocast.tune({**STANDIN, "runner": "local", "output": str(tmp_path / "object")},
                            runner=runner)
        assert runner.closes == 0, "the caller's runner was closed"
    rows, sessions, ident = _rows(given.store)
    assert len(rows) == 8 and rows == _rows(kind.store)[0]
    assert ident == _rows(kind.store)[2], "the same run: the same identity"
    assert sessions[-1]["runner"] == given.summary["runner"] == "standin"


def test_a_runner_of_ones_own_is_recorded_by_name(tmp_path):
    with MyRunner() as runner, Builder(workers=1, compile=False) as builder:
        result = bocast.tune({**STANDIN, "budget": {"trials": 4}, "runner": "standin",
                              "output": str(tmp_path / "out")}, runner=runner, builder=builder)
        assert runner.closes == 0 and builder.build(get_operator("gemm").from_args(
            (256, 256, 256), space="v2"), []) == [], "the caller's builder still builds"
    _, sessions, ident = _rows(result.store)
    assert sessions[-1]["runner"] == result.summary["runner"] == ident["runner"] == "mybox"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["runner"] == "mybox" and result.trials == 4


def test_a_replay_runner_replays_its_dataset(tmp_path):
    prefix = locate("gemm_32_2048_1000")
    op = get_operator("gemm").from_args((32, 2048, 1000), space="v1")
    quick = {"op": "gemm", "shape": (32, 2048, 1000), "space": "v1", "strategy": "random",
             "trials": 16, "batch_size": 8}
    kind = bocast.tune(**quick, runner="replay", dataset=prefix, output=str(tmp_path / "kind"))
    given = bocast.tune(**quick, runner=make_runner("replay", dataset=ReplayDataset(prefix, op)),
                        output=str(tmp_path / "object"))
    assert _rows(given.store) == _rows(kind.store)
    assert given.summary["dataset"] == prefix and given.summary["runner"] == "replay"
    other = ReplayDataset(locate("gemm_32_4096_4096"),
                          get_operator("gemm").from_args((32, 4096, 4096), space="v1"))
    with pytest.raises(InputError, match="was recorded for workload"):
        bocast.tune(**quick, runner=make_runner("replay", dataset=other),
                    output=str(tmp_path / "other"))
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("kw, message", [
    ({"runner": 42}, "runner: expected a kind (local, rpc, replay, standin) or a "
                     "bocast.measure.runner.Runner, got int"),
    ({"builder": "nvcc"}, "builder: expected a bocast.measure.builder.Builder, got str")])
def test_a_wrong_runner_or_builder_is_one_input_error(tmp_path, kw, message):
    with pytest.raises(InputError) as e:
        bocast.tune({**STANDIN, "runner": "standin", "output": str(tmp_path / "out")}, **kw)
    assert str(e.value) == message
    assert not (tmp_path / "out").exists()


def test_compare_takes_a_live_runner_object(tmp_path):
    base = {"name": "c", "workload": STANDIN["workload"],
            "strategies": [{"label": "random", "name": "random"}], "seeds": 1,
            "budget": {"trials": 4}, "batch_size": 4, "budgets": [4],
            "runner_options": {"workers": 1}, "output": str(tmp_path / "runs"),
            "results": str(tmp_path / "res" / "c")}
    with Counted() as runner, Builder(workers=1, compile=False) as builder:
        summary = bocast.compare({**base, "runner": "standin"}, runner=runner, builder=builder)
        assert runner.closes == 0, "the caller's runner was closed"
        other = {**base, "output": str(tmp_path / "other")}
        for config, kw, message in (
                ({**other, "runner": "local"}, {"runner": runner}, "objects serve a live "
                 "comparison whose runner is their kind (standin), not runner: local"),
                ({**other, "runner": "standin"}, {"runner": "standin"},
                 "compare takes a runner object")):
            with pytest.raises(InputError, match=re.escape(message)):
                bocast.compare(config, **kw)
        assert not (tmp_path / "other").exists()
    assert summary["strategies"]["random"]["runs"] == 1
    _, sessions, _ = _rows(tmp_path / "runs" / "random_seed0.db")
    assert sessions[-1]["runner"] == "standin"
