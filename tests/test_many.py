"""Many workloads in one run (issue 41, bocast.many): shapes files checked with the bad line
named, a torch model's shapes listed from one forward pass, a replay run resumed as the same
run (finished workloads measure nothing), the warm-start window on the stand-in, and the RPC
runner's fleet setting the window (stand-in servers)."""

from __future__ import annotations

import json
import os

import pytest

from bocast import api, cli, many, many_plan
from bocast.errors import InputError
from bocast.interrupt import Interrupted
from bocast.records.store import Store
from bocast.run.shapes_file import Shape, ShapesError, read, write

# small BO rounds, one torch thread (as tests/test_resume.py)
BO = {"strategy.n_init": 8, "strategy.pool_size": 128, "strategy.fit_maxiter": 10,
      "strategy.threads": 1}
REPLAY = [(1024, 1024, 1024), (4096, 4096, 4096)]


def rows(path: str) -> list[tuple]:
    with Store.open(path) as s:
        return [(r.key, r.status.value, r.tflops) for r in s.records()]


# ------------------------------------------------------------------------------ the file


@pytest.mark.parametrize("name, text, message", [
    ("a.csv", "op,shape\ngemm,128x64x64\ngemm,12x\n", "a.csv line 3: shape '12x'"),
    ("a.csv", "# c\nop,shapes\ngemm,1x2x3\n", "a.csv line 2: expected a header"),
    ("a.csv", "op,shape,count\ngemm,128x64x64,0\n", "a.csv line 2: count: expected a positive"),
    ("a.csv", "op,shape\nmatmul,128x64x64\n", "a.csv line 2: unknown operator"),
    ("a.csv", "op,shape\ngemm,128x64x64,fp16\n", "a.csv line 2: 3 values, the header names 2"),
    ("a.yaml", "- {op: gemm, shape: [128, 64, 64]}\n- {op: gemm}\n", "a.yaml line 2: shape "
                                                                    "missing"),
    ("a.yaml", "- {op: gemm, shape: [1, 2, 3], dtyp: fp16}\n", "a.yaml line 1: unknown key"),
    ("a.yaml", "op: gemm\n", "a.yaml: expected a list of entries"),
    ("a.txt", "op,shape\n", "a.txt: a shapes file is .csv or .yaml/.yml"),
])
def test_a_bad_shapes_file_is_one_error_naming_the_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ShapesError) as e:
        read(str(path))
    assert message.lower() in str(e.value).lower() and "\n" not in str(e.value)


def test_shapes_files_round_trip_and_the_run_names_a_bad_workloads_line(tmp_path):
    entries = [Shape("gemm", (128, 4096, 4096), "fp16:fp32", "NT", 64, "q_proj o_proj"),
               Shape("conv2d", (16, 14, 14, 256, 256, 3, 3, 1, 1, 1))]
    for ext in ("csv", "yaml"):
        write(str(tmp_path / f"s.{ext}"), entries)
        got = read(str(tmp_path / f"s.{ext}"))
        assert [(e.op, e.shape, e.dtype, e.layout, e.count, e.name) for e in got] == \
            [(e.op, e.shape, e.dtype, e.layout, e.count, e.name) for e in entries]
    bad = tmp_path / "bad.csv"
    bad.write_text("op,shape,dtype\ngemm,128x64x64,\ngemm,128x64x64,fp8:fp32\n")
    with pytest.raises(api.InputError, match=r"bad\.csv line 3: .*fp8"):
        many_plan.prepare_many(None, str(bad), runner="standin", output=str(tmp_path / "o"))
    twice = tmp_path / "twice.csv"
    twice.write_text("op,shape,dtype\ngemm,128x64x64,\ngemm,128x64x64,fp16:fp32\n")
    with pytest.raises(api.InputError, match=r"twice\.csv line 3: the same workload as "
                                             r".*twice\.csv line 2"):
        many_plan.prepare_many(None, str(twice), runner="standin", output=str(tmp_path / "o"))
    assert not os.path.exists(tmp_path / "o")  # checked before anything is written


# ---------------------------------------------------------------------- a model's shapes


