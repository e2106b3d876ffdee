"""Record store: append-only rows, refusal of foreign files, SIGKILL-and-resume, datasets."""

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from bocast.measure.status import Status
from bocast.operator import get_operator
from bocast.records import (
    Record,
    Store,
    StoreError,
    dataset_configs,
    export_dataset,
    load,
    load_dataset,
)
from bocast.space import Space

OP = get_operator("gemm").from_args((64, 64, 64))


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _record(config, status=Status.OK, tflops=1.0):
    return Record(Space.key(config), config, status, latency_ms=1.0, tflops=tflops,
                  features={"registers": 64.0, "smem_bytes": 1024.0})


def test_append_and_read_back(tmp_path):
    path = str(tmp_path / "r.db")
    configs = OP.space.sample(5, rng=0, unique=True)
    with Store(path, OP.workload) as store:
        session = store.start_session({"date": "today", "gpu": "none"})
        for c in configs:
            store.append(_record(c), session)
        with pytest.raises(StoreError, match="already in"):
            store.append(_record(configs[0]))
    with Store(path, OP.workload) as store:
        assert [r.config for r in store.records()] == [_json(c) for c in configs]
        assert store.sessions()[0]["gpu"] == "none"
    df = load(path)
    assert len(df) == 5 and {"tile_i_0", "tile_i_2", "instr", "status", "tflops"} <= set(df.columns)


def _json(c):
    import json
    return json.loads(Space.key(c))


def test_store_of_another_workload_is_refused_and_untouched(tmp_path):
    path = str(tmp_path / "r.db")
    with Store(path, OP.workload) as store:
        store.append(_record(OP.space.sample(1, rng=0)[0]))
    before = _digest(path)
    other = get_operator("gemm").from_args((128, 64, 64))
    with pytest.raises(StoreError, match="holds records of workload"):
        Store(path, other.workload)
    assert _digest(path) == before


@pytest.mark.parametrize("content", [b"not a database at all" * 100,
                                     b"SQLite format 3\x00" + b"\x07" * 2000])
def test_corrupt_store_is_refused_and_untouched(tmp_path, content):
    path = str(tmp_path / "bad.db")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(StoreError, match="not a bocast record store"):
        Store(path, OP.workload)
    assert (tmp_path / "bad.db").read_bytes() == content


def test_foreign_sqlite_is_refused(tmp_path):
    path = str(tmp_path / "other.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (name TEXT, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('format', 'something-else')")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a bocast record store"):
        Store(path, OP.workload)


def test_dataset_round_trip(tmp_path):
    path = str(tmp_path / "r.db")
    configs = OP.space.sample(20, rng=1, unique=True)
    with Store(path, OP.workload) as store:
        for i, c in enumerate(configs):
            store.append(_record(c, Status.OK if i % 3 else Status.BUILD_ERROR, tflops=i))
    csv_path, _ = export_dataset(path, str(tmp_path / "ds"), {"workload": OP.workload})
    assert os.path.getsize(csv_path) < 20_000
    df, meta = load_dataset(str(tmp_path / "ds"))
    assert meta["rows"] == 20 and meta["workload"] == OP.workload
    rebuilt = dataset_configs(df, meta["knob_columns"], OP.space)
    assert [Space.key(c) for c in rebuilt] == [Space.key(c) for c in configs]
    assert list(df["status"][:3]) == ["build_error", "ok", "ok"]


def _rows(path):
    if not os.path.exists(path):
        return []
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        rows = conn.execute("SELECT id, key, created FROM measurements ORDER BY id").fetchall()
        conn.close()
        return rows
    except sqlite3.Error:
        return []


def test_sigkill_and_resume_loses_nothing_and_repeats_nothing(tmp_path):
    path = str(tmp_path / "kill.db")
    cmd = [sys.executable, "-m", "bocast.cli", "measure", "gemm", "--shape", "64,64,64",
           "--sample", "24", "--seed", "7", "--store", path, "--runner", "standin",
           "--batch", "4", "--workers", "2"]
    env = {**os.environ, "BOCAST_STANDIN_SLEEP": "0.4"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 240
    while len(_rows(path)) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _rows(path)
    assert 6 <= len(before) < 24, f"kill landed at {len(before)} rows"

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = _rows(path)
    assert after[:len(before)] == before          # no finished row lost or rewritten
    assert len(after) == 24                       # every sampled configuration, once
    assert len({k for _, k, _ in after}) == 24    # none measured twice
