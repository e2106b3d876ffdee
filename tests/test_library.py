"""The records library and ``warm_start: auto`` (issue 26): listing and discovery (damaged,
foreign, other-GPU and other-space files), the automatic choice of sources, opting out, the
run's identity naming them, and the one-command tune over replay and the stand-in runner. The
library is the test's own folder (conftest's records_library), never the user's cache."""

import json
import os
import shutil
import sqlite3

import pytest

import bocast
from bocast.records import datasets, library
from bocast.records.store import Store
from bocast.run import warm_sources
from bocast.space.operators.operator import get_operator, make
from bocast.strategies.bo.transfer import AUTO, incompatibility

QUICK = {"runner": "standin", "strategy": "random", "trials": 8, "batch_size": 8}
T1024 = "exhaustive/gemm_1024_1024_1024_v2"
T1024_V3 = "exhaustive/gemm_1024_1024_1024_v3"
STANDIN = "stand-in (no GPU; synthetic timings)"


@pytest.fixture(scope="module")
def standin_store(tmp_path_factory):
    """A stand-in run's store of gemm 256^3 (random search, 8 trials), in a library of its own."""
    folder = tmp_path_factory.mktemp("lib")
    out = tmp_path_factory.mktemp("run")
    result = bocast.tune(op="gemm", shape=(256, 256, 256), space="v2", output=str(out),
                         records=folder, **QUICK)
    assert result.trials == 8 and result.summary["library_copy"]
    return result.store, str(folder)


def _regpu(src: str, dst: str, gpu: str) -> str:
    """A copy of store ``src`` whose sessions say they ran on ``gpu`` (a GPU's sessions carry
    no ``synthetic`` mark: Runner.described)."""
    shutil.copy(src, dst)
    return _set_device(dst, gpu=gpu, synthetic=False)


def _set_device(path: str, **fields) -> str:
    """Store ``path`` with ``fields`` written into every session's recorded device."""
    conn = sqlite3.connect(path)
    with conn:
        for i, p in conn.execute("SELECT id, provenance FROM sessions").fetchall():
            prov = json.loads(p)
            prov["device"] = {**prov.get("device", {}), **fields}
            conn.execute("UPDATE sessions SET provenance = ? WHERE id = ?", (json.dumps(prov), i))
    conn.close()
    return path


def test_a_live_run_adds_its_store_once(standin_store, tmp_path):
    store, folder = standin_store
    copies = [f for f in os.listdir(folder) if f.endswith(".db")]
    assert len(copies) == 1 and copies[0].startswith("gemm_256x256x256_v2_stand-in")
    path, what = library.add(store, folder)  # the same store again: nothing copied
    assert what == "already there" and path == os.path.join(folder, copies[0])
    with Store.open(path) as s:
        assert s.get_meta(library.ORIGIN) == os.path.abspath(store)
        assert len(s.records()) == 8


def test_listing_skips_damaged_and_foreign_files_with_one_line_each(standin_store, tmp_path,
                                                                    bocast_cli):
    store, _ = standin_store
    folder = tmp_path / "lib"
    library.add(store, str(folder))
    (folder / "foreign.db").write_bytes(b"not sqlite at all" * 100)
    conn = sqlite3.connect(folder / "other.db")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    (folder / "notes.txt").write_text("hello")
    entries, skipped = library.scan(str(folder))
    stores = [e for e in entries if not e.shipped]
    assert len(stores) == 1 and stores[0].gpu == STANDIN and stores[0].rows == 8
    assert len(skipped) == 3 and all(line.startswith("records library: skipped ")
                                     for line in skipped)
    assert any(e.shipped and e.name == T1024 for e in entries)
    code, out, err = bocast_cli("records", "--records", str(folder), "--json")
    assert code == 0, err
    listed = json.loads(out.strip().splitlines()[-1])
    assert [e["op"] for e in listed["entries"] if not e["shipped"]] == ["gemm"]
    assert err.count("records library: skipped") == 3
    assert "gemm " in out and "256x256x256" in out
    # remove takes a store of the library, never a shipped dataset
    code, _, err = bocast_cli("records", "remove", T1024, "--records", str(folder))
    assert code == 2 and "shipped datasets are not removed" in err
    code, _, err = bocast_cli("records", "remove", stores[0].name, "--records", str(folder))
    assert code == 0 and not os.path.exists(stores[0].path)


