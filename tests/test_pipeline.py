"""The pipelined loop (bocast.run.pipeline): batches proposed ahead with the ones in flight as
pending points, measured as one stream, told in the order asked. Time-independent: a measurer
that streams a replay dataset answers the submitted kernels in a chosen order (first in first
out, last in first out, a seeded shuffle), so batches complete out of order as on a fleet;
the checks are on what was asked, told and stored, never on seconds."""

import random
import signal

import pytest

from bocast.interrupt import Interrupted
from bocast.measure.parts import make_runner
from bocast.measure.replay import ReplayDataset
from bocast.records.datasets import locate
from bocast.records.store import Store
from bocast.run.pipeline import META
from bocast.run.tuner import Tuner
from bocast.space.operators.operator import get_operator
from bocast.space.space import Space
from bocast.strategies import make_strategy

OP = get_operator("gemm").from_args((32, 2048, 1000), space="v1")
BO = {"n_init": 8, "pool_size": 128, "fit_maxiter": 10, "threads": 1}
TRIALS, BATCH = 44, 8  # the last batch is 4: the budget's remainder


@pytest.fixture(scope="module")
def dataset():
    return ReplayDataset(locate("gemm_32_2048_1000"), OP)


class Streaming:
    """A measurer that streams (``ahead`` > 0) a replay dataset into ``store``: each
    :meth:`_Stream.get` answers one submitted kernel, picked by ``order``; with ``stop``, a
    stop (as SIGINT's) once the store holds that many records."""

    def __init__(self, dataset, store, *, order="fifo", seed=0, stop=None, ahead=1):
        self.runner = make_runner("replay", dataset=dataset)
        self.store, self.order, self.stop, self.ahead = store, order, stop, ahead
        self.rng = random.Random(seed)
        self.session = store.start_session({"runner": "replay stream"})
        self.submitted: list[str] = []
        self.told: list[list[str]] = []  # the batches the loop told the stream of

    def stream(self, source=""):
        return _Stream(self, source)

    def measure(self, configs, *, source=""):  # (the plain loop's; unused here)
        raise AssertionError("a streaming measurer is driven by its stream")


class _Stream:
    def __init__(self, m: Streaming, source: str):
        self.m, self.source, self.queue = m, source, []

    def submit(self, configs):
        held = self.m.store.keys()
        skipped = set()
        for c in configs:
            key = Space.key(c)
            if key in held or key in self.m.submitted:
                skipped.add(key)
            else:
                self.m.submitted.append(key)
                self.queue.append(c)
        return skipped

    def get(self, timeout_s):
        assert self.queue, "the loop waits for a record while nothing is in flight"
        pick = {"fifo": 0, "lifo": len(self.queue) - 1,
                "shuffle": self.m.rng.randrange(len(self.queue))}[self.m.order]
        rec = self.m.runner.record(self.queue.pop(pick), self.source)
        self.m.store.append(rec, self.m.session)
        if self.m.stop is not None and len(self.m.store) >= self.m.stop:
            raise Interrupted(signal.SIGINT)  # after the record is stored, as a real stop
        return rec

    def told(self, records):
        self.m.told.append([r.key for r in records])

    def close(self, *, wait=True):
        assert not wait or not self.queue


class Spy:
    """Wraps a strategy: each ask's history length and pending keys."""

    def __init__(self, strategy):
        self.inner, self.asks = strategy, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def ask(self, n, pending=()):
        self.asks.append((len(self.inner.history), [Space.key(c) for c in pending]))
        return self.inner.ask(n, pending)


def tune(dataset, store, name="bo", h=BO, *, trials=TRIALS, **kw):
    strategy = Spy(make_strategy(name, dataset.candidates(), seed=3, **h))
    strategy.measurer = Streaming(dataset, store, **kw)
    Tuner(strategy, strategy.measurer, trials=trials, batch_size=BATCH).run(store.records())
    return strategy


def test_each_batch_is_asked_with_the_batch_in_flight_pending(dataset, tmp_path):
    with Store(str(tmp_path / "s.db"), OP.workload) as store:
        spy = tune(dataset, store, order="lifo")
        records = store.records()
        assert store.get_meta(META) == {"ahead": 1}
    told = [r.key for r in spy.inner.history]
    batches = [told[i:i + BATCH] for i in range(0, TRIALS, BATCH)]
    # batch 0 alone; batch 1 with batch 0 pending; batch k + 1 once batch k - 1 is told, with
    # batch k pending
    assert spy.asks[0] == (0, [])
    assert spy.asks[1] == (0, batches[0])
    for k in range(1, len(batches) - 1):
        assert spy.asks[k + 1] == (k * BATCH, batches[k]), k
    assert len(spy.asks) == len(batches)
    assert spy.measurer.told == batches  # the stream hears of each batch told (its reference)
    assert len(records) == TRIALS == len({r.key for r in records})
    # last in, first out: batch 1 finished before batch 0 began to, yet was told after it
    assert [r.key for r in records[:BATCH]] == list(reversed(batches[1]))