def test_shapes_of_a_tiny_model_lists_each_workload_once_with_its_calls(tmp_path):
    torch = pytest.importorskip("torch")
    import bocast

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.o = torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 64)
            self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

        def forward(self, x):
            return self.down(torch.relu(self.up(self.o(self.q(x)))))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(16, 32, 3, padding=1)
            self.depthwise = torch.nn.Conv2d(32, 32, 3, groups=32)
            self.layers = torch.nn.ModuleList([Block(), Block()])

        def forward(self, image, x):
            self.depthwise(self.conv(image))
            for layer in self.layers:
                x = layer(x)
            return x @ x.transpose(-1, -2)

    found = bocast.shapes_of(Model(), torch.randn(2, 16, 8, 8), torch.randn(2, 16, 64))
    got = [(e.op, e.shape, e.dtype, e.layout, e.fuse, e.count, e.name) for e in found]
    # 2 x 16 tokens; a linear layer with a bias (an addmm) is the GEMM with the bias fused
    assert got == [
        ("conv2d", (2, 8, 8, 16, 32, 3, 3, 1, 1, 1), "fp16:fp32", None, None, 1, "conv"),
        ("gemm", (32, 64, 64), "fp16:fp32", "NT", None, 2, "layers.*.q"),
        ("gemm", (32, 64, 64), "fp16:fp32", "NT", "bias", 2, "layers.*.o"),
        ("gemm", (32, 256, 64), "fp16:fp32", "NT", "bias", 2, "layers.*.up"),
        ("gemm", (32, 64, 256), "fp16:fp32", "NT", "bias", 2, "layers.*.down"),
        ("bmm", (2, 16, 16, 64), "fp16:fp32", "NT", None, 1, None)]
    assert len(found.skipped) == 1 and "groups=32" in found.skipped[0]
    found.write(str(tmp_path / "model.csv"))
    plan = many_plan.prepare_many(None, str(tmp_path / "model.csv"), runner="standin",
                                  output=str(tmp_path / "run"))
    assert [it.entry.count for it in plan.items] == [1, 2, 2, 2, 2, 1] and plan.window == 1
    assert [it.workload.get("fuse") for it in plan.items] == [None, None, "bias", "bias",
                                                              "bias", None]


# ------------------------------------------------------------------------ a run of many


def _replay(out, monkeypatch=None, stop_after=None, **extra):
    """A replay run of REPLAY into ``out``; with ``stop_after`` records appended it stops as
    SIGINT would (between records)."""
    if stop_after is not None:
        appended = [0]
        append = Store.append

        def stop(self, record, session=None):
            if appended[0] >= stop_after:
                raise Interrupted(2)
            appended[0] += 1
            return append(self, record, session)

        monkeypatch.setattr(Store, "append", stop)
    return many.tune_many("gemm", REPLAY, runner="replay", space="v2", trials=16,
                          batch_size=8, warm_start="none", output=str(out), **BO, **extra)


def test_a_replay_run_of_many_resumes_as_the_same_run(tmp_path, monkeypatch, capsys):
    whole = _replay(tmp_path / "whole")
    assert [r["trials"] for r in whole.workloads] == [16, 16]
    assert [r["figure"] for r in whole.workloads] == ["recorded"] * 2
    assert "gemm 4096x4096x4096 fp16:fp32 NT v2" in whole.table
    with pytest.raises(Interrupted):  # inside the second workload's second batch
        _replay(tmp_path / "cut", monkeypatch, stop_after=20)
    monkeypatch.undo()
    cut = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert [r["status"] for r in cut["workloads"]] == ["finished", "not finished"]
    resumed = _replay(tmp_path / "cut", progress=True)
    assert "finished before, nothing measured" in capsys.readouterr().err
    for a, b in zip(whole.workloads, resumed.workloads):
        assert rows(a["store"]) == rows(b["store"])  # the same trials in the same order
    # a finished run measures nothing again
    monkeypatch.setattr(Store, "append", lambda *a, **k: pytest.fail("measured again"))
    again = _replay(tmp_path / "cut")
    assert [r["best_tflops"] for r in again.workloads] == \
        [r["best_tflops"] for r in whole.workloads]
    # another list in the same output is another run
    with pytest.raises(api.InputError, match="another list or other options"):
        many.tune_many("gemm", REPLAY[:1], runner="replay", space="v2", trials=16,
                       output=str(tmp_path / "cut"))
    with pytest.raises(api.InputError, match="began with 1"):
        _replay(tmp_path / "cut", parallel=2)


