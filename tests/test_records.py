"""Record store: append-only rows, refusal of foreign files, SIGKILL-and-resume, datasets."""

import gzip
import hashlib
import lzma
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from bocast.measure.replay import ReplayDataset
from bocast.records.datasets import dataset_configs, export_dataset, load_dataset
from bocast.records.record import FEATURES, MEASURED, Record
from bocast.records.status import Status
from bocast.records.store import Store, StoreError, load
from bocast.space.operators.operator import get_operator
from bocast.space.space import Space
from tests import background

OP = get_operator("gemm").from_args((64, 64, 64))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


@pytest.mark.parametrize("empty_file", [False, True])
def test_a_store_whose_creation_fails_leaves_no_stub(tmp_path, monkeypatch, empty_file):
    """Issue 42: on a full disk SQLite wrote its header but not the tables, and the same command
    refused that 4 KB stub once space was freed. A failure where the tables are created (disk
    full, injected) leaves the path as it was: absent, or the empty file it was."""
    path = tmp_path / "r.db"
    if empty_file:
        path.write_bytes(b"")
    real_create = Store._create
    stub_sizes = []

    def full_disk(self):
        stub_sizes.append(os.path.getsize(self.path))  # SQLite's header is on disk already
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_create", full_disk)
    with pytest.raises(StoreError, match="disk is full"):
        Store(str(path), OP.workload)
    assert stub_sizes and stub_sizes[0] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == (["r.db"] if empty_file else [])
    assert not empty_file or path.read_bytes() == b""
    monkeypatch.setattr(Store, "_create", real_create)  # space freed: the same store is made
    with Store(str(path), OP.workload) as store:
        store.append(_record(OP.space.sample(1, rng=0)[0]))
    assert len(load(str(path))) == 1


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
            ok = i % 3 != 0  # a failure has no TFLOPS (check_record)
            store.append(_record(c, Status.OK if ok else Status.BUILD_ERROR,
                                 tflops=i if ok else None))
    csv_path, _ = export_dataset(path, str(tmp_path / "ds"), {"workload": OP.workload})
    assert os.path.getsize(csv_path) < 20_000
    df, meta = load_dataset(str(tmp_path / "ds"))
    assert meta["rows"] == 20 and meta["workload"] == OP.workload
    assert set(meta["columns"]) == {*MEASURED, *FEATURES}
    rebuilt = dataset_configs(df, meta["knob_columns"], OP.space)
    assert [Space.key(c) for c in rebuilt] == [Space.key(c) for c in configs]
    assert list(df["status"][:3]) == ["build_error", "ok", "ok"]
    # written as xz; a gzip dataset of before (the same rows) is still read, by replay too
    assert csv_path.endswith(".csv.xz")
    old = str(tmp_path / "old")
    with lzma.open(csv_path) as src, gzip.open(old + ".csv.gz", "wb") as dst:
        dst.write(src.read())
    shutil.copy(str(tmp_path / "ds.json"), old + ".json")
    assert load_dataset(old)[0].equals(df)
    assert len(ReplayDataset(old, OP).configs) == 20


def _every_field(config, i):
    """A record with every measured field and feature set, each to a value of its own."""
    values = {name: (10 + i if name == "repeats" else 1.5 + i + n / 8)
              for n, name in enumerate(MEASURED)}
    return Record(Space.key(config), _json(config), Status.OK, **values,
                  features={name: 100.0 + n for n, name in enumerate(FEATURES)}, source="t")


def test_every_measured_field_survives_store_dataset_and_replay(tmp_path):
    path = str(tmp_path / "r.db")
    configs = OP.space.sample(3, rng=2, unique=True)
    records = [_every_field(c, i) for i, c in enumerate(configs)]
    with Store(path, OP.workload) as store:
        for r in records:
            store.append(r)
    with Store(path, OP.workload) as store:
        assert store.records() == records
    df = load(path)
    assert all(df[name].tolist() == [getattr(r, name) for r in records] for name in MEASURED)
    export_dataset(path, str(tmp_path / "ds"), {"workload": OP.workload})
    ds = ReplayDataset(str(tmp_path / "ds"), OP)
    assert [ds.record(c, source="t") for c in configs] == records
    assert isinstance(ds.record(configs[0]).repeats, int)


def test_store_written_before_a_column_gets_it_on_open(tmp_path):
    path = str(tmp_path / "old.db")
    with Store(path, OP.workload) as store:
        store.append(_every_field(OP.space.sample(1, rng=0)[0], 0))
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE measurements DROP COLUMN latency_q25_ms")
    conn.commit()
    conn.close()
    assert load(path)["latency_q25_ms"].isna().all()  # read-only: the column is not added
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(path).execute("SELECT latency_q25_ms FROM measurements")
    with Store(path, OP.workload) as store:
        (old,) = store.records()
        assert old.latency_q25_ms is None and old.latency_q75_ms is not None
        store.append(_every_field(OP.space.sample(2, rng=1, unique=True)[1], 1))
        assert store.records()[1].latency_q25_ms is not None


