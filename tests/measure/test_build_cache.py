"""The build cache (bocast.measure.build_cache): nothing is built twice, across runs and
resumes; a corrupt entry is rebuilt; a machine's failure is not kept. Builds here lower
without nvcc (the stand-in's builder), on a small GEMM."""

from __future__ import annotations

import os
import threading

import pytest

from bocast.measure import build_cache
from bocast.measure.builder import Builder
from bocast.measure.engine import Measurer
from bocast.measure.standin import StandinRunner
from bocast.records.store import Store
from bocast.space.operators.operator import get_operator

OP = get_operator("gemm").from_args((128, 128, 128))


def entries(folder) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs
            if f.endswith(".json")]


def test_a_resumed_or_repeated_run_builds_nothing_it_built_before(tmp_path, build_cache_folder):
    configs = OP.space.sample(4, 0, unique=True)
    with Builder(workers=1, compile=False) as builder, StandinRunner() as runner:
        with Store(str(tmp_path / "a.db"), OP.workload) as store:
            # the first run is stopped after its batch built and before any kernel ran
            Measurer(OP, store, builder, runner).prepare(configs)
            assert builder.built == 4 and store.records() == []
        assert len(entries(build_cache_folder)) == 4
        with Store(str(tmp_path / "a.db"), OP.workload) as store:  # resumed
            records = Measurer(OP, store, builder, runner).measure(configs)
        assert len(records) == 4 and builder.built == 4 and builder.cache.hits == 4
        with Store(str(tmp_path / "b.db"), OP.workload) as store:  # the same run again
            again = Measurer(OP, store, builder, runner).measure(configs)
        assert builder.built == 4 and builder.cache.hits == 8
    assert [(r.key, r.status, r.build_s, r.features) for r in again] == \
        [(r.key, r.status, r.build_s, r.features) for r in records]
    # another process's builder (a new run) finds them on disk
    with Builder(workers=1, compile=False) as other:
        assert all(b.cached for b in other.build(OP, configs)) and other.built == 0


def test_a_whole_tune_run_repeated_builds_nothing(tmp_path):
    import bocast

    def run(out):
        with Builder(workers=1, compile=False) as builder:
            bocast.tune(op="gemm", shape=(128, 128, 128), strategy="random", trials=6,
                        seed=3, output=str(out), runner="standin", builder=builder,
                        progress=False, retime_top=0)
            return builder.built

    assert run(tmp_path / "first") == 6
    assert run(tmp_path / "second") == 0


def test_a_corrupt_entry_is_rebuilt_not_trusted(build_cache_folder):
    (config,) = OP.space.sample(1, 1, unique=True)
    with Builder(workers=1, compile=False) as builder:
        (first,) = builder.build(OP, [config])
        (path,) = entries(build_cache_folder)
        with open(path, "r+b") as f:  # a bit flipped inside the result: the digest fails
            text = f.read().replace(b'"status": "ok"', b'"status": "build_error"')
            f.seek(0)
            f.write(text)
        (second,) = builder.build(OP, [config])
        assert builder.built == 2 and builder.cache.corrupt == 1 and not second.cached
        with open(path, "wb") as f:  # cut short (a full disk, a crash before the rename)
            f.write(b'{"format": 1, "key"')
        (third,) = builder.build(OP, [config])
        assert builder.built == 3 and builder.cache.corrupt == 2
    assert first.status == second.status == third.status and first.kernel == third.kernel
    (fourth,) = Builder(workers=1, compile=False).build(OP, [config])
    assert fourth.cached and fourth.kernel == first.kernel


def test_what_is_kept_and_the_setting(tmp_path, monkeypatch):
    cache = build_cache.BuildCache(str(tmp_path / "c"))
    ok = {"key": "k", "status": "ok", "stage": None, "cubin": b"\x00\x01", "features": {}}
    assert cache.put("a" * 64, ok) and cache.get("a" * 64)["cubin"] == b"\x00\x01"
    assert cache.put("b" * 64, {**ok, "status": "schedule_error", "stage": "apply"})
    assert cache.put("c" * 64, {**ok, "status": "build_error", "stage": "compile"})
    # the machine's failures: over the time limit, a crashed worker, nvcc killed
    assert not cache.put("d" * 64, {**ok, "status": "build_timeout", "stage": "compile"})
    assert not cache.put("e" * 64, {**ok, "status": "build_error", "stage": "worker"})
    assert not cache.put("f" * 64, {**ok, "status": "build_error", "stage": "compile",
                                     "transient": True})
    assert cache.get("d" * 64) is None and cache.counts()["stored"] == 3
    task = {"workload": OP.workload, "config": {"a": 1}, "compile": True}
    assert cache.key(task) == cache.key(dict(task)) != cache.key({**task, "compile": False})
    assert cache.key(task) != cache.key(task, arch="sm_90a")
    monkeypatch.setenv(build_cache.ENV, "off")
    assert build_cache.from_setting() is None and Builder(compile=False).cache is None
    monkeypatch.setenv(build_cache.ENV, str(tmp_path / "moved"))
    assert build_cache.from_setting().folder == str(tmp_path / "moved")
    assert build_cache.from_setting(False) is None
    monkeypatch.delenv(build_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build_cache.from_setting().folder == str(tmp_path / "xdg" / "bocast" / "builds")


def test_writers_at_once_leave_one_whole_entry(tmp_path):
    cache = build_cache.BuildCache(str(tmp_path / "c"))
    results = [{"key": "k", "status": "ok", "stage": None, "cubin": bytes([i]) * 100_000}
               for i in range(8)]
    threads = [threading.Thread(target=cache.put, args=("f" * 64, r)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = build_cache.BuildCache(cache.folder).get("f" * 64)
    assert got is not None and got["cubin"] in [r["cubin"] for r in results]
    # the entry alone: no writer's temporary file left beside it, whatever its name
    assert os.listdir(os.path.dirname(entries(cache.folder)[0])) == ["f" * 64 + ".json"]


@pytest.mark.parametrize("edit", ["workload", "toolchain"])
def test_the_key_follows_what_decides_the_binary(edit, monkeypatch):
    cache = build_cache.BuildCache("/nonexistent")
    task = {"workload": OP.workload, "config": {"a": 1}, "compile": True}
    before = cache.key(task)
    if edit == "workload":
        task = {**task, "workload": {**OP.workload, "shape": [256, 128, 128]}}
    else:
        monkeypatch.setattr(build_cache, "toolchain", lambda: {"nvcc": "another release"})
    assert cache.key(task) != before


@pytest.mark.parametrize("error, kept", [(OSError("Too many open files"), False),
                                         (MemoryError(), False),
                                         (ValueError("no schedule"), True)])
def test_a_machines_exception_in_apply_is_not_kept(error, kept, monkeypatch):
    """A configuration's own failure is kept; one of the machine the build ran on (memory,
    files, an import) is transient: another attempt may build it."""
    from bocast.measure import builder

    config = OP.space.sample(1, 0)[0]
    monkeypatch.setattr(type(OP), "apply", lambda self, c: (_ for _ in ()).throw(error))
    got = builder.build_one({"workload": OP.workload, "config": builder.jsonable(config),
                             "compile": False})
    assert got.result.status.value == "schedule_error" and got.result.stage == "apply"
    assert build_cache.cacheable(got.result.to_dict()) is kept