def test_a_parallel_run_stopped_in_a_thread_resumes_as_the_same_run(tmp_path, monkeypatch):
    """Replay, two workloads at once: a stop inside one thread starts no further workload,
    lets the other end, writes the table and is raised; resumed, every store is the
    uninterrupted run's."""
    import threading

    shapes = [*REPLAY, (2048, 8192, 1024)]
    kw = {"runner": "replay", "space": "v2", "strategy": "random", "trials": 8,
          "batch_size": 4, "parallel": 2}
    whole = many.tune_many("gemm", shapes, output=str(tmp_path / "whole"), **kw)
    assert [r["status"] for r in whole.workloads] == ["finished"] * 3
    lock, appended, append = threading.Lock(), [0], Store.append

    def stop(self, record, session=None):
        with lock:
            appended[0] += 1
            if appended[0] == 6:
                raise Interrupted(2)
        return append(self, record, session)

    monkeypatch.setattr(Store, "append", stop)
    with pytest.raises(Interrupted):
        many.tune_many("gemm", shapes, output=str(tmp_path / "cut"), **kw)
    monkeypatch.undo()
    cut = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert cut["workloads"][2]["status"] == "not finished"  # never started
    assert not os.path.exists(cut["workloads"][2]["store"])
    resumed = many.tune_many("gemm", shapes, output=str(tmp_path / "cut"), **kw)
    for a, b in zip(whole.workloads, resumed.workloads):
        assert rows(a["store"]) == rows(b["store"])


def test_the_warm_start_window_is_fixed_by_the_list_not_the_timing(tmp_path):
    """Stand-in, parallel 2: workloads 1 and 2 start cold (the library is empty), workload 3
    from workload 1 alone, whichever of 1 and 2 ends first."""
    shapes = [(256, 256, 256), (256, 512, 256), (512, 256, 256)]
    got = many.tune_many("gemm", shapes, runner="standin", space="v2", trials=8, batch_size=4,
                         parallel=2, records=str(tmp_path / "library"), retime_top=0,
                         output=str(tmp_path / "run"), **BO)
    assert [r["warm_start"] for r in got.workloads] == ["cold", "cold", "#1"]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["window"] == 2
    # the library holds every workload's copy (a named library takes stand-in stores); none
    # but workload 1's own store served workload 3
    assert len(os.listdir(tmp_path / "library")) == 3
    assert got.workloads[2]["warm_start_sources"] == [got.workloads[0]["store"]] or \
        os.path.samefile(got.workloads[2]["warm_start_sources"][0], got.workloads[0]["store"])