def test_open_reads_a_store_of_any_workload_and_writes_nothing(tmp_path):
    path = str(tmp_path / "r.db")
    other = get_operator("gemm").from_args((128, 64, 64))
    configs = other.space.sample(3, rng=4, unique=True)
    with Store(path, other.workload) as store:
        for i, c in enumerate(configs):
            store.append(_every_field(c, i))
        written = store.records()
    conn = sqlite3.connect(path)  # as if written before a column existed
    conn.execute("ALTER TABLE measurements DROP COLUMN rel_error")
    conn.commit()
    conn.close()
    before = _digest(path)
    with Store.open(path) as store:
        assert store.workload == other.workload
        got = store.records()
        with pytest.raises(StoreError, match="read-only"):
            store.append(_every_field(OP.space.sample(1, rng=9)[0], 9))
    assert [r.rel_error for r in got] == [None] * 3
    assert [r.latency_ms for r in got] == [r.latency_ms for r in written]
    assert _digest(path) == before
    with pytest.raises(StoreError, match="does not exist"):
        Store.open(str(tmp_path / "none.db"))
    with open(tmp_path / "x.db", "wb") as f:
        f.write(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="not a bocast record store"):
        Store.open(str(tmp_path / "x.db"))


def test_remeasure_picks_the_best_of_stores_through_the_records_api(tmp_path):
    from bocast.tools import remeasure

    configs = OP.space.sample(6, rng=5, unique=True)
    paths = [str(tmp_path / f"{i}.db") for i in range(2)]
    for j, path in enumerate(paths):
        with Store(path, OP.workload) as store:
            for i, c in enumerate(configs[3 * j:3 * j + 3]):
                store.append(_record(c, Status.OK if i else Status.RUN_TIMEOUT,
                                     tflops=i + 3 * j if i else None))
    ((workload, picked),) = remeasure.best_configs(paths, 3)
    assert workload == OP.workload
    assert [(p["recorded_tflops"], p["store"]) for p in picked] == [(5, "1.db"), (4, "1.db"),
                                                                    (2, "0.db")]
    assert picked[0]["config"] == _json(configs[5])
    # another space of the same operator and shape is its own group, with its own top 3
    v3 = get_operator("gemm").from_args((64, 64, 64), space="v3")
    with Store(str(tmp_path / "v3.db"), v3.workload) as store:
        for i, c in enumerate(v3.space.sample(4, rng=1, unique=True)):
            store.append(_record(c, Status.OK, tflops=10 + i))
    groups = remeasure.best_configs([*paths, str(tmp_path / "v3.db")], 3)
    assert [(w["space"], [p["recorded_tflops"] for p in rows]) for w, rows in groups] == [
        (OP.workload["space"], [5, 4, 2]), ("v3", [13, 12, 11])]
    with Store(str(tmp_path / "other.db"), get_operator("gemm").from_args((128, 64, 64))
               .workload):
        pass
    with pytest.raises(SystemExit, match="differs"):
        remeasure.best_configs([paths[0], str(tmp_path / "other.db")], 3)


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


def sigkill_and_resume(folder):
    """``bocast measure`` (the stand-in slowed to 0.4 s a run) killed with SIGKILL once its
    store holds 6 rows, then the same command again; writes ``seen.json``: the rows at the kill,
    the second call's exit code and stderr, the rows at the end."""
    import json

    path = os.path.join(folder, "kill.db")
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
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    with open(os.path.join(folder, "seen.json"), "w") as f:
        json.dump({"before": before, "exit": done.returncode, "stderr": done.stderr,
                   "after": _rows(path)}, f)


# a background job (tests/background.py): the two calls run beside the other tests in a fresh
# process (they were subprocesses before too); the test reads what it saw
SIGKILL_RUN = background.job("records_sigkill", [
    sys.executable, "-c", "import sys; from tests.test_records import sigkill_and_resume; "
    "sigkill_and_resume(sys.argv[1])", "{out}"], timeout_s=900)


@pytest.mark.background(SIGKILL_RUN)
def test_sigkill_and_resume_loses_nothing_and_repeats_nothing():
    import json

    proc, out = background.result(SIGKILL_RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, "seen.json")) as f:
        seen = json.load(f)
    before, after = seen["before"], seen["after"]
    assert 6 <= len(before) < 24, f"kill landed at {len(before)} rows"
    assert seen["exit"] == 0, seen["stderr"]
    assert after[:len(before)] == before          # no finished row lost or rewritten
    assert len(after) == 24                       # every sampled configuration, once
    assert len({k for _, k, _ in after}) == 24    # none measured twice


def test_atomic_write_gives_results_the_mode_open_would(tmp_path):
    from bocast.files import atomic_write

    old = os.umask(0o027)
    try:
        new = tmp_path / "summary.json"
        with atomic_write(str(new)) as f:
            f.write("{}")
        assert new.stat().st_mode & 0o777 == 0o640  # not mkstemp's 0600
        new.chmod(0o604)
        with atomic_write(str(new)) as f:
            f.write("{}")
        assert new.stat().st_mode & 0o777 == 0o604  # a rewritten file keeps its mode
    finally:
        os.umask(old)