def test_auto_chooses_the_same_schedule_on_the_same_gpu(standin_store, tmp_path):
    store, _ = standin_store
    folder = tmp_path / "lib"
    mine, _ = library.add(store, str(folder))
    _regpu(mine, str(folder / "a100.db"), "NVIDIA A100-SXM4-80GB")
    target = make("gemm", (512, 256, 256))
    choice = warm_sources.resolve(AUTO, target, runner="standin", gpu=STANDIN, records=str(folder))
    assert choice.sources == [mine]  # not the A100's copy, nor an H100 dataset
    assert any("other GPU models left out" in n and "A100" in n for n in choice.notes)
    # on the A100 only its records; where the GPU is not known, both, and it says so
    a100 = warm_sources.choose(target, gpu="NVIDIA A100-SXM4-80GB", records=str(folder))
    assert a100.sources == [str(folder / "a100.db")]
    unknown = warm_sources.choose(target, gpu=None, records=str(folder))
    # one source per workload: the A100's copy (the stand-in's own store is synthetic: left
    # out where the run's GPU is not the stand-in) and two H100 datasets
    assert len(unknown.sources) == 3 and any("not known" in n for n in unknown.notes)
    assert mine not in unknown.sources
    # never the run's own store (nor its library copy)
    own = warm_sources.resolve(AUTO, target, runner="standin", gpu=STANDIN, records=str(folder),
                          store=store)
    assert own.sources == [] and "a cold start" in own.notes[-1]


def test_another_model_of_the_same_architecture_counts_and_is_named():
    v3 = make("gemm", (2048, 6144, 4096), space="v3")
    hopper = ("9.0", 132)
    h200 = warm_sources.choose(v3, gpu="NVIDIA H200", arch=hopper, shipped_only=True)
    h100 = warm_sources.choose(v3, gpu="NVIDIA H100 80GB HBM3", arch=hopper, shipped_only=True)
    # the same nearest GEMM v3 tables for both (the same operator first, then distance), each
    # run naming the sources measured on the other model (the H100's exhaustive tables, the
    # H200's 128x5120x5120 table), never its own
    assert h200.sources and h200.sources == h100.sources
    gpus = {e.path: e.gpu for e in library.scan(None, stores=False)[0]}
    on = {g: sum(gpus[p] == g for p in h200.sources) for g in set(gpus.values())}
    assert on.get("NVIDIA H100 80GB HBM3") and on.get("NVIDIA H200")  # both models among them
    for run, other in ((h200, "NVIDIA H100 80GB HBM3"), (h100, "NVIDIA H200")):
        assert any(f"{on[other]} of the 3 sources measured on {other}" in n
                   and "same architecture" in n and "132 SMs" in n for n in run.notes)
        assert not any(f"measured on {g}, the same architecture" in n for n in run.notes
                       for g in gpus.values() if g != other)
    # another SM count (an H100 PCIe's 114) or an unknown architecture: the H100's are left out
    for arch in (("9.0", 114), None):
        cold = warm_sources.choose(v3, gpu="NVIDIA H200", arch=arch, shipped_only=True)
        gpus = {e.path: e.gpu for e in library.scan(None, stores=False)[0]}
        assert all(gpus[p] == "NVIDIA H200" for p in cold.sources)  # only its own model's
        assert any("left out" in n and "NVIDIA H100 80GB HBM3" in n for n in cold.notes)


def test_the_runs_own_model_comes_first_at_the_same_distance(standin_store, tmp_path):
    store, _ = standin_store
    folder = tmp_path / "lib"
    mine, _ = library.add(store, str(folder))
    alike = _regpu(mine, str(folder / "alike.db"), "NVIDIA H200")
    target = make("gemm", (512, 256, 256), space="v2")
    for path in (mine, alike):  # give both copies one architecture
        _set_device(path, capability="9.0", sm_count=132)
    choice = warm_sources.choose(target, gpu=STANDIN, arch=("9.0", 132), records=str(folder))
    assert mine in choice.sources and alike not in choice.sources  # one per workload: its own
    h200 = warm_sources.choose(target, gpu="NVIDIA H200", arch=("9.0", 132), records=str(folder))
    assert alike in h200.sources and mine not in h200.sources


