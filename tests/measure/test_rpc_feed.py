"""The RPC runner's feed (bocast.measure.rpc.feed) and the pipelined loop over it: two stand-in
servers of two build workers each on 127.0.0.1 (real TVM RPC sessions, real TVM lowering, no
nvcc; synthetic timings). Counts and orders only, never seconds."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from bocast.measure.builder import Builder
from bocast.measure.engine import Measurer
from bocast.records.status import Status
from bocast.records.store import Store
from bocast.run.pipeline import META
from bocast.run.tuner import Tuner
from bocast.space.candidates import SpaceCandidates
from bocast.space.space import Space
from bocast.strategies import make_strategy
from tests.measure.test_rpc import Cluster
from tests.measure.test_rpc_builds import LOWER_ONLY, OP


@pytest.fixture(scope="module")
def fleet():
    c = Cluster(key="feed", gpus="0,1", sleep_s=0.3, build_workers=2)
    try:
        c.wait_free()
        yield c
    finally:
        c.close()


def wait_for(cond, timeout_s=240.0):
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.02)
    assert cond()


def test_a_feed_takes_kernels_while_it_runs_and_answers_each_once(fleet):
    fleet.wait_free()
    runner = fleet.runner(timeout_s=10.0)
    got: list[tuple[int, str]] = []
    lock = threading.Lock()

    def on_result(i, b, r):
        with lock:
            got.append((i, b.key))
        assert b.status is Status.OK and r is not None and r.status is Status.OK

    configs = OP.space.sample(10, 11, unique=True)
    feed = runner.open_feed(OP, LOWER_ONLY, on_result)
    assert feed.put(configs[:4]) == [0, 1, 2, 3]
    wait_for(lambda: len(got) >= 2)
    assert feed.put(configs[4:]) == list(range(4, 10))  # while the first ones still run
    feed.close()
    assert sorted(got) == [(i, Space.key(c)) for i, c in enumerate(configs)]
    # (a session may lose its match on this busy 2-core host: its kernels go to another)


def test_a_server_killed_mid_feed_has_its_kernels_measured_elsewhere(fleet):
    before = {s["gpu_index"]: s for s in fleet.wait_free()}
    runner = fleet.runner(timeout_s=10.0)
    got: list[int] = []
    feed = runner.open_feed(OP, LOWER_ONLY, lambda i, b, r: got.append(i))
    feed.put(OP.space.sample(8, 12, unique=True))
    wait_for(lambda: len(got) >= 2)
    os.kill(before["1"]["pid"], signal.SIGKILL)
    feed.put(OP.space.sample(12, 12, unique=True)[8:])
    feed.close()
    assert sorted(got) == list(range(12))  # each answered exactly once
    assert any("lost" in line for line in runner.lost)
    after = {s["gpu_index"]: s for s in fleet.wait_free(timeout_s=240)}
    assert after["1"]["restarts"] == before["1"]["restarts"] + 1


def tune(fleet, path, trials: int, batch: int = 3) -> tuple[list, list, list]:
    """A pipelined tune (random strategy) through the fleet into ``path``, resuming what it
    holds; (the strategy's told keys, the store's records, the keys of each batch with a
    reading of the reference)."""
    with Builder(workers=1, compile=False) as local, Store(str(path), OP.workload) as store:
        strategy = make_strategy("random", SpaceCandidates(OP.space, OP.workload), seed=4)
        measurer = Measurer(OP, store, local, fleet.runner(timeout_s=10.0),
                            batch_reference=True)
        assert measurer.ahead == 1
        Tuner(strategy, measurer, trials=trials, batch_size=batch).run(store.records())
        assert local.built == 0 and store.get_meta(META) == {"ahead": 1}
        told = [r.key for r in strategy.history]
        readings = [(b["keys"], "tflops" in b.get("reference", {})) for b in store.batches()]
        return told, store.records(), readings


def test_a_pipelined_tune_on_the_fleet_measures_each_kernel_once_and_resumes(fleet, tmp_path):
    fleet.wait_free()
    told, records, readings = tune(fleet, tmp_path / "whole.db", 10)
    assert len(records) == 10 == len({r.key for r in records})
    assert sorted(told) == sorted(r.key for r in records)
    # the reference timed through the feed once per batch told (issue 40's readings)
    assert readings == [(told[i:i + 3], True) for i in range(0, 10, 3)]
    assert all(r.ok and r.measured_on for r in records)
    # the same run in two calls: 5 trials, then resumed to 10
    tune(fleet, tmp_path / "two.db", 5)
    told2, records2, _ = tune(fleet, tmp_path / "two.db", 10)
    assert told2 == told and sorted(r.key for r in records2) == sorted(told)


def test_a_server_killed_mid_tune_loses_no_trial_and_repeats_none(fleet, tmp_path):
    """The pipelined loop on the fleet, one server SIGKILLed once 3 records are stored: its
    kernels are measured by the other (or by it, restarted), every trial recorded once, none
    failed for the lost server, and the run tells what it asked in order."""
    before = {s["gpu_index"]: s for s in fleet.wait_free()}
    stored: list = []
    killed = threading.Event()

    def on_record(rec):
        stored.append(rec.key)
        if len(stored) >= 3 and not killed.is_set():
            killed.set()
            os.kill(before["0"]["pid"], signal.SIGKILL)

    with Builder(workers=1, compile=False) as local, \
            Store(str(tmp_path / "k.db"), OP.workload) as store:
        strategy = make_strategy("random", SpaceCandidates(OP.space, OP.workload), seed=7)
        runner = fleet.runner(timeout_s=10.0)
        measurer = Measurer(OP, store, local, runner, on_record=on_record)
        Tuner(strategy, measurer, trials=12, batch_size=3).run()
        records = store.records()
    assert killed.is_set() and any("lost" in line for line in runner.lost)
    assert len(records) == 12 == len({r.key for r in records}) == len(stored)
    assert all(r.ok for r in records)  # none failed for the lost server
    assert sorted(r.key for r in strategy.history) == sorted(stored)
    after = {s["gpu_index"]: s for s in fleet.wait_free(timeout_s=240)}
    assert after["0"]["restarts"] == before["0"]["restarts"] + 1
