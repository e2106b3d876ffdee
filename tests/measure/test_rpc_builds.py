"""GPU servers that build what they time (bocast.measure.rpc.builds): two stand-in servers of
two build workers each on 127.0.0.1, real TVM RPC sessions, real TVM lowering (no nvcc: the
stand-in runner's builder), the stand-in measurement worker (synthetic timings)."""

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
from bocast.space.operators.operator import get_operator
from bocast.space.space import Space
from tests.measure.test_rpc import Cluster

OP = get_operator("gemm").from_args((128, 128, 128))
LOWER_ONLY = {"compile": False, "compile_timeout_s": 60.0, "reject_spills": False}


@pytest.fixture(scope="module")
def fleet():
    c = Cluster(key="builds", gpus="0,1", sleep_s=0.3, build_workers=2)
    try:
        c.wait_free()
        yield c
    finally:
        c.close()


def cached_entries(folder: str) -> int:
    return sum(f.endswith(".json") for _, _, fs in os.walk(folder) for f in fs)


def test_servers_build_what_they_time_once(fleet):
    infos = fleet.wait_free()
    assert {i["build_workers"] for i in infos} == {2}
    runner = fleet.runner(timeout_s=10.0)
    configs = OP.space.sample(6, 0, unique=True)
    got: list[int] = []
    out = runner.build_and_run(OP, configs, LOWER_ONLY, on_result=lambda i, b, r: got.append(i))
    assert sorted(got) == list(range(6))
    assert [b.key for b, _ in out] == [Space.key(c) for c in configs]
    for b, r in out:
        assert b.status is Status.OK and b.kernel and not b.cached
        assert r is not None and r.status is Status.OK and r.extra["measured_on"]["gpu_index"]
        assert r.vs_reference == pytest.approx(1.0 / r.latency_ms)  # paired trials, as local
    assert cached_entries(fleet.build_cache) == 6  # the servers' own cache
    again = runner.build_and_run(OP, configs, LOWER_ONLY)
    assert all(b.cached for b, _ in again)
    assert [r.latency_ms for _, r in again] == [r.latency_ms for _, r in out]


def test_a_tune_batch_through_the_engine_builds_on_the_servers(fleet, tmp_path):
    fleet.wait_free()
    with Builder(workers=1, compile=False) as local, \
            Store(str(tmp_path / "r.db"), OP.workload) as store:
        measurer = Measurer(OP, store, local, fleet.runner(timeout_s=10.0))
        records = measurer.measure(OP.space.sample(5, 1, unique=True))
        assert local.built == 0  # nothing built here
    assert len(records) == 5 and all(r.ok and r.measured_on and r.build_s for r in records)
    assert all("registers" not in r.features for r in records)  # lowered only, as asked


def test_a_server_killed_mid_batch_has_its_kernels_built_and_timed_elsewhere(fleet):
    before = {s["gpu_index"]: s for s in fleet.wait_free()}
    runner = fleet.runner(timeout_s=10.0)
    configs = OP.space.sample(12, 2, unique=True)
    got: list[int] = []
    out: dict = {}

    def go():
        try:
            out["results"] = runner.build_and_run(OP, configs, LOWER_ONLY,
                                                  on_result=lambda i, b, r: got.append(i))
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    while len(got) < 2 and t.is_alive():
        time.sleep(0.02)
    os.kill(before["1"]["pid"], signal.SIGKILL)
    t.join(240)
    assert "error" not in out, out.get("error")
    assert sorted(got) == list(range(12))  # each answered exactly once
    assert all(b.status is Status.OK and r is not None and r.status is Status.OK
               for b, r in out["results"])
    assert any("lost" in line for line in runner.lost)
    after = {s["gpu_index"]: s for s in fleet.wait_free(timeout_s=240)}
    assert after["1"]["restarts"] == 1


