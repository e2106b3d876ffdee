"""A resumed run is the uninterrupted run (issue 25): stopped at random points and resumed, every
strategy (and warm start) leaves a store identical to the uninterrupted run's, row for row:
the same configurations in the same order with the same values.

The stop points are random (``BOCAST_FAULT_SEED`` varies them, as in tests/test_interrupts.py):
a stop inside a batch (a partly measured batch must be completed with the configurations it was
asked with), at a batch's start (as a stop during a proposal leaves it), and after the last
trial with a larger budget. In process, a stop is the :class:`~bocast.interrupt.Interrupted`
that SIGINT and SIGTERM raise at a safe point; ``test_tune_resumes_after_signals`` sends the
real signals (and SIGKILL) to ``bocast tune``."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml

from bocast import api
from bocast.interrupt import Interrupted
from bocast.measure.parts import make_measurer, make_runner
from bocast.measure.replay import ReplayDataset
from bocast.records.datasets import locate
from bocast.records.store import Store
from bocast.run.tuner import Tuner, run_interleaved
from bocast.space.operators.operator import get_operator
from bocast.space.space import Space
from bocast.strategies import make_strategy, strategies

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET = locate("gemm_32_2048_1000")
SOURCE = locate("gemm_32_4096_4096")  # warm start
WORKLOAD = {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
            "space": "v1"}
OP = get_operator("gemm").from_args((32, 2048, 1000), space="v1")
# a table with failures (13% launch errors), for BO's feasibility classifier: the GEMM table
# has none, and the classifier is fitted only once a failure is seen
FAILING = (locate("conv3d_4_16_28_28_64_64_3_3_3_1_1_1"),
           get_operator("conv3d").from_args((4, 16, 28, 28, 64, 64, 3, 3, 3, 1, 1, 1),
                                            space="v1"))
# small rounds: the model proposes from the second batch on (BO's n_init = one batch)
# one torch thread: two spin-wait for each other on a busy 2-core machine (10x slower rounds)
BO = {"n_init": 8, "pool_size": 128, "fit_maxiter": 10, "threads": 1}
CGA = {"pop_size": 32, "generations": 2}
WARM = {"warm_start": [SOURCE]}
TRIALS, BATCH = 44, 8  # the last batch is 4: the budget's remainder
STOPS = 10
# on the failing table every call refits the classifier as well as the GP (each stop adds a
# round): 4 stops there, 20-40 s of CPU less a variant on the slow run
STOPS_FAILING = 4
SEED = int(os.environ.get("BOCAST_FAULT_SEED", "0"))

_slow = pytest.mark.slow
VARIANTS = [
    pytest.param("random", {}, "gemm", id="random"),
    pytest.param("ga", {}, "gemm", id="ga"),
    pytest.param("cga", CGA, "gemm", id="cga"),
    pytest.param("cga", {**CGA, **WARM}, "gemm", id="cga-warm"),
    pytest.param("bo", BO, "gemm", id="bo"),
    pytest.param("bo", {**BO, **WARM, "warm_start_points": 64, "warm_start_top": 2}, "gemm",
                 id="bo-warm"),
    pytest.param("bo", {**BO, "trust_region": 1}, "gemm", id="bo-trust-region"),
    # BO on the failing table fits its classifier (a variational GP) in every round, resumed
    # ones included: ~1 min a test on a 2-core CPU (so do becbo and ensemble below)
    pytest.param("bo", BO, "failing", id="bo-failures", marks=_slow),
    # the other acquisitions and options: the same replay around other scoring
    *[pytest.param("bo", {**BO, **h}, table, id=f"bo-{k}", marks=_slow) for k, h, table in (
        ("qlogei", {"acquisition": "qlogei"}, "gemm"), ("ts", {"acquisition": "ts"}, "gemm"),
        ("becbo", {"acquisition": "becbo"}, "failing"),
        ("ensemble", {"classifier": "ensemble"}, "failing"),
        ("relative", {"y_transform": "relative"}, "gemm"),
        ("derived", {"features": "derived"}, "gemm"),
        ("local-search", {"local_search": 2, "local_search_steps": 2}, "gemm"))],
]


def test_every_strategy_is_covered():
    names = {p.values[0] for p in VARIANTS}
    assert names == set(strategies())


@pytest.fixture(scope="module")
def dataset():
    return ReplayDataset(DATASET, OP)


@pytest.fixture(scope="module")
def tables(dataset):
    cache = {"gemm": dataset}

    def table(name):
        if name not in cache:
            cache[name] = ReplayDataset(*FAILING)
        return cache[name]

    return table


def replay(dataset, store=None):
    """The measurer of a replay run of ``dataset`` (into ``store``, where given)."""
    return make_measurer(dataset.op, store, make_runner("replay", dataset=dataset))


class StopAt:
    """A replay measurer that stops (as SIGINT does, between records) once its store holds
    ``rows`` records."""

    def __init__(self, dataset, store, rows: int):
        self.inner, self.store, self.rows = replay(dataset, store), store, rows

    def measure(self, configs, *, source=""):
        out = []
        for c in configs:
            if len(self.store) >= self.rows:
                raise Interrupted(signal.SIGINT)
            out += self.inner.measure([c], source=source)
        return out


def tune(dataset, store, name, h, *, trials=TRIALS, stop=None):
    """One call of a tune run on ``store`` (resuming what it holds); ``stop``: rows at which
    the call is interrupted."""
    strategy = make_strategy(name, dataset.candidates(), seed=3, **h)
    measurer = replay(dataset, store) if stop is None else StopAt(dataset, store, stop)
    Tuner(strategy, measurer, trials=trials, batch_size=BATCH).run(store.records())


def stored(path) -> list:
    with Store.open(str(path)) as s:
        return s.records()


@pytest.fixture(scope="module")
def whole_run(tables, tmp_path_factory):
    """The uninterrupted run's records of a variant, made once for the module: both tests
    below compare against it (a tune run is a pure function of the dataset, strategy,
    options, seed and budget; the first test's resumed run checks that again)."""
    cache: dict[str, list] = {}

    def run(name, h, table):
        k = f"{name}-{sorted(h.items())}-{table}"
        if k not in cache:
            dataset = tables(table)
            path = tmp_path_factory.mktemp("whole") / "whole.db"
            with Store(str(path), dataset.op.workload) as store:
                tune(dataset, store, name, h)
            cache[k] = stored(path)
        return cache[k]

    return run


@pytest.mark.parametrize("name, h, table", VARIANTS)
def test_resumed_run_is_the_uninterrupted_run(tables, whole_run, tmp_path, name, h, table):
    dataset = tables(table)
    whole = whole_run(name, h, table)
    assert len(whole) == TRIALS
    if table == "failing":  # a failure before the last batch: a round fitted the classifier
        assert any(not r.ok for r in whole[:TRIALS - BATCH])
    rng = random.Random(f"{SEED}-{name}-{sorted(h.items())}")
    stops = sorted(rng.sample(range(1, TRIALS), STOPS_FAILING if table == "failing" else STOPS))
    with Store(str(tmp_path / "stopped.db"), dataset.op.workload) as store:
        for rows in stops:  # each call resumes the one before and stops at the next point
            with pytest.raises(Interrupted):
                tune(dataset, store, name, h, stop=rows)
            assert len(store) == rows
        tune(dataset, store, name, h)
    resumed = stored(tmp_path / "stopped.db")
    first = next((i for i, (a, b) in enumerate(zip(whole, resumed)) if a != b), None)
    assert resumed == whole, f"stops at {stops}: row {first} differs"


@pytest.mark.parametrize("name, h, table", VARIANTS)
def test_extending_a_finished_budget_is_the_longer_run(tables, whole_run, tmp_path, name, h,
                                                       table):
    dataset = tables(table)
    with Store(str(tmp_path / "extended.db"), dataset.op.workload) as store:
        tune(dataset, store, name, h, trials=3 * BATCH)
        tune(dataset, store, name, h)
    assert stored(tmp_path / "extended.db") == whole_run(name, h, table)


def test_interleaved_runs_resume_inside_a_batch(dataset, tmp_path):
    """Live comparisons resume with Tuner.start and run_interleaved (prepare/run halves)."""
    specs = [("cga", CGA, 13), ("bo", BO, 21), ("random", {}, 6)]
    tuners, whole = [], []
    for i, (name, h, rows) in enumerate(specs):
        with Store(str(tmp_path / f"whole{i}.db"), OP.workload) as store:
            tune(dataset, store, name, h)
        whole.append(stored(tmp_path / f"whole{i}.db"))
        store = Store(str(tmp_path / f"stopped{i}.db"), OP.workload)
        replay(dataset, store).measure(
            [OP.space.from_json(r.config) for r in whole[-1][:rows]], source=name)
        tuner = Tuner(make_strategy(name, dataset.candidates(), seed=3, **h),
                      replay(dataset, store), trials=TRIALS, batch_size=BATCH)
        tuner.start(store.records())
        tuners.append(tuner)
    run_interleaved(tuners)
    for i, t in enumerate(tuners):
        t.measurer.store.close()
        assert stored(tmp_path / f"stopped{i}.db") == whole[i], specs[i][0]


def test_store_not_written_by_this_run_is_told_as_it_is(dataset, tmp_path):
    """Trials the strategy would not have asked for (another seed's): resumed as before the
    replay existed, every trial kept, none proposed twice."""
    with Store(str(tmp_path / "s.db"), OP.workload) as store:
        replay(dataset, store).measure(dataset.configs[:13])
        tune(dataset, store, "cga", CGA)
        keys = [r.key for r in store.records()]
    assert keys[:13] == [Space.key(c) for c in dataset.configs[:13]]
    assert len(keys) == len(set(keys)) == TRIALS


# ------------------------------------------------------------------------------ real signals

# each bocast call of the signal test sleeps this long per measured record, so that the signal
# lands inside the run (a replay run of 44 trials takes a fraction of a second); the measurer
# is slowed, not ReplayDataset.record, which opening the dataset also calls for each of its
# 500 rows (15 s a process)
DRIVER = """
import sys, time
from bocast import cli
from bocast.measure import engine
measure = engine.RecordMeasurer.measure
def slow(self, configs, **kwargs):
    out = []
    for c in configs:
        time.sleep(0.03)
        out += measure(self, [c], **kwargs)
    return out
engine.RecordMeasurer.measure = slow
sys.exit(cli.main(sys.argv[1:]))
"""


def _rows(path) -> int:
    try:
        return len(stored(path))
    except Exception:  # not yet created
        return 0


@pytest.mark.parametrize("name, h", [pytest.param("bo", BO, id="bo"),
                                     pytest.param("cga", {**CGA, **WARM}, id="cga-warm",
                                                  marks=_slow)])
def test_tune_resumes_after_signals(tmp_path, name, h):
    """``bocast tune`` stopped by SIGINT, SIGTERM and SIGKILL, each at a random number of rows,
    and rerun: its store is the uninterrupted run's."""
    # a cold run unless the case names its sources (the default, auto, would pick others)
    cfg = {"workload": WORKLOAD, "dataset": DATASET,
           "strategy": {"name": name, "warm_start": "none", **h},
           "batch_size": BATCH, "budget": {"trials": TRIALS}, "seed": 3, "runner": "replay"}
    api.tune({**cfg, "output": str(tmp_path / "whole")})
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({**cfg, "output": str(tmp_path / "out")}))
    argv = [sys.executable, "-c", DRIVER, "tune", str(tmp_path / "t.yaml"), "--json"]
    db = tmp_path / "out" / "records.db"
    rng = random.Random(f"{SEED}-{name}-signals")
    targets = sorted(rng.sample(range(1, TRIALS - 4), 3))
    sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    rng.shuffle(sigs)
    env = {**os.environ, "PYTHONPATH": ROOT}
    for sig, target in zip(sigs, targets):
        before = _rows(db)
        target = max(target, before + 1)  # a stop may overshoot the next point by a row
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while _rows(db) < target and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == (-sig if sig == signal.SIGKILL else 130), err
        assert before < target <= _rows(db) < TRIALS, (sig, target)
    final = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert final.returncode == 0, final.stderr
    assert stored(db) == stored(tmp_path / "whole" / "records.db")