def test_command_line_shapes_and_its_refusals(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("def make():\n    return 1 / 0\n")
    shapes = tmp_path / "s.yaml"
    shapes.write_text("- {op: gemm, shape: [256, 256, 256]}\n- {op: gemm, shape: '256x512x256'}\n")
    out = tmp_path / "run"
    assert cli.main(["tune", "--shapes", str(shapes), "--runner", "standin", "--space", "v2",
                     "--strategy", "random", "--trials", "4", "--batch-size", "4",
                     "--retime-top", "0", "--output", str(out), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["finished"] == 2 and summary["window"] == 1
    assert lines[0].split()[:3] == ["#", "workload", "best"]
    assert (out / "summary.md").read_text().startswith("# workload")
    for argv, message in (
            (["tune", "gemm", "--shapes", str(shapes)], "give no operator with it"),
            (["tune", "--shape", "1,2,3", "--shape", "4,5,6"], "--shape: name the operator"),
            (["tune", "gemm", "--shape", "256,256,256", "--parallel", "2"], "only for many"),
            (["tune", "gemm", "--shape", "256,256,256", "--shape", "512,256,256",
              "--parallel", "2"], "the local runner"),
            (["tune", "--shapes", str(shapes), "--store", "x.db", "--runner", "standin"],
             "store: not for a run of many"),
            (["shapes", "no_such_module_here:fn"], "importing no_such_module_here failed"),
            (["shapes", str(broken) + ":make"], "make() raised ZeroDivisionError")):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, (argv, err)


def test_with_rpc_the_fleet_sets_the_window(tmp_path, monkeypatch):
    """Two stand-in GPU servers: two workloads at once, every kernel timed by a server (the
    builds lower only: no nvcc here)."""
    from bocast.measure.parts import make_builder
    from bocast.run.config import RunSpec
    from tests.measure.test_rpc import KEY, Cluster

    monkeypatch.setattr(api, "need_compiler", lambda what: None)
    monkeypatch.setattr(RunSpec, "make_builder", lambda self, workers=None: make_builder(
        workers=workers, timeout_s=120, compile=False))
    cluster = Cluster(gpus="0,1", sleep_s=0.0)
    try:
        cluster.wait_free()
        got = many.tune_many(
            "gemm", [(256, 256, 256), (256, 512, 256), (512, 256, 256)], runner="rpc",
            rpc={"tracker": f"127.0.0.1:{cluster.tracker.port}", "key": KEY}, space="v2",
            strategy="random", trials=4, batch_size=4, retime_top=0,
            output=str(tmp_path / "run"), records=str(tmp_path / "library"))
    finally:
        cluster.close()
    assert got.summary["window"] == 2 and got.summary["finished"] == 3
    first, second, third = got.workloads
    assert second["started_s"] < first["ended_s"]  # two at once
    assert third["started_s"] >= first["ended_s"]  # once its possible source had finished
    for r in got.workloads:
        with Store.open(r["store"]) as s:
            records = s.records()
        assert len(records) == 4
        assert all(x.measured_on and x.measured_on["gpu_index"] in ("0", "1")
                   for x in records if x.ok)


def test_a_run_of_many_refuses_a_single_runs_folder_and_a_damaged_plan(tmp_path):
    """Its summary would be written over a single run's; a plan it cannot read is not taken
    for a fresh start (the list and the window would be made anew)."""
    single = tmp_path / "single"
    single.mkdir()
    (single / "records.db").write_bytes(b"")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / many_plan.PLAN).write_text("[1, 2")
    for out, message in ((single, "holds a single run"), (damaged, "is damaged")):
        with pytest.raises(InputError, match=message):
            many_plan.prepare_many("gemm", [(256, 256, 256), (512, 256, 256)],
                                   runner="standin", output=str(out), space="v2")


def fake_fleet(monkeypatch, *servers):
    """The tracker's answer for the rpc key: one server per (GPU model, build workers)."""
    from bocast.measure.rpc import protocol as rpc_protocol

    infos = [{"bocast": {"device": {"gpu": gpu}, "build_workers": workers, "port": i}}
             for i, (gpu, workers) in enumerate(servers)]
    monkeypatch.setattr(rpc_protocol, "servers", lambda addr, key, token=None: infos)


def test_one_fleet_sets_the_window_and_the_batch_and_plan_json_keeps_the_batch(tmp_path,
                                                                              monkeypatch):
    """rpc_options.fleet is the one definition: the servers of the runner's GPU model under
    the key; the window counts them, the batch their build workers. The batch is the plan's
    (plan.json), so a server lost mid-run changes no later workload's batch; workloads at once
    measure batch by batch (rpc.ahead 0)."""
    from bocast.measure.rpc import options as rpc_options

    monkeypatch.setattr(api, "need_compiler", lambda what: None)
    rpc = {"tracker": "127.0.0.1:9", "key": "k"}
    fake_fleet(monkeypatch, ("H200", 16), ("H200", 16))
    shapes = [(256, 256, 256), (512, 256, 256)]
    out = str(tmp_path / "run")
    plan = many_plan.prepare_many("gemm", shapes, runner="rpc", rpc=rpc, output=out,
                                  space="v2")
    assert (plan.window, plan.plan["batch_size"], plan.rpc["ahead"]) == (2, 32, 0)
    assert all(it.config["batch_size"] == 32 for it in plan.items)
    os.makedirs(out)
    with open(os.path.join(out, many_plan.PLAN), "w") as f:
        json.dump(plan.plan, f)
    fake_fleet(monkeypatch, ("H200", 16))  # a server lost: the run resumes with its batch
    again = many_plan.prepare_many("gemm", shapes, runner="rpc", rpc=rpc, output=out,
                                   space="v2")
    assert (again.window, again.plan["batch_size"]) == (2, 32)
    fresh = many_plan.prepare_many("gemm", shapes, runner="rpc", rpc=rpc,
                                   output=str(tmp_path / "new"), space="v2")
    assert (fresh.window, fresh.plan["batch_size"], "ahead" in fresh.rpc) == (1, 16, False)
    # servers of two models: the runner's model only (named), or every one ("any")
    fake_fleet(monkeypatch, ("H200", 16), ("H100", 8), ("H200", 4))
    with pytest.raises(ValueError, match="several GPU models"):
        rpc_options.fleet(rpc)
    assert rpc_options.fleet_batch({**rpc, "gpu_model": "H200"})[0] == 20
    assert rpc_options.fleet_batch({**rpc, "gpu_model": "any"})[0] == 28
    with pytest.raises(ValueError, match="no server of A100"):
        rpc_options.fleet({**rpc, "gpu_model": "A100"})
