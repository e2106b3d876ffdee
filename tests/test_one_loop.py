"""Every run path goes through the one loop (:func:`bocast.run.tuner.run_interleaved`): the same
seed gives the same store, row for row, through ``bocast tune``, ``bocast.tune()`` and one arm
of ``bocast compare``, on replay and on the live path (with the CPU stand-in runner)."""

import contextlib
import dataclasses
import io

import pytest
import yaml

import bocast
from bocast import cli
from bocast.records.store import Store

#: wall-clock columns (the others must match): when a row was written, its session, and on the
#: live path the build's seconds
CLOCK = {"created", "session"}

REPLAY = {"workload": {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32",
                       "layout": "NT", "space": "v1"},
          "runner": "replay", "dataset": "gemm_32_2048_1000"}
STANDIN = {"workload": {"op": "gemm", "shape": [256, 256, 256], "dtype": "fp16:fp32",
                        "layout": "NT", "space": "v2"},
           "runner": "standin", "runner_options": {"workers": 1}}
STRATEGIES = {"bo": {"name": "bo", "n_init": 8, "pool_size": 128, "fit_maxiter": 10,
                     "warm_start": "none"},
              "cga": {"name": "cga", "pop_size": 16, "generations": 1, "warm_start": "none"}}


def _rows(path, skip=()):
    with Store.open(str(path)) as store:
        return [{k: v for k, v in dataclasses.asdict(r).items() if k not in skip}
                for r in store.records()]


def _cli(*args):
    """``bocast ARGS`` in this process (bocast.cli.main, as the command runs it): a subprocess
    would add an interpreter and a second import of torch to each case, and nothing that the
    stores compared here could show (tests/test_tune_cli.py and tests/test_compare.py run the
    commands as processes)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    assert code == 0, err.getvalue()


def _same_store_three_ways(tmp_path, base, strategy, trials, batch, skip):
    tune_cfg = {**base, "strategy": STRATEGIES[strategy], "batch_size": batch,
                "budget": {"trials": trials}, "seed": 3}
    (tmp_path / "tune.yaml").write_text(yaml.safe_dump({**tune_cfg,
                                                        "output": str(tmp_path / "cli")}))
    _cli("tune", str(tmp_path / "tune.yaml"), "--records", str(tmp_path / "lib"))
    bocast.tune({**tune_cfg, "output": str(tmp_path / "api")}, records=str(tmp_path / "lib2"))
    arm = {k: v for k, v in STRATEGIES[strategy].items()}
    compare_cfg = {**{k: v for k, v in base.items()}, "name": "one",
                   "strategies": [{"label": strategy, **arm}], "seeds": [3],
                   "budget": {"trials": trials}, "batch_size": batch, "budgets": [trials],
                   "output": str(tmp_path / "cmp"), "results": str(tmp_path / "res" / "one")}
    (tmp_path / "cmp.yaml").write_text(yaml.safe_dump(compare_cfg))
    _cli("compare", str(tmp_path / "cmp.yaml"))
    cli = _rows(tmp_path / "cli" / "records.db", skip)
    assert len(cli) == trials
    assert _rows(tmp_path / "api" / "records.db", skip) == cli
    assert _rows(tmp_path / "cmp" / f"{strategy}_seed3.db", skip) == cli


@pytest.mark.parametrize("strategy", ["bo", "cga"])
def test_replay_same_seed_same_store_through_cli_api_and_compare(tmp_path, strategy):
    _same_store_three_ways(tmp_path, REPLAY, strategy, trials=24, batch=8, skip=CLOCK)


@pytest.mark.slow
def test_live_same_seed_same_store_through_cli_api_and_compare(tmp_path):
    """The live path (builder, runner worker, engine) with the stand-in's synthetic timings;
    a build's seconds are wall time, so they are left out."""
    _same_store_three_ways(tmp_path, STANDIN, "cga", trials=8, batch=4,
                           skip=CLOCK | {"build_s"})
