"""The RPC runner on the CPU: a tracker and three stand-in servers on 127.0.0.1, real TVM RPC
sessions, the stand-in measurement worker (synthetic timings, no GPU)."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from bocast.measure.builder import BuildResult
from bocast.measure.rpc import auth
from bocast.measure.rpc import protocol as proto
from bocast.measure.rpc import tracker as trk
from bocast.measure.rpc.options import parse_options
from bocast.measure.rpc.runner import RpcRunner, RpcUnavailable
from bocast.measure.rpc.service import PROTOCOL
from bocast.measure.standin import StandinRunner
from bocast.records.datasets import locate
from bocast.records.status import Status
from bocast.space.operators.operator import get_operator

OP = get_operator("gemm").from_args((64, 64, 64))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "standin"
SERVERS = 3


def build(kernel: str, key: str) -> BuildResult:
    return BuildResult(key=key, status=Status.OK, kernel=kernel, grid=(1, 1, 1),
                       block=(32, 1, 1), args=("A", "B", "C"))


def builds(n: int, tag: str) -> list[BuildResult]:
    return [build("ok", f"{tag}-{i}") for i in range(n)]


class Cluster:
    """A tracker and ``bocast serve`` of stand-in servers (one per label of ``gpus``) on
    127.0.0.1. With ``token`` the fleet proves it: the tracker holds it, the servers read
    ``token_file`` and :meth:`runner` passes that file ($BOCAST_RPC_TOKEN is not inherited)."""

    def __init__(self, *, key: str = KEY, gpus: str = "0,1,2", sleep_s: float = 0.2,
                 token: str | None = None, token_file: str | None = None,
                 server_wait_s: float = 60.0, build_workers: int = 1):
        self.key, self.token, self.token_file = key, token, token_file
        self.n, self.server_wait_s = len(gpus.split(",")), server_wait_s
        self.tracker = trk.Tracker("127.0.0.1", 0, 1, token=token).start()
        # the servers' build cache: a folder of this cluster's (started before any test's own)
        self.build_cache = tempfile.mkdtemp(prefix="bocast-server-builds-")
        env = dict(os.environ, BOCAST_STANDIN_SLEEP=str(sleep_s),
                   BOCAST_BUILD_CACHE=self.build_cache,
                   PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
        env.pop(auth.TOKEN_ENV, None)
        self.serve = subprocess.Popen(
            [sys.executable, "-m", "bocast.measure.rpc.server", "serve", "--key", key,
             "--tracker", f"127.0.0.1:{self.tracker.port}", "--gpus", gpus,
             "--host", "127.0.0.1", "--port", "0", "--worker", "standin",
             "--startup-timeout", "120", "--session-idle", "4",
             "--build-workers", str(build_workers),
             *(["--token-file", token_file] if token_file else [])], env=env,
            start_new_session=True)

    def servers(self) -> list[dict]:
        return [s["bocast"] for s in proto.servers(self.tracker.addr, self.key, self.token)]

    def wait_free(self, n: int | None = None, timeout_s: float = 120.0) -> list[dict]:
        """Block until ``n`` (default: all) servers are registered and free (no session open)."""
        n = self.n if n is None else n
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            queue = proto.summary(self.tracker.addr, token=self.token)["queue_info"]
            if queue.get(self.key, {}).get("free", 0) >= n and len(self.servers()) >= n:
                return self.servers()
            assert self.serve.poll() is None, "serve exited"
            time.sleep(0.2)
        raise AssertionError(f"{n} free servers not seen in {timeout_s} s: {self.servers()}")

    def runner(self, **kw) -> RpcRunner:
        kw = {"timeout_s": 5.0, "slack_s": 30.0, "server_wait_s": self.server_wait_s,
              "log": lambda m: None, "token_file": self.token_file, **kw}
        return RpcRunner(self.tracker.addr, self.key, **kw)

    def close(self) -> None:
        self.serve.terminate()  # serve stops its servers
        try:
            self.serve.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.serve.pid, signal.SIGKILL)
        self.tracker.stop()
        shutil.rmtree(self.build_cache, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.wait_free()
        yield c
    finally:
        c.close()


def run_in_thread(runner: RpcRunner, bs: list[BuildResult]):
    """Runs a batch in a thread; returns (thread, results, per-result callback log)."""
    got: list = []
    out: dict = {}

    def go():
        try:
            out["results"] = runner.run(OP, bs, on_result=lambda i, r: got.append(i))
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e

    t = threading.Thread(target=go)
    t.start()
    return t, out, got


def servers_of(results) -> collections.Counter:
    return collections.Counter((r.extra["measured_on"]["gpu_index"]) for r in results)


# ------------------------------------------------------------------------- no processes


def test_protocol_constants_are_tvms():
    from tvm.rpc import base

    assert (proto.TRACKER_MAGIC, proto.RPC_MAGIC, proto.RPC_CODE_SUCCESS,
            proto.RPC_CODE_MISMATCH) == (base.RPC_TRACKER_MAGIC, base.RPC_MAGIC,
                                         base.RPC_CODE_SUCCESS, base.RPC_CODE_MISMATCH)
    c = base.TrackerCode
    assert (proto.FAIL, proto.SUCCESS, proto.PING, proto.STOP, proto.PUT, proto.REQUEST,
            proto.UPDATE_INFO, proto.SUMMARY, proto.PENDING) == (
        c.FAIL, c.SUCCESS, c.PING, c.STOP, c.PUT, c.REQUEST, c.UPDATE_INFO, c.SUMMARY,
        c.GET_PENDING_MATCHKEYS)


def test_tracker_hands_out_the_longest_waiting_server_and_forgets_dead_ones():
    with trk.Tracker("127.0.0.1", 0, 1) as tracker:
        servers = []
        for port in (1001, 1002, 1003):
            s = proto.connect(tracker.addr)
            proto.send_msg(s, [proto.UPDATE_INFO, {"key": "server:k", "addr": [None, port]}])
            assert proto.recv_msg(s) == proto.SUCCESS
            proto.send_msg(s, [proto.PUT, "k", [port, f"k:m{port}"], None])
            assert proto.recv_msg(s) == proto.SUCCESS
            servers.append(s)
        servers[0].close()  # died: must never be handed out
        time.sleep(0.3)
        assert proto.summary(tracker.addr)["queue_info"]["k"] == {"free": 2, "pending": 0}
        # one request after the other: two opened at once may reach the tracker in either order
        first = proto.Request(tracker.addr, "k", 0)
        assert first.poll(2.0) == ("127.0.0.1", 1002, "k:m1002")
        second = proto.Request(tracker.addr, "k", 0)
        assert second.poll(2.0) == ("127.0.0.1", 1003, "k:m1003")
        low = proto.Request(tracker.addr, "k", priority=0)
        time.sleep(0.2)
        high = proto.Request(tracker.addr, "k", priority=5)
        assert low.poll(0.3) is None and high.poll(0.3) is None  # nothing free: both wait
        proto.send_msg(servers[1], [proto.PENDING])
        assert proto.recv_msg(servers[1]) == []  # its offer was taken
        proto.send_msg(servers[1], [proto.PUT, "k", [1002, "k:again"], None])
        assert proto.recv_msg(servers[1]) == proto.SUCCESS
        assert high.poll(2.0) == ("127.0.0.1", 1002, "k:again")  # priority before arrival
        assert low.poll(0.3) is None
        for s in (first, second, low, high, *servers[1:]):
            s.close()


def test_bad_rpc_options_are_named():
    assert parse_options({"tracker": "h:9190", "key": "h100"})["key"] == "h100"
    for raw, field in (({"key": "x"}, "rpc.tracker"), ({"tracker": "h:1", "key": "x", "k": 1},
                       "unknown"), ({"tracker": "h:x", "key": "x"}, "HOST:PORT"),
                       ({"tracker": "h:1", "key": "x", "sessions": 0}, "rpc.sessions")):
        with pytest.raises(ValueError, match=field):
            parse_options(raw)


def test_no_tracker_is_a_one_line_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    runner = RpcRunner(("127.0.0.1", port), KEY, server_wait_s=2, log=lambda m: None)
    with pytest.raises(RpcUnavailable, match="no tracker") as e:
        runner.device()
    assert "\n" not in str(e.value)
    t0 = time.monotonic()
    with pytest.raises(RpcUnavailable, match="2 kernel"):
        runner.run(OP, builds(2, "nt"))
    assert time.monotonic() - t0 < 20


# --------------------------------------------------------- a tracker and three servers


def test_batch_spreads_over_all_servers_with_the_local_runners_results(cluster):
    cluster.wait_free()
    runner = cluster.runner()
    device = runner.device()
    assert device["gpu"].startswith("stand-in") and len(device["servers"]) == SERVERS
    bs = builds(30, "spread")
    order: list[int] = []
    results = runner.run(OP, bs, on_result=lambda i, r: order.append(i))
    assert sorted(order) == list(range(30))  # each kernel reported exactly once
    assert all(r.status is Status.OK for r in results)
    assert set(servers_of(results)) == {"0", "1", "2"}
    with StandinRunner(timeout_s=5) as local:
        expected = local.run(OP, bs[:5])
    assert [r.latency_ms for r in results[:5]] == [r.latency_ms for r in expected]
    assert results[0].key == "spread-0" and results[0].repeats == expected[0].repeats
    # paired trials (the default), as the local runner's: each result carries the ratio
    assert [r.vs_reference for r in results[:5]] == [r.vs_reference for r in expected]
    assert expected[0].vs_reference and runner.timing()["paired"]
    alone = cluster.runner(paired=False).run(OP, bs[:2])
    assert [r.vs_reference for r in alone] == [None, None]



def test_a_re_timing_pairs_kernel_and_reference_in_one_task_on_one_server(cluster):
    """Issue 40 over RPC: run_paired is one task on one server (a ratio never divides by
    another GPU's reference) and answers what the local runner answers; re-timings of an rpc
    run take the paired method."""
    from bocast.measure import retime

    cluster.wait_free()
    runner = cluster.runner()
    assert retime.pairs(runner) and retime.method_of(runner) == retime.METHOD_PAIRED
    b = build("ok", "paired-0")
    res, extra = runner.run_paired(OP, b)
    with StandinRunner(timeout_s=5) as local:
        lres, lextra = local.run_paired(OP, b)
    assert res.status is Status.OK and res.latency_ms == lres.latency_ms
    assert extra["ratio"] == lextra["ratio"] and extra["reference"] == lextra["reference"]
    assert res.extra["measured_on"]["gpu_index"] in {"0", "1", "2"}

def test_idle_connections_to_the_servers_do_not_hold_up_a_batch(cluster):
    """Issue 42: 8 idle connections to a server's port, handshaken one at a time, kept the
    runner's sessions out for the whole batch limit. Each is handshaken on its own now."""
    import struct

    ports = [s["port"] for s in cluster.wait_free()]
    idle = []
    for port in ports:
        for i in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                s.sendall(struct.pack("<i", proto.RPC_MAGIC))  # the magic, then nothing
            idle.append(s)
    try:
        t0 = time.monotonic()
        results = cluster.runner().run(OP, builds(6, "idle-peers"))
        assert all(r.status is Status.OK for r in results)
        assert time.monotonic() - t0 < 20  # 8 x 10 s per server before
    finally:
        for s in idle:
            s.close()


def test_kernel_faults_are_the_local_statuses_and_servers_survive(cluster):
    pids = {s["pid"] for s in cluster.wait_free()}
    kinds = ["ok", "hang", "crash", "sticky", "wrong", "launch", "ok"]
    bs = [build(k, f"fault-{i}-{k}") for i, k in enumerate(kinds)]
    results = cluster.runner(timeout_s=3.0).run(OP, bs)
    assert [r.status for r in results] == [
        Status.OK, Status.RUN_TIMEOUT, Status.RUNTIME_ERROR, Status.RUNTIME_ERROR,
        Status.WRONG_RESULT, Status.LAUNCH_ERROR, Status.OK]
    assert {s["pid"] for s in cluster.wait_free()} == pids  # workers replaced, not servers


def test_tvm_client_reaches_a_server_through_the_tracker(cluster):
    import json

    from tvm import rpc

    cluster.wait_free()
    sess = rpc.connect_tracker(*cluster.tracker.addr).request(KEY, session_timeout=60)
    info = json.loads(sess.get_function("bocast.rpc.info")())
    assert info["protocol"] == PROTOCOL and info["gpu_index"] in ("0", "1", "2")
    assert info["build_workers"] == 1
    del sess


def test_a_client_that_stops_calling_frees_its_server(cluster):
    from tvm import rpc

    cluster.wait_free()
    sess = rpc.connect_tracker(*cluster.tracker.addr).request(KEY)
    time.sleep(0.5)
    assert proto.summary(cluster.tracker.addr)["queue_info"][KEY]["free"] == SERVERS - 1
    t0 = time.monotonic()
    cluster.wait_free(timeout_s=30)  # the server ends the idle session after 4 s
    assert time.monotonic() - t0 > 2
    del sess


def test_server_killed_mid_batch_loses_nothing_and_restarts(cluster):
    before = {s["gpu_index"]: s for s in cluster.wait_free()}
    runner = cluster.runner()
    bs = builds(30, "kill")
    t, out, got = run_in_thread(runner, bs)
    while len(got) < 4 and t.is_alive():
        time.sleep(0.02)
    os.kill(before["1"]["pid"], signal.SIGKILL)
    t.join(120)
    assert "error" not in out, out.get("error")
    results = out["results"]
    assert sorted(got) == list(range(30)) and all(r.status is Status.OK for r in results)
    assert [r.key for r in results] == [b.key for b in bs]
    assert any("lost" in line for line in runner.lost)
    after = {s["gpu_index"]: s for s in cluster.wait_free()}
    assert after["1"]["restarts"] == 1 and after["1"]["pid"] != before["1"]["pid"]


def test_hung_server_has_its_kernel_measured_elsewhere(cluster):
    before = {s["gpu_index"]: s for s in cluster.wait_free()}
    runner = cluster.runner(timeout_s=2.0, slack_s=1.0)
    bs = builds(24, "hang")
    t, out, got = run_in_thread(runner, bs)
    while len(got) < 4 and t.is_alive():
        time.sleep(0.02)
    pid = before["2"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t.join(120)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "error" not in out, out.get("error")
    results = out["results"]
    assert sorted(got) == list(range(24)) and all(r.status is Status.OK for r in results)
    assert any("hung" in line for line in runner.lost)
    # resumed, it finishes the abandoned call, closes the session and is offered again
    after = {s["gpu_index"]: s for s in cluster.wait_free()}
    assert after["2"]["pid"] == pid


def test_concurrent_runs_share_the_servers(cluster):
    cluster.wait_free()
    runner = cluster.runner()
    runs = [run_in_thread(runner, builds(12, f"run{j}")) for j in range(2)]
    for t, out, got in runs:
        t.join(120)
        assert "error" not in out, out.get("error")
        assert sorted(got) == list(range(12))
        assert all(r.status is Status.OK for r in out["results"])
    used = servers_of(r for _, out, _ in runs for r in out["results"])
    assert len(used) >= 2


def test_servers_of_another_gpu_model_are_refused(cluster):
    cluster.wait_free()
    runner = cluster.runner(gpu_model="NVIDIA H100 80GB HBM3", server_wait_s=3.0)
    with pytest.raises(RpcUnavailable, match="refused") as e:
        runner.run(OP, builds(3, "model"))
    assert "\n" not in str(e.value) and len(runner.refused) == SERVERS
    cluster.wait_free()  # the refused servers are released when the batch gives up


def test_rpc_check_script_on_the_standin(cluster, tmp_path, capsys):
    import json

    cluster.wait_free()
    from bocast.tools import rpc_check as check

    out = tmp_path / "check.json"
    assert check.main([
        "--tracker", f"127.0.0.1:{cluster.tracker.port}", "--key", KEY, "--standin",
        "--dataset", locate("gemm_4096_4096_4096_v2"),
        "--tune-trials", "24", "--batch", "12", "--tune-local", "--top", "4", "--rounds", "2",
        "--store-prefix", str(tmp_path / "tune"), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["tune"]["rpc"]["trials"] == res["tune"]["local"]["trials"] == 24
    # a seeded random search proposes the same kernels through either runner
    assert res["tune"]["per_kernel_ratio"]["kernels"] == 24
    assert res["tune"]["per_kernel_ratio"]["median"] == 1.0
    rows = res["remeasure"]["rows"]
    assert len(rows) == 4 and all(r["ratio"] == 1.0 for r in rows)
    assert not res["remeasure"]["failures"] and not res["rpc_lost"]
    assert set(res["remeasure"]["kernels_per_s"]) == {"local", "rpc"}
    assert "worst deviation 0.00% (within 2%)" in capsys.readouterr().out


def test_servers_and_runner_work_with_tvms_own_tracker():
    """TVM's tracker (it needs tornado, absent from TVM's wheel dependencies: skipped there)."""
    pytest.importorskip("tornado")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    tracker = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host",
                                "127.0.0.1", "--port", str(port), "--port-end", str(port + 1),
                                "--silent"], env=env, start_new_session=True)
    serve = subprocess.Popen(
        [sys.executable, "-m", "bocast.measure.rpc.server", "serve", "--key", "tvmtracker",
         "--tracker", f"127.0.0.1:{port}", "--gpus", "0,1", "--host", "127.0.0.1", "--port",
         "0", "--worker", "standin"], env={**env, "BOCAST_STANDIN_SLEEP": "0.1"},
        start_new_session=True)
    try:
        proto.wait_for_servers(("127.0.0.1", port), "tvmtracker", 2, 120)
        runner = RpcRunner(("127.0.0.1", port), "tvmtracker", timeout_s=5, slack_s=30,
                           server_wait_s=60, log=lambda m: None)
        results = runner.run(OP, builds(12, "tvm"))
        assert all(r.status is Status.OK for r in results)
        assert set(servers_of(results)) == {"0", "1"}
    finally:
        serve.terminate()
        serve.wait(30)
        os.killpg(tracker.pid, signal.SIGTERM)
        tracker.wait(30)


# ------------------------------------------- wiring: records, configuration, command line


class NoBuilder:
    """Every configuration "builds" into an OK kernel for the stand-in worker."""

    def build(self, op, configs, on_result=None):
        from bocast.space.space import Space

        return [build("ok", Space.key(c)) for c in configs]


def test_records_name_the_host_and_gpu_that_measured_them(cluster, tmp_path):
    import sqlite3

    from bocast.measure.engine import Measurer
    from bocast.records.store import Store

    cluster.wait_free()
    path = str(tmp_path / "r.db")
    with Store(path, OP.workload) as store:
        measurer = Measurer(OP, store, NoBuilder(), cluster.runner(builds="local"))
        configs = OP.space.sample(9, 0, unique=True)
        assert len(measurer.measure(configs)) == 9
    conn = sqlite3.connect(path)  # a store from before the column: it is added on open
    conn.execute("ALTER TABLE measurements DROP COLUMN measured_on")
    conn.execute("UPDATE measurements SET error = 'old' WHERE id = 1")
    conn.commit()
    conn.close()
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(path).execute("SELECT measured_on FROM measurements")
    with Store(path, OP.workload) as store:
        assert all(r.measured_on is None for r in store.records())
        Measurer(OP, store, NoBuilder(), cluster.runner(builds="local")).measure(
            OP.space.sample(12, 1, unique=True))
        records = store.records()
    new = [r for r in records if r.measured_on]
    assert len(records) == len({r.key for r in records}) and 0 < len(new) <= 12
    assert {r.measured_on["gpu_index"] for r in new} <= {"0", "1", "2"}
    assert all(r.measured_on["gpu"].startswith("stand-in") and r.measured_on["host"]
               for r in new)


def test_runner_rpc_in_configurations():
    from bocast.run import config

    raw = {"workload": {"op": "gemm", "shape": [64, 64, 64]}, "strategy": {"name": "random"},
           "budget": {"trials": 4}, "seed": 0, "output": "/tmp/x", "runner": "rpc",
           "rpc": {"tracker": "gpu-host:9190", "key": "h100"}}
    cfg = config.parse(raw)
    assert cfg.runner == "rpc" and cfg.rpc == {"tracker": "gpu-host:9190", "key": "h100"}
    assert config.parse({**raw, "rpc": None}, rpc={"tracker": "h:1", "key": "k"}).rpc["key"] == "k"
    with pytest.raises(config.ConfigError, match=r"rpc\.key"):
        config.parse({**raw, "rpc": {"tracker": "h:1"}})
    with pytest.raises(config.ConfigError, match="rpc: expected a mapping"):
        config.parse({**raw, "rpc": "h:1"})
    assert config.parse({**raw, "runner": "replay", "dataset": "d"}).rpc == {}


def test_command_line_serve_and_a_missing_tracker(tmp_path, monkeypatch, capsys):
    from bocast import cli
    from bocast.measure.rpc import server as rpc_server

    seen = []
    monkeypatch.setattr(rpc_server, "main", lambda argv, prog: seen.append(argv) or 0)
    assert cli.main(["serve", "--key", "h100", "--gpus", "0,1"]) == 0
    assert cli.main(["serve", "tracker", "--port", "9190"]) == 0
    assert seen == [["serve", "--key", "h100", "--gpus", "0,1"], ["tracker", "--port", "9190"]]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload: {op: gemm, shape: [64, 64, 64]}\nstrategy: {name: random}\n"
                   f"budget: {{trials: 4}}\nseed: 0\noutput: {tmp_path / 'out'}\nrunner: rpc\n")
    assert cli.main(["tune", str(cfg)]) == 2
    assert "rpc.tracker: missing" in capsys.readouterr().err
    assert cli.main(["tune", str(cfg), "--tracker", f"127.0.0.1:{port}", "--key", "k"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bocast: error: no tracker at 127.0.0.1") and "\n" not in err


def _through_cluster(cluster) -> str:
    """The configuration lines of a live run on ``cluster`` (nvcc builds on this host, the
    stand-in servers time); skips without nvcc, waits until every server is free."""
    from bocast.measure.nvcc import why_no_compiler

    if why_no_compiler():
        pytest.skip(why_no_compiler())
    cluster.wait_free()
    return ("runner_options: {workers: 2}\n"
            f"rpc: {{tracker: '127.0.0.1:{cluster.tracker.port}', key: {KEY}, builds: local}}\n")


def test_bocast_tune_through_rpc_builds_here_and_records_the_servers(cluster, tmp_path):
    """The whole command: nvcc builds on this host, stand-in servers time (needs nvcc)."""
    from bocast import cli
    from bocast.records.store import Store

    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload: {op: gemm, shape: [256, 256, 256]}\nstrategy: {name: random}\n"
                   "budget: {trials: 4}\nbatch_size: 4\nseed: 0\nrunner: rpc\n"
                   f"output: {tmp_path / 'out'}\n" + _through_cluster(cluster))
    assert cli.main(["tune", str(cfg), "--json"]) == 0
    with Store(str(tmp_path / "out" / "records.db"), OP.workload | {"shape": [256] * 3}) as st:
        records, sessions = st.records(), st.sessions()
    assert len(records) == 4 and all(r.measured_on for r in records if r.ok)
    assert sessions[-1]["runner"] == "rpc" and len(sessions[-1]["device"]["servers"]) == SERVERS


def test_compare_config_with_runner_rpc():
    from bocast.run import comparison as compare

    raw = {"name": "c", "workload": {"op": "gemm", "shape": [64, 64, 64]}, "runner": "rpc",
           "strategies": [{"name": "random"}], "seeds": 1, "budget": {"trials": 4},
           "output": "/tmp/x", "results": "/tmp/x/r",
           "rpc": {"tracker": "gpu-host:9190", "key": "h100"}}
    assert compare.parse(raw, "").rpc == {"tracker": "gpu-host:9190", "key": "h100"}
    with pytest.raises(compare.ConfigError, match=r"rpc\.tracker: missing"):
        compare.parse({**raw, "rpc": None}, "")
    assert compare.parse({**raw, "runner": "replay", "dataset": "d"}, "").rpc == {}


def test_bocast_compare_through_rpc_records_every_run_once(cluster, tmp_path):
    """A live comparison whose kernels are timed by the servers (nvcc builds here)."""
    from bocast import cli
    from bocast.records.store import Store

    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: c\nworkload: {op: gemm, shape: [256, 256, 256]}\nrunner: rpc\n"
                   "strategies: [{name: random}, {name: cga}]\nseeds: 1\nbudget: {trials: 4}\n"
                   f"batch_size: 4\noutput: {tmp_path / 'runs'}\nresults: {tmp_path / 'res'}\n"
                   + _through_cluster(cluster))
    assert cli.main(["compare", str(cfg), "--json"]) == 0
    for label in ("random", "cga"):
        with Store(str(tmp_path / "runs" / f"{label}_seed0.db"),
                   OP.workload | {"shape": [256] * 3}) as st:
            records, sessions = st.records(), st.sessions()
        assert len(records) == 4 and len({r.key for r in records}) == 4
        assert all(r.measured_on for r in records if r.ok)
        assert sessions[-1]["runner"] == "rpc"
    assert (tmp_path / "res.md").exists()
