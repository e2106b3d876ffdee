"""Export of a record's kernel (bocast/kernel.py, ``bocast export``) and its loader: the files
are the builder's build of the record (the runner's cubin, the schedule's TVMScript), kernel.json
round-trips, the loader names a wrong argument, and bad input is one line with nothing written.
Running the kernel needs a GPU and TVM's CUDA runtime: on a CPU that test skips with the reason."""

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import bocast
from bocast.measure.nvcc import why_no_compiler

pytestmark = pytest.mark.skipif(why_no_compiler() is not None, reason=str(why_no_compiler()))

WORKLOAD = {"op": "gemm", "shape": [256, 256, 256]}


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three told rows of one GEMM: the best ok, a slower wrong_result, a build_error."""
    path = str(tmp_path_factory.mktemp("store") / "s.db")
    with bocast.create_study(workload=WORKLOAD, strategy="random", store=path) as study:
        configs = study.space.sample(3, 0, unique=True)
        study.tell(configs[0], tflops=10.0, latency_ms=0.0034, repeats=10)
        study.tell(configs[1], status="wrong_result", error="relative error 0.5")
        study.tell(configs[2], status="build_error", error="nvcc: no")
    return path, configs


@pytest.fixture(scope="module")
def exported(store, tmp_path_factory):
    """``bocast export STORE --best --out DIR --json``: (folder, its JSON line)."""
    from bocast import cli

    path, _ = store
    out = str(tmp_path_factory.mktemp("exp") / "best")
    before = _sha(path)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["export", path, "--best", "--out", out, "--json"]) == 0
    assert _sha(path) == before  # the store is only read
    return out, json.loads(buf.getvalue().splitlines()[-1])


def test_the_export_is_the_builders_build_of_the_record(exported):
    import tvm

    from bocast.measure.builder import build_task
    from bocast.measure.nvcc import compile_cubin
    from bocast.space.operators.operator import from_workload

    out, line = exported
    assert sorted(os.listdir(out)) == ["kernel.cu", "kernel.cubin", "kernel.json", "kernel.so",
                                       "schedule.json", "schedule.py"]
    meta = json.loads(Path(os.path.join(out, "kernel.json")).read_text())
    assert line["id"] == meta["record"]["id"] == 1 and line["tflops"] == 10.0
    assert meta["files"] == {n: _sha(os.path.join(out, n)) for n in meta["files"]}
    source = Path(os.path.join(out, "kernel.cu")).read_text()
    assert f"void __launch_bounds__({meta['kernel']['block'][0] * meta['kernel']['block'][1]}) " \
           f"{meta['kernel']['name']}(" in source
    assert 'extern "C" __global__' in source
    cubin = Path(os.path.join(out, "kernel.cubin")).read_bytes()
    assert cubin[:4] == b"\x7fELF"
    assert compile_cubin(source).cubin == cubin  # nvcc's build of kernel.cu
    # ... and byte for byte what the runner is handed for this configuration
    built = build_task({"workload": meta["workload"], "config": meta["config"]})
    assert built["cubin"] == cubin
    assert (built["kernel"], list(built["grid"]), list(built["block"])) == \
        (meta["kernel"]["name"], meta["kernel"]["grid"], meta["kernel"]["block"])
    library = Path(os.path.join(out, "kernel.so")).read_bytes()
    assert library[:4] == b"\x7fELF" and meta["kernel"]["name"].encode() in library
    # the schedule: TVM's serialisation exactly, the TVMScript as printed
    op = from_workload(meta["workload"])
    scheduled = op.apply(op.space.from_json(meta["config"])).mod
    saved = tvm.ir.load_json(Path(os.path.join(out, "schedule.json")).read_text())
    tvm.ir.assert_structural_equal(saved, scheduled)
    assert Path(os.path.join(out, "schedule.py")).read_text().endswith(scheduled.script())


def test_kernel_json_round_trips(store, exported):
    from bocast.space.operators.operator import from_workload
    from bocast.space.space import Space

    (_, configs), (out, _) = store, exported
    k = bocast.Kernel(out)
    assert k.meta == json.loads(Path(os.path.join(out, "kernel.json")).read_text())
    op = from_workload(k.workload)
    assert op.workload == {**WORKLOAD, "dtype": "fp16:fp32", "layout": "NT", "space": "v2"}
    assert Space.key(op.space.from_json(k.config)) == Space.key(configs[0]) == k.meta["key"]
    assert (k.measured["status"], k.measured["tflops"], k.measured["latency_ms"],
            k.measured["repeats"]) == ("ok", 10.0, 0.0034, 10)
    assert k.measured["timing"]["runner"] == "study"  # who measured it: a told study here
    assert k.source == Path(os.path.join(out, "kernel.cu")).read_text()
    assert [t["name"] for t in k.meta["tensors"]] == [t.name for t in op.tensors()]
    assert k.meta["provenance"]["git_sha"] and k.meta["build"]["nvcc"]


def test_a_changed_or_missing_file_is_refused(exported, tmp_path):
    out, _ = exported
    copy = str(tmp_path / "k")
    shutil.copytree(out, copy)
    with open(os.path.join(copy, "kernel.cubin"), "ab") as f:
        f.write(b"\0")
    with pytest.raises(bocast.InputError, match="kernel.cubin differs"):
        bocast.Kernel(copy)
    os.remove(os.path.join(copy, "kernel.json"))
    with pytest.raises(bocast.InputError, match="not an exported kernel"):
        bocast.load_kernel(copy)


def test_arguments_are_checked_by_name_before_anything_runs(exported):
    import torch

    k = bocast.Kernel(exported[0])
    a = torch.zeros(256, 256, dtype=torch.float16)
    b, c = a.clone(), torch.zeros(256, 256, dtype=torch.float32)
    for args, message in [
        ((a, b), r"takes 3 tensors \(A float16\[256, 256\] \(input\), B .*got 2"),
        ((a, b.float(), c), r"argument 2 \(B\): expected float16\[256, 256\], got float32"),
        ((a, b, c[:128]), r"argument 3 \(C\): expected float32\[256, 256\], got float32\[128, "),
        ((a.t(), b, c), r"argument 1 \(A\): not contiguous"),
        ((a, 3, c), r"argument 2 \(B\): expected a torch tensor, got int"),
        ((a, b, c), r"argument 1 \(A\): on cpu; every argument must be on the same CUDA GPU"),
    ]:
        with pytest.raises(bocast.InputError, match=message):
            k(*args)


def test_the_loaded_kernel_computes_the_reference(exported):
    """On a GPU: the kernel's output against torch, the runner's check and tolerance."""
    import torch

    try:
        k = bocast.load_kernel(exported[0])
    except bocast.InputError as e:
        if torch.cuda.is_available():
            raise
        pytest.skip(f"no GPU: {e}")
    from bocast.measure.gpu_worker import make_inputs, output_error
    from bocast.space.operators.operator import from_workload

    op = from_workload(k.workload)
    inputs = make_inputs(op, 0)
    out = k(*[inputs[t.name] for t in op.tensors()])
    torch.cuda.synchronize()
    assert out is inputs["C"]
    assert output_error(op, inputs) <= op.tolerance


def test_a_failed_record_exports_only_when_asked(store, tmp_path):
    path, configs = store
    out = str(tmp_path / "wrong")
    with pytest.raises(bocast.InputError, match="record 2 has status wrong_result"):
        bocast.export(path, out=out, record=2)
    assert not os.path.exists(out)
    from bocast.space.space import Space

    k = bocast.export(path, out=out, record=Space.key(configs[1]), any_status=True)
    assert (k.meta["record"]["id"], k.measured["status"]) == (2, "wrong_result")


def test_bad_input_is_one_line_and_writes_nothing(store, exported, tmp_path, bocast_cli):
    from bocast.records.public import Record, Store
    from bocast.records.status import Status

    path, _ = store
    failed = str(tmp_path / "failed.db")
    with bocast.create_study(workload=WORKLOAD, strategy="random", store=failed) as study:
        study.tell(study.space.sample(1, 1)[0], status="build_error")
    foreign = str(tmp_path / "ms.db")  # a MetaSchedule candidate's row: no knobs to rebuild
    with Store(foreign, bocast.create_study(workload=WORKLOAD).op.workload) as db:
        db.append(Record("ms:1", {"metaschedule": "ms:1"}, Status.OK, tflops=1.0))
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = str(tmp_path / "new")
    for argv, message in [
        ([str(tmp_path / "missing.db"), "--best", "--out", out],
         "record store .*missing.db does not exist"),
        ([failed, "--best", "--out", out], r"has no ok record to export \(1 rows, build_error 1\)"),
        ([path, "--id", "7", "--out", out], r"has no record id 7 \(ids 1..3\)"),
        ([path, "--id", "3", "--out", out], "record 3 has status build_error .*--any-status"),
        ([path, "--key", "{}", "--out", out], "has no record of configuration {}"),
        ([foreign, "--best", "--out", out], "record 1 is not a configuration of the space"),
        ([path, "--best", "--out", exported[0]], "is not empty"),
        ([path, "--best", "--out", str(afile)], "exists and is not a folder"),
        ([path, "--best", "--id", "1", "--out", out], "not allowed with argument"),
        ([path, "--id", "0", "--out", out], "--id: expected an integer between 1 and"),
    ]:
        code, stdout, stderr = bocast_cli("export", *argv)
        assert code == 2 and stdout == "", argv
        assert len(stderr.strip().splitlines()) == 1, stderr
        assert re.search(message, stderr), (message, stderr)
        assert not os.path.exists(out)
    assert afile.read_text() == "x"