@pytest.mark.parametrize("name, h", [("bo", BO), ("random", {})])
def test_the_run_is_the_same_whatever_order_its_kernels_finish_in(dataset, tmp_path, name, h):
    runs = []
    for order, seed in (("fifo", 0), ("lifo", 0), ("shuffle", 1), ("shuffle", 2)):
        with Store(str(tmp_path / f"{order}{seed}.db"), OP.workload) as store:
            spy = tune(dataset, store, name, h, order=order, seed=seed)
            stored = sorted(r.key for r in store.records())
        runs.append(([r.key for r in spy.inner.history], spy.asks, stored))
    assert all(r == runs[0] for r in runs[1:])
    assert len(runs[0][0]) == TRIALS


def test_a_resumed_pipelined_run_is_the_uninterrupted_run(dataset, tmp_path):
    """Stopped at random rows, each call with another arrival order, and resumed: the same
    asks and tells as the run never stopped; every kernel stored once (those in flight at a
    stop are measured on resume)."""
    with Store(str(tmp_path / "whole.db"), OP.workload) as store:
        whole = tune(dataset, store, order="shuffle", seed=5)
        whole_stored = {r.key: r for r in store.records()}
    rng = random.Random(0)
    stops = sorted(rng.sample(range(1, TRIALS), 5))
    with Store(str(tmp_path / "stopped.db"), OP.workload) as store:
        for i, rows in enumerate(stops):
            with pytest.raises(Interrupted):
                tune(dataset, store, order="shuffle", seed=10 + i, stop=rows)
            assert len(store) == rows
        last = tune(dataset, store, order="lifo")
        stopped = store.records()
    assert [r.key for r in last.inner.history] == [r.key for r in whole.inner.history]
    assert last.asks[-1] == whole.asks[-1]
    assert len(stopped) == TRIALS and {r.key: r for r in stopped} == whole_stored


def test_a_store_the_plain_loop_began_is_resumed_by_it(dataset, tmp_path):
    """No pipeline in its meta: the plain loop's store resumes batch after batch (a resumed
    run is the same run), though the measurer could stream."""
    from bocast.measure.parts import make_measurer

    with Store(str(tmp_path / "s.db"), OP.workload) as store:
        plain = make_measurer(OP, store, make_runner("replay", dataset=dataset))
        Tuner(make_strategy("random", dataset.candidates(), seed=3), plain, trials=12,
              batch_size=BATCH).run()
        with pytest.raises(AssertionError, match="driven by its stream"):
            tune(dataset, store, "random", {}, trials=20)
        assert store.get_meta(META) is None


def test_pending_points_shrink_bos_variance_there_and_leave_its_mean():
    import numpy as np

    from bocast.strategies.bo.surrogate import Surrogate

    rng = np.random.default_rng(0)
    x = rng.random((20, 3))
    y = np.sin(3 * x).sum(1)
    s = Surrogate(np.array([[0.0] * 3, [1.0] * 3]), maxiter=20)
    s.fit(x, y)
    pool = rng.random((50, 3))
    before = s.predict(pool)
    s.believe(pool[:5])
    after = s.predict(pool)
    assert np.allclose(after.mean.numpy(), before.mean.numpy(), atol=1e-6)
    assert (after.var[:5] < 0.2 * before.var[:5]).all()
    assert (after.var <= before.var + 1e-9).all()


@pytest.mark.parametrize("given, expected", [(None, "PASSIVE"), ("active", "active")])
def test_importing_bocast_makes_openmp_wait_passively_unless_the_environment_says(given,
                                                                                  expected):
    """A pipelined ask runs beside the builds: torch's OpenMP threads must not spin for the
    cores the builds hold (bocast/__init__.py; lab/bench_pending.py: 2-6x). Set before
    torch loads, and never over what the environment says."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = ("import os, sys, bocast; assert 'torch' not in sys.modules; "
            "print(os.environ.get('OMP_WAIT_POLICY'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == expected