def test_a_hung_server_has_its_kernels_built_and_timed_elsewhere(fleet):
    before = {s["gpu_index"]: s for s in fleet.wait_free()}
    # declared hung when nothing comes back for the build's limit (2 s + 30 s for a worker's
    # start) + the run's (10 s) + slack (1 s)
    runner = fleet.runner(timeout_s=10.0, slack_s=1.0)
    configs = OP.space.sample(10, 3, unique=True)
    got: list[int] = []
    out: dict = {}

    def go():
        out["results"] = runner.build_and_run(OP, configs, {**LOWER_ONLY,
                                                            "compile_timeout_s": 2.0},
                                              on_result=lambda i, b, r: got.append(i))

    t = threading.Thread(target=go)
    t.start()
    while len(got) < 2 and t.is_alive():
        time.sleep(0.02)
    pid = before["0"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t.join(240)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert sorted(got) == list(range(10)) and len(out["results"]) == 10
    assert all(r is not None and r.status is Status.OK for _, r in out["results"])
    assert any("hung" in line for line in runner.lost)
    after = {s["gpu_index"]: s for s in fleet.wait_free(timeout_s=240)}
    assert after["0"]["pid"] == pid  # resumed, it ends the abandoned session and serves again


def test_a_server_that_builds_nothing_is_refused_for_builds(fleet, tmp_path):
    c = Cluster(key="nobuilds", gpus="0", build_workers=0, server_wait_s=3.0)
    try:
        c.wait_free()
        runner = c.runner()
        from bocast.measure.rpc.runner import RpcUnavailable

        with pytest.raises(RpcUnavailable, match="build-workers 0"):
            runner.build_and_run(OP, OP.space.sample(1, 0, unique=True), LOWER_ONLY)
        # the same servers time what this side builds (rpc.builds: local)
        local = c.runner(builds="local")
        assert not local.builds_on_servers
    finally:
        c.close()


def test_the_batch_follows_the_fleet_unless_given_and_a_resume_keeps_its_own(fleet, tmp_path):
    from bocast import api
    from bocast.measure.nvcc import why_no_compiler

    if why_no_compiler():
        pytest.skip(why_no_compiler())
    fleet.wait_free()
    rpc = {"tracker": f"127.0.0.1:{fleet.tracker.port}", "key": fleet.key}
    base = {"workload": {"op": "gemm", "shape": [128, 128, 128]},
            "strategy": {"name": "random"}, "budget": {"trials": 4}, "seed": 0,
            "output": str(tmp_path / "out"), "runner": "rpc", "rpc": rpc}
    run = api.prepare(base)
    assert run.cfg.batch_size == 4 and "2+2" in run.batch_note  # 2 servers, 2 workers each
    assert run.identity["batch_size"] == 4
    assert api.prepare({**base, "batch_size": 3}).cfg.batch_size == 3  # given: it stands
    local = api.prepare({**base, "rpc": {**rpc, "builds": "local"}})
    assert local.cfg.batch_size == 32 and local.batch_note is None  # the configuration's
    quick = api.prepare(api.quick_config("gemm", shape=(128, 128, 128), runner="rpc",
                                         output=str(tmp_path / "q"), warm_start="none"), rpc=rpc)
    assert quick.cfg.batch_size == 4
    # a run that began on a fleet of 6 build workers resumes with batch 6
    with Store(run.store_path, OP.workload) as store:
        store.set_meta("run", {**run.identity, "batch_size": 6})
    resumed = api.prepare(base)
    assert resumed.cfg.batch_size == 6 and "began with" in resumed.batch_note


def test_a_server_without_nvcc_offers_no_builds_and_says_why(monkeypatch):
    """A GPU host without nvcc (servers only timed before): it advertises no build workers and
    the reason, which a runner that wants server builds names when it refuses the server,
    instead of every kernel answered as a build_error."""
    from bocast.measure.rpc import service as rpc_service

    class NoPool:
        def __init__(self, *a, **k):
            pass

    monkeypatch.setattr(rpc_service, "TimedPool", NoPool)
    monkeypatch.setattr(rpc_service, "why_no_compiler", lambda: "nvcc is not on PATH")
    service = rpc_service.Service("standin", build_workers=4)
    assert service.builds is None
    assert service.info == {"build_workers": 0, "cannot_build": "nvcc is not on PATH"}
    monkeypatch.setattr(rpc_service, "why_no_compiler", lambda: None)
    monkeypatch.setattr(rpc_service, "ServerBuilds", lambda n, call: ("builds", n))
    able = rpc_service.Service("standin", build_workers=4)
    assert able.info == {"build_workers": 4} and able.builds == ("builds", 4)