def test_records_of_one_space_never_seed_another():
    v2, v3 = make("gemm", (4096, 4096, 4096), space="v2"), make("gemm", (1024,) * 3, space="v3")
    assert incompatibility(v2.workload, v3)[0] is not None
    choice = warm_sources.choose(v3, gpu="NVIDIA H100 80GB HBM3", other_workloads=True,
                            shipped_only=True)
    # the other v3 workloads only (each once: its exhaustive table has more rows than the
    # uniform 4096^3 v3 dataset), never v2's records nor the target's own 1024^3 v3 tables
    assert choice.sources == [os.path.join(datasets.shipped_folder(), "exhaustive", t) for t in
                              ("gemm_2048_8192_1024_v3", "gemm_4096_4096_4096_v3")]
    v1 = make("gemm", (1024,) * 3, space="v1")
    picked = warm_sources.choose(v1, gpu="NVIDIA H100 80GB HBM3", shipped_only=True,
                            other_workloads=True).sources
    assert picked and all("_v2" not in p and "_v3" not in p for p in picked)


def test_replay_auto_never_uses_its_own_table_nor_a_machines_library(standin_store):
    _, folder = standin_store
    op = get_operator("gemm").from_args((1024, 1024, 1024))
    choice = warm_sources.resolve(AUTO, op, runner="replay", gpu="NVIDIA H100 80GB HBM3",
                             dataset=T1024, records=folder)
    names = [library.portable(p) for p in choice.sources]
    assert names == ["exhaustive/gemm_2048_8192_1024_v2",
                     "exhaustive/gemm_4096_4096_4096_v2",
                     "exhaustive/conv2d_16_14_14_256_256_3_3_1_1_1_v2"]
    assert warm_sources.resolve("none", op, runner="replay", gpu=None).sources == []


def test_one_command_replay_names_its_sources(tmp_path, bocast_cli):
    code, out, err = bocast_cli("tune", "gemm", "--shape", "1024,1024,1024", "--runner",
                                "replay", "--strategy", "cga", "--trials", "8", "--batch-size",
                                "8", "--output", str(tmp_path / "out"), "--json")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    # no --space: the shape chooses (space auto), v3 at 1024^3, so its v3 table and sources
    assert summary["trials"] == 8 and summary["dataset"].endswith(T1024_V3)
    assert summary["warm_start_sources"][0] == "exhaustive/gemm_2048_8192_1024_v3"
    assert summary["export"].startswith("bocast export ")
    assert "warm start (auto) from" in err
    assert "x torch.mm(out_dtype=float32) (cuBLAS, fp32 out) (recorded in the dataset)" in out
    with Store.open(str(tmp_path / "out" / "records.db")) as s:
        ident = s.get_meta("run")
    assert ident["options"] == {} and \
        ident["resolved"]["warm_start"] == summary["warm_start_sources"]
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["provenance"]["warm_start_sources"] == summary["warm_start_sources"]
    assert not os.listdir(os.environ["BOCAST_RECORDS"])  # replay adds nothing to the library


def test_one_command_standin_warm_starts_from_the_library_and_opts_out(standin_store, tmp_path,
                                                                       monkeypatch):
    store, folder = standin_store
    monkeypatch.setenv(library.ENV, folder)
    # space v2 named, as the library's store is (op and shape alone: auto, v3 at this shape)
    warm = bocast.tune(op="gemm", shape=(512, 256, 256), space="v2",
                       output=str(tmp_path / "warm"), **{**QUICK, "strategy": "cga"})
    copy = os.path.join(folder, [f for f in os.listdir(folder) if "256x256x256" in f][0])
    assert warm.summary["warm_start_sources"] == [copy]
    assert warm.summary["strategy_options"]["warm_start"] == [copy]
    cold = bocast.tune(op="gemm", shape=(512, 256, 256), space="v2",
                       output=str(tmp_path / "cold"), warm_start="none",
                       **{**QUICK, "strategy": "cga"})
    assert cold.summary["warm_start_sources"] == []
    with Store.open(cold.store) as s:
        assert s.get_meta("run")["resolved"]["warm_start"] == []



def test_a_resumed_run_whose_source_store_is_gone_says_so(standin_store, tmp_path, monkeypatch):
    """A warm run carried to a machine without its source (seen on the GPU machine: a fresh
    one has an empty records library): one error naming the source and what to do."""
    store, folder = standin_store
    lib = tmp_path / "lib"
    shutil.copytree(folder, lib)
    monkeypatch.setenv(library.ENV, str(lib))
    out = tmp_path / "warm"
    kw = dict(op="gemm", shape=(512, 256, 256), space="v2", output=str(out),
              **{**QUICK, "strategy": "cga"})
    bocast.tune(**kw)
    shutil.rmtree(lib)
    with pytest.raises(bocast.InputError, match=r"began warm-started from .*256x256x256.*"
                                                r"not here.*copy them back"):
        bocast.tune(**kw)

def test_stand_in_runs_stay_out_of_the_library_unless_asked(standin_store, tmp_path,
                                                             bocast_cli):
    """A stand-in run's store goes only into a library the run names; one there anyway serves
    no warm start or suggestion but a stand-in run's (issue 42: a suggestion of 4.2 TFLOPS
    read on the stand-in's distribution)."""
    default = os.environ[library.ENV]  # conftest's: this test's own default library
    code, out, err = bocast_cli("tune", "gemm", "--shape", "256,256,256", "--space", "v2",
                                "--runner", "standin", "--strategy", "random", "--trials", "8",
                                "--batch-size", "8", "--output", str(tmp_path / "run"), "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["library_copy"] is None
    assert not os.listdir(default) and "a synthetic runner's store (standin) is not added" in err
    _, folder = standin_store  # named by its run (records=): the copy is there
    entries = [e for e in library.scan(folder)[0] if not e.shipped]
    assert len(entries) == 1 and entries[0].synthetic
    target = make("gemm", (512, 256, 256), space="v2")
    for gpu in (None, "NVIDIA H100 80GB HBM3"):
        choice = warm_sources.choose(target, gpu=gpu, records=folder)
        assert entries[0].path not in choice.sources
        assert any("1 stand-in store(s) of the library left out" in n for n in choice.notes)
    assert warm_sources.choose(target, gpu=STANDIN, records=folder).sources == [entries[0].path]
    got = bocast.suggest("gemm", (512, 256, 256), space="v2", k=2, records=folder)
    assert got.sources and not any("stand-in" in s for s in got.sources)
    assert entries[0].name not in got.sources


def test_one_command_flags_belong_to_an_operator(tmp_path, bocast_cli):
    (tmp_path / "c.yaml").write_text("seed: 0\n")
    code, out, err = bocast_cli("tune", str(tmp_path / "c.yaml"), "--shape", "1,2,3")
    assert code == 2 and "--shape: only with an operator" in err
    code, out, err = bocast_cli("tune", "gemm", "--shape", "1000,1000,1000", "--runner",
                                "replay")
    assert code == 2 and "no shipped dataset of gemm [1000, 1000, 1000]" in err
    code, out, err = bocast_cli("tune", "gemm", "--set", "nokey")
    assert code == 2 and "--set: expected KEY=VALUE" in err


def test_a_replay_tune_left_to_space_auto_replays_the_space_its_shipped_table_was_recorded_in():
    """A replay tune with the space left out replays the shipped table in the space it was
    recorded in: GEMM 32x2048x1000's table is v1's (auto would take v3 live, from M = 16), and one
    that names v3 is refused; where a v3 table is shipped (GEMM 1024^3, and since the H200 tables
    conv1d, conv3d, gemv), auto replays it."""
    from bocast.api import quick_config
    from bocast.errors import InputError

    op, shape = "gemm", (32, 2048, 1000)
    cfg = quick_config(op, shape, runner="replay")
    assert cfg["dataset"].endswith(f"{op}_{'_'.join(map(str, shape))}")
    with open(cfg["dataset"] + ".json") as f:
        recorded = json.load(f)["workload"].get("space", "v1")
    assert cfg["workload"]["space"] == recorded != "v3"
    with pytest.raises(InputError, match=r"no shipped dataset of .*\(space v3\)"):
        quick_config(op, shape, runner="replay", space="v3")
    for op, shape in (("gemm", (1024, 1024, 1024)), ("gemv", (4096, 4096, 16)),
                      ("conv1d", (16, 512, 256, 256, 3, 1, 1, 1)),
                      ("conv3d", (4, 16, 28, 28, 64, 64, 3, 3, 3, 1, 1, 1))):
        cfg = quick_config(op, shape, runner="replay")  # auto's own table: v3
        assert cfg["workload"]["space"] == "v3" and cfg["dataset"].endswith("_v3")


def test_a_replay_comparison_takes_auto_from_the_shipped_datasets_a_live_one_refuses(
        records_library, standin_store):
    from bocast.run import comparison
    from bocast.schema import ConfigError

    raw = {"name": "c", "workload": {"op": "gemm", "shape": [32, 2048, 1000], "space": "v1"},
           "runner": "replay", "dataset": "gemm_32_2048_1000",
           "strategies": [{"label": "bo", "name": "bo", "warm_start": "auto"},
                          {"label": "cga", "name": "cga", "warm_start": "auto"},
                          {"label": "cold", "name": "bo", "warm_start": "none"}],
           "seeds": 1, "budget": {"trials": 8}, "batch_size": 8, "output": "runs/x",
           "results": "runs/x/results"}
    cfg = comparison.parse(raw, os.getcwd())
    bo, cga, cold = cfg.strategies
    names = [library.portable(p) for p in bo["warm_start"]]
    assert names and cga["warm_start"] == bo["warm_start"] and cold["warm_start"] == "none"
    # shipped datasets of other gemm workloads of space v1, never the table's own, never the
    # machine's library (standin_store put a store there)
    shipped = {library.portable(p) for p in datasets.shipped_datasets()}
    assert all(n in shipped and "gemm_32_2048_1000" not in n for n in names)
    ident = comparison.run_identity(cfg, bo, 0)
    assert ident["options"]["warm_start"] == names
    with pytest.raises(ConfigError, match="records library, which a live comparison's results"):
        comparison.parse({**raw, "runner": "local", "dataset": None}, "")


def test_a_strategy_without_a_warm_start_takes_none_and_auto_as_cold(tmp_path, bocast_cli):
    """A script that sets one --warm-start over every strategy: random (no warm start) runs
    cold with 'none' or 'auto', as the same run as without it; sources are one clear line."""
    idents = []
    for ws in ("none", "auto", None):
        out_dir = tmp_path / f"random_{ws}"
        code, out, err = bocast_cli("tune", "gemm", "--shape", "1024,1024,1024", "--runner",
                                    "replay", "--strategy", "random", "--trials", "4",
                                    "--output", str(out_dir),
                                    *(("--warm-start", ws) if ws else ()), "--json")
        assert code == 0, err
        assert json.loads(out.strip().splitlines()[-1])["trials"] == 4
        with Store.open(str(out_dir / "records.db")) as st:
            idents.append(st.get_meta("run")["options"])
    assert idents == [{}, {}, {}]
    source = datasets.locate(T1024_V3.replace("1024_1024_1024", "4096_4096_4096"))
    code, out, err = bocast_cli("tune", "gemm", "--shape", "1024,1024,1024", "--runner",
                                "replay", "--strategy", "random", "--warm-start", source,
                                "--output", str(tmp_path / "listed"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "strategy.warm_start: strategy 'random' has no warm start" in err and source in err
    assert not (tmp_path / "listed").exists()


def test_a_comparison_and_a_study_take_a_cold_strategys_none_too(records_library):
    from bocast.run import comparison
    from bocast.schema import ConfigError

    raw = {"name": "c", "workload": {"op": "gemm", "shape": [32, 2048, 1000], "space": "v1"},
           "runner": "standin",
           "strategies": [{"label": "random", "name": "random", "warm_start": "none"},
                          {"label": "ga", "name": "ga", "warm_start": "auto"},
                          {"label": "ms", "name": "metaschedule", "warm_start": "none"},
                          {"label": "bo", "name": "bo", "warm_start": "none"}],
           "seeds": 1, "budget": {"trials": 8}, "batch_size": 8, "output": "runs/x",
           "results": "runs/x/results"}
    cfg = comparison.parse(raw, os.getcwd())
    assert [s.get("warm_start") for s in cfg.strategies] == [None, None, None, "none"]
    listed = {**raw, "strategies": [{"label": "random", "name": "random", "warm_start": ["x"]}]}
    with pytest.raises(ConfigError, match=r"strategies\[0\] \(random\): warm_start: strategy "
                                          "'random' has no warm start"):
        comparison.parse(listed, os.getcwd())
    study = bocast.create_study({"op": "gemm", "shape": [512, 512, 512], "space": "v1"},
                                strategy="random", warm_start="none")
    assert len(study.ask(2)) == 2


def test_records_list_cuts_no_gpu_or_shape_name(bocast_cli, monkeypatch):
    class Entry:
        shipped = False

        def __init__(self, **row):
            self.row = {"op": "conv3d", "space": "v2", "rows": 12, "best_tflops": 1.5, **row}

        def describe(self):
            return self.row

    long_gpu = "NVIDIA GeForce RTX 4090 Laptop GPU (a long name)"
    long_shape = [4, 16, 28, 28, 64, 64, 3, 3, 3, 1, 1, 1]
    monkeypatch.setattr(library, "scan", lambda folder, stats: ([
        Entry(shape=long_shape, gpu=long_gpu, name="a"),
        Entry(shape=[1, 2, 3], gpu=None, best_tflops=None, name="b")], []))
    code, out, err = bocast_cli("records")
    assert code == 0, err
    head, a, b = out.splitlines()[1:4]
    assert long_gpu in a and "4x16x28x28x64x64x3x3x3x1x1x1 " in a and a.endswith("  a")
    assert b.split() == ["conv3d", "1x2x3", "v2", "?", "12", "-", "b"]
    assert head.index("gpu") == a.index(long_gpu) and head.index("name") == a.index(" a") + 1


def test_warm_defaults_apply_only_to_a_warm_run_and_never_over_a_given_option(monkeypatch):
    from bocast.strategies import strategy_class

    monkeypatch.setattr(strategy_class("bo"), "warm_defaults", {"warm_start_share": 0.5,
                                                                 "y_transform": "relative"})
    got = warm_sources.warm_options("bo", {"y_transform": "log"}, ["a", "b"])
    assert got == {"warm_start_share": 0.5, "y_transform": "log", "warm_start": ["a", "b"]}
    assert warm_sources.warm_options("bo", {}, []) == {"warm_start": []}
    # warm_start_top says how the first batch starts: the share is not added beside it
    assert warm_sources.warm_options("bo", {"warm_start_top": 16}, ["a"]) == {
        "warm_start_top": 16, "warm_start": ["a"]}
    assert warm_sources.warm_options("cga", {}, ["a"]) == {"warm_start": ["a"]}


def test_remeasure_and_ablation_are_commands(standin_store, tmp_path, bocast_cli):
    store, _ = standin_store
    out = tmp_path / "remeasure.json"
    code, stdout, err = bocast_cli("remeasure", store, "--runner", "standin", "--top", "2",
                                   "--rounds", "1", "--out", str(out))
    assert code == 0, err
    kernels = json.loads(out.read_text())["kernels"]
    assert len(kernels) == 2 and all(k["build_status"] == "ok" for k in kernels)
    # bad input: one line, exit 2, as every command
    code, _, err = bocast_cli("remeasure", store, str(tmp_path / "missing.db"))
    assert code == 2 and err.startswith("bocast: error:") and "missing.db" in err
    code, _, err = bocast_cli("ablation", str(tmp_path / "none.yaml"))
    assert code == 2 and err.strip() == f"bocast: error: {tmp_path / 'none.yaml'}: no such file"
