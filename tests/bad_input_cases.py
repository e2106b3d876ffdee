"""Bad inputs of the ``bocast`` command, as data: each case is one command with one thing wrong
(an option, a configuration field, a dataset or record store file, a folder, the machine), run
in a fresh folder. A case passes when the command exits with its code (2) before doing any work,
prints exactly one line on stderr that names the problem (no traceback), prints nothing on
stdout, leaves every file it was given byte-identical and creates no file at all (a store's
``-wal``/``-shm`` included) beyond what it was asked to write.

``tests/test_bad_inputs.py`` runs every case in-process (``bocast.cli.main``);
``lab/bad_inputs.py`` runs them as subprocesses and writes the table;
``tests/interrupt_harness.py`` covers the interrupts.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bocast.records.datasets import shipped_folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = shipped_folder()
DATASET = "gemm_32_2048_1000"  # recorded on the H100, space v1, 500 rows
WORKLOAD = {"op": "gemm", "shape": [32, 2048, 1000], "dtype": "fp16:fp32", "layout": "NT",
            "space": "v1"}
TUNE = {"workload": WORKLOAD, "strategy": {"name": "random"}, "batch_size": 16,
        "budget": {"trials": 32}, "seed": 0, "runner": "replay",
        "dataset": os.path.join(DATA, DATASET), "output": "{tmp}/out"}
COMPARE = {"name": "bad", "workload": WORKLOAD, "runner": "replay",
           "dataset": os.path.join(DATA, DATASET),
           "strategies": [{"label": "random", "name": "random"}, {"label": "ga", "name": "ga"}],
           "seeds": 2, "budget": {"trials": 32}, "batch_size": 16, "output": "{tmp}/runs",
           "results": "{tmp}/res/bad"}
UNWRITABLE = "/proc/bocast-cannot-write-here"  # refused even to root


@dataclass
class Case:
    name: str                        # what is wrong, in words
    argv: list[str]                  # bocast's arguments; {tmp} is the case's folder
    expect: str                      # a piece of the one error line
    setup: Callable[[str], None] | None = None  # writes the files the command is given
    code: int = 2
    group: str = ""                  # option | config | file | machine

    def command(self, tmp: str) -> list[str]:
        return [a.replace("{tmp}", tmp) for a in self.argv]


# ------------------------------------------------------------------------------- setups


def _yaml(path: str, raw) -> None:
    import yaml

    def fill(x):
        if isinstance(x, str):
            return x.replace("{tmp}", os.path.dirname(path))
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fill(v) for v in x]
        return x

    with open(path, "w") as f:
        yaml.safe_dump(fill(raw), f)


def tune_cfg(**change) -> Callable[[str], None]:
    def setup(tmp: str) -> None:
        cfg = {**TUNE, **change}
        _yaml(os.path.join(tmp, "c.yaml"), {k: v for k, v in cfg.items() if v is not DROP})
    return setup


def compare_cfg(**change) -> Callable[[str], None]:
    def setup(tmp: str) -> None:
        cfg = {**COMPARE, **change}
        _yaml(os.path.join(tmp, "c.yaml"), {k: v for k, v in cfg.items() if v is not DROP})
    return setup


DROP = object()


def _dataset(tmp: str, edit_rows=None, edit_meta=None, raw_bytes=None) -> None:
    """A copy of the recorded dataset under {tmp}/ds, edited; the tune config points at it."""
    from bocast.records.datasets import dataset_csv

    src = os.path.join(DATA, DATASET)
    with lzma.open(dataset_csv(src), "rt") as f:
        lines = f.read().splitlines()
    with open(src + ".json") as f:
        meta = json.load(f)
    if edit_rows:
        lines = edit_rows(lines)
    if edit_meta:
        meta = edit_meta(meta)
    dst = os.path.join(tmp, "ds")
    if raw_bytes is not None:
        with open(dst + ".csv.xz", "wb") as f:
            f.write(raw_bytes(lzma.compress(("\n".join(lines) + "\n").encode())))
    else:
        with lzma.open(dst + ".csv.xz", "wt") as f:
            f.write("\n".join(lines) + "\n")
    with open(dst + ".json", "w") as f:
        f.write(meta if isinstance(meta, str) else json.dumps(meta))
    _yaml(os.path.join(tmp, "c.yaml"), {**TUNE, "dataset": dst})


def dataset(**kw) -> Callable[[str], None]:
    return lambda tmp: _dataset(tmp, **kw)


def _cell(lines: list[str], row: int, column: str, value: str) -> list[str]:
    header = lines[0].split(",")
    cells = lines[row].split(",")
    cells[header.index(column)] = value
    return lines[:row] + [",".join(cells)] + lines[row + 1:]


def _drop_column(lines: list[str], column: str) -> list[str]:
    i = lines[0].split(",").index(column)
    return [",".join(c for j, c in enumerate(line.split(",")) if j != i) for line in lines]


def _store(tmp: str, name: str = "s.db", workload=None, rows: int = 120) -> str:
    """A record store of gemm 64^3 (v2) with ``rows`` records (several pages)."""
    from bocast.records.public import Record, Store
    from bocast.records.status import Status
    from bocast.space.operators.operator import from_workload
    from bocast.space.space import Space

    op = from_workload(workload or {"op": "gemm", "shape": [64, 64, 64]})
    path = os.path.join(tmp, name)
    with Store(path, op.workload) as s:
        session = s.start_session({"date": "setup"})
        for c in op.space.sample(rows, 0, unique=True):
            s.append(Record(Space.key(c), c, Status.OK, tflops=1.0, latency_ms=1.0,
                            error="padding " * 30), session)
    return path


def damaged_store(tmp: str, name: str = "s.db") -> None:
    """A store whose header and meta table read fine and whose middle page is garbage."""
    path = _store(tmp, name)
    pages = os.path.getsize(path) // 4096
    with open(path, "r+b") as f:
        f.seek((pages // 2) * 4096 + 100)
        f.write(bytes(range(256)) * 12)


def garbage_store(tmp: str) -> None:
    with open(os.path.join(tmp, "s.db"), "wb") as f:
        f.write(b"SQLite format 3\x00" + b"\x07" * 5000)


def foreign_sqlite(tmp: str) -> None:
    conn = sqlite3.connect(os.path.join(tmp, "s.db"))
    conn.execute("CREATE TABLE meta (name TEXT, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('format', 'something-else')")
    conn.commit()
    conn.close()


def a_file(tmp: str) -> None:
    with open(os.path.join(tmp, "file.txt"), "w") as f:
        f.write("a file, not a folder\n")


def other_run_store(tmp: str) -> None:
    """runs/random_seed0.db written by a comparison with other options for that label."""
    from bocast.run import comparison as compare

    compare_cfg(strategies=[{"label": "random", "name": "ga", "elite": 4},
                            {"label": "ga", "name": "ga"}])(tmp)
    cfg = compare.load(os.path.join(tmp, "c.yaml"))
    op = compare.validate(cfg)[0]
    s, seed, path, _ = compare.plan(cfg)[0]
    os.makedirs(os.path.dirname(path))
    from bocast.records.store import Store

    with Store(path, op.workload) as store:
        store.set_meta("run", compare.run_identity(cfg, s, seed))
    compare_cfg()(tmp)


def other_tune_store(tmp: str) -> None:
    """out/records.db holding a tune run of another strategy and seed than c.yaml's."""
    from bocast.records.store import Store
    from bocast.run import identity
    from bocast.space.operators.operator import from_workload

    tune_cfg()(tmp)
    os.makedirs(os.path.join(tmp, "out"))
    with Store(os.path.join(tmp, "out", "records.db"), from_workload(WORKLOAD).workload) as store:
        store.set_meta("run", identity.run_identity(
            strategy="ga", options={"elite": 4}, seed=1, batch_size=TUNE["batch_size"],
            runner="replay", dataset=TUNE["dataset"]))


#: a sub-space of gemm 64^3 (space v2) with 3 feasible configurations (tests/test_subspace.py)
SUB_FIX = {"async_copy": "on", "vec": 8, "unroll": 0, "raster": 1, "writeback": "direct",
           "frag_pipeline": "off", "smem_layout": "pad8", "instr": "mma", "stages": 2,
           "tile_k": [2, 2], "tile_i": [1, 2, 2], "tile_j": [[2, 1, 2], [1, 2, 2], [1, 1, 4]]}
SUB_WORKLOAD = {"op": "gemm", "shape": [64, 64, 64], "dtype": "fp16:fp32", "layout": "NT",
                "space": "v2"}


def subspace_file(**change) -> Callable[[str], None]:
    """{tmp}/sub.yaml: the 3-configuration sub-space, changed."""
    def setup(tmp: str) -> None:
        raw = {"name": "tiny", "workload": SUB_WORKLOAD, "fix": SUB_FIX, "feasible": 3, **change}
        _yaml(os.path.join(tmp, "sub.yaml"), {k: v for k, v in raw.items() if v is not DROP})
    return setup


def other_subspace_store(tmp: str) -> None:
    """{tmp}/s.db: a table of another sub-space of the same workload."""
    from bocast.records.store import Store
    from bocast.space.operators.operator import from_workload

    subspace_file()(tmp)
    op = from_workload(SUB_WORKLOAD)
    with Store(os.path.join(tmp, "s.db"), op.workload) as s:
        s.set_meta("subspace", {"name": "other", "allowed": {"stages": [3]}, "feasible": 7})


def dataset_and_compare(**change) -> Callable[[str], None]:
    """{tmp}/ds (a copy of the dataset) and a comparison of it, changed."""
    def setup(tmp: str) -> None:
        _dataset(tmp)
        compare_cfg(dataset="{tmp}/ds", **change)(tmp)
    return setup


def twice(key: str, value, make=None) -> Callable[[str], None]:
    """{tmp}/c.yaml (the tune configuration, or ``make``'s) with ``key: value`` added at the
    end as well: a key given twice."""
    def setup(tmp: str) -> None:
        (make or tune_cfg())(tmp)
        with open(os.path.join(tmp, "c.yaml"), "a") as f:
            f.write(f"{key}: {json.dumps(value)}\n")
    return setup


def an_existing_dataset(tmp: str) -> None:
    for name in ("exp.json", "exp.csv.xz"):
        Path(tmp, name).write_text("an earlier dataset\n")


def _ok_row(lines: list[str]) -> int:
    """The first data row of status ok."""
    i = lines[0].split(",").index("status")
    return next(r for r in range(1, len(lines)) if lines[r].split(",")[i] == "ok")


def tflops_store(value: str, name: str = "s.db") -> Callable[[str], None]:
    """{tmp}/s.db (:func:`_store`) whose row 3 holds ``value`` (SQL) as its TFLOPS: a store
    edited by another program, which no writer of bocast would have written."""
    def setup(tmp: str) -> None:
        conn = sqlite3.connect(_store(tmp, name))
        with conn:
            conn.execute(f"UPDATE measurements SET tflops = {value} WHERE id = 3")
        conn.close()
    return setup


def picks_file(text: str) -> Callable[[str], None]:
    """{tmp}/p.json holding ``text``: a --picks file of bocast remeasure, or not."""
    return lambda tmp: Path(tmp, "p.json").write_text(text)


def _bomb(flow: bool = False) -> str:
    """YAML of 9 anchors each a list of 9 aliases of the one before: a few hundred bytes that
    expand to 9^9 (387 million) items (a billion laughs), block style (a mapping's fields,
    indented 2) or one flow list."""
    items = [("a", ", ".join(['"lol"'] * 9))]
    items += [(chr(ord("a") + i), ", ".join([f"*{chr(ord('a') + i - 1)}"] * 9))
              for i in range(1, 9)]
    if flow:
        return "[" + ", ".join(f"&{k} [{v}]" for k, v in items) + "]"
    return "".join(f"  {k}: &{k} [{v}]\n" for k, v in items)


def tune_yaml(text: str) -> Callable[[str], None]:
    """{tmp}/c.yaml: the tune configuration with ``text`` (YAML) after it."""
    def setup(tmp: str) -> None:
        tune_cfg()(tmp)
        with open(os.path.join(tmp, "c.yaml"), "a") as f:
            f.write(text)
    return setup


TUNE_ARGV = ["tune", "{tmp}/c.yaml"]
CMP_ARGV = ["compare", "{tmp}/c.yaml"]
# space v2 named: OP --shape alone lets the shape choose (space auto: v3 at 64^3)
MEASURE = ["measure", "gemm", "--shape", "64,64,64", "--space", "v2", "--sample", "4",
           "--runner", "standin", "--store", "{tmp}/new.db"]
NO_SAMPLE = MEASURE[:6] + MEASURE[8:]  # MEASURE without --sample 4
MEASURE_SUB = ["measure", "--subspace", "{tmp}/sub.yaml", "--runner", "standin", "--store",
               "{tmp}/new.db"]


def cases() -> list[Case]:
    c: list[Case] = []

    def opt(name, argv, expect, **kw):
        c.append(Case(name, argv, expect, group="option", **kw))

    # --- options of the space and measure commands
    opt("extent far beyond 2^31", ["space", "gemm", "--shape", "99999999999,1024,1024"],
        "is not an integer between 0 and 2147483647")
    opt("extent 2^31", ["space", "gemm", "--shape", "2147483648,1024,1024"],
        "is not an integer between 0 and 2147483647")
    opt("extent 2^31 - 1 (tensor too large)", ["space", "gemm", "--shape", "2147483647,1024,1024"],
        "would have 2,199,023,254,528 elements")
    opt("conv3d whose matmul overflows",
        ["space", "conv3d", "--shape", "2147483647,2147483647,2147483647,2147483647,64,64,3,3,3"],
        "the matmul's A")
    opt("empty --shape", ["space", "gemm", "--shape", ""], "expected comma-separated integers")
    opt("--shape 1,1,1 (one output element)", ["space", "gemm", "--shape", "1,1,1"],
        "one output element per batch")
    opt("--shape of words", ["space", "gemm", "--shape", "a,b,c"],
        "is not a comma-separated list of integers")
    opt("--shape with 2 extents", ["space", "gemm", "--shape", "1024,1024"],
        "gemm: shape needs 3 extents")
    opt("negative extent", ["space", "gemm", "--shape=-5,1024,1024"],
        "is not an integer between 0 and")
    opt("zero extent", ["space", "gemm", "--shape", "0,1024,1024"], "M must be a positive integer")
    opt("conv2d shape too short", ["space", "conv2d", "--shape", "16,14,14,256"],
        "conv2d: shape needs 7 to 10 extents")
    opt("unknown dtype", ["space", "gemm", "--dtype", "int8"], "dtype 'int8' not supported")
    opt("unknown layout", ["space", "gemm", "--layout", "TT"], "layout 'TT' not supported")
    opt("unknown fuse", ["space", "gemm", "--fuse", "bias+tanh"], "fuse 'bias+tanh' not known")
    opt("fuse on space v2", ["space", "gemm", "--fuse", "gelu", "--space", "v2"],
        "fuse 'gelu' needs space v3")
    opt("unknown space", ["space", "gemm", "--space", "v9"], "space 'v9' not known")
    opt("unknown operator", ["space", "gemmm"], "unknown operator 'gemmm'")
    opt("--sample -1", ["space", "gemm", "--sample", "-1"],
        "argument --sample: expected an integer between 0 and 1000000")
    opt("--sample 10^7", ["space", "gemm", "--sample", "10000000"],
        "argument --sample: expected an integer between 0 and 1000000")
    opt("--sample x", ["space", "gemm", "--sample", "x"], "argument --sample: expected an integer")
    opt("--seed -1", ["space", "gemm", "--seed", "-1"], "argument --seed: expected an integer")
    opt("--size-draws 0", ["space", "gemm", "--size", "--size-draws", "0"],
        "argument --size-draws: expected an integer between 1")
    opt("--workers 0", ["space", "gemm", "--workers", "0"], "argument --workers: expected")
    opt("--workers -1", ["space", "gemm", "--workers", "-1"], "argument --workers: expected")
    opt("--build-timeout 0", ["space", "gemm", "--build-timeout", "0"],
        "argument --build-timeout: expected a number > 0")
    opt("--build-timeout nan", ["space", "gemm", "--build-timeout", "nan"],
        "argument --build-timeout: expected a number > 0")
    opt("--out in a read-only location", ["space", "gemm", "--sample", "3", "--out",
                                          UNWRITABLE + "/x.jsonl"], "--out: cannot")
    opt("--out under a file", ["space", "gemm", "--sample", "3", "--out", "{tmp}/file.txt/x.jsonl"],
        "is a file, not a folder", setup=a_file)
    opt("--out-builds without --check-build", ["space", "gemm", "--out-builds", "{tmp}/x.jsonl"],
        "--out-builds: the build results come from --check-build")
    opt("measure --batch 0", MEASURE + ["--batch", "0"], "argument --batch: expected an integer")
    opt("measure --progress-every 0", MEASURE + ["--progress-every", "0"],
        "argument --progress-every: expected an integer between 1")
    opt("measure --sample 0", ["measure", "gemm", "--sample", "0", "--runner", "standin",
                               "--store", "{tmp}/new.db"],
        "argument --sample: expected an integer between 1")
    opt("measure --repeats 0", MEASURE + ["--repeats", "0"], "argument --repeats: expected")
    opt("measure --run-timeout 0", MEASURE + ["--run-timeout", "0"],
        "argument --run-timeout: expected a number > 0")
    opt("measure --runner fpga", MEASURE + ["--runner", "fpga"],
        "runner: expected one of ['local', 'rpc', 'replay', 'standin']")
    opt("measure --workers -1", MEASURE + ["--workers", "-1"], "argument --workers: expected")
    opt("measure without --store", MEASURE[:-2], "the following arguments are required: --store")
    opt("measure --reject-spills yes", MEASURE + ["--reject-spills=yes"],
        "argument --reject-spills: ignored explicit argument 'yes'")
    opt("space --reject-spills 1", ["space", "gemm", "--reject-spills=1"],
        "argument --reject-spills: ignored explicit argument '1'")
    opt("measure --max-seconds 0", MEASURE + ["--max-seconds", "0"],
        "argument --max-seconds: expected a number > 0")
    opt("measure --max-seconds soon", MEASURE + ["--max-seconds", "soon"],
        "argument --max-seconds: expected a number > 0")
    opt("measure --max-seconds inf", MEASURE + ["--max-seconds", "inf"],
        "argument --max-seconds: expected a number > 0")
    opt("measure without --sample or --all", NO_SAMPLE,
        "give --sample N (a uniform sample), or --all / --subspace FILE")
    opt("measure --sample and --all", MEASURE + ["--all"],
        "give --sample N (a uniform sample), or --all / --subspace FILE")
    opt("measure --sample --fix of an empty sub-space", MEASURE + [
        "--fix", "stages=1", "--fix", "async_copy=on"],
        "--fix: no feasible configuration of gemm [64, 64, 64] with stages=1, async_copy=on in "
        "200,000 draws")
    opt("measure --fix of an unknown knob", NO_SAMPLE + ["--all", "--fix",
                                                                          "stagez=2"],
        "--fix: unknown knob 'stagez'")
    opt("measure --fix of a value the knob lacks", NO_SAMPLE + [
        "--all", "--fix", "stages=9"], "--fix 'stages=9': not a value of stages")
    opt("measure --fix without a value", NO_SAMPLE + ["--all", "--fix", "stages"],
        "--fix 'stages': expected KNOB=VALUE")
    opt("measure --fix split of words", NO_SAMPLE + [
        "--all", "--fix", "tile_k=a,b"], "a split's value is its factors")
    opt("measure --all of a space too large to enumerate",
        ["measure", "gemm", "--space", "v2", "--all", "--runner", "standin", "--store",
         "{tmp}/new.db"],
        "more than the 200,000,000 an enumeration may visit: fix more knobs")
    opt("space --fix of a value the knob lacks", ["space", "gemm", "--fix", "stages=9"],
        "--fix 'stages=9': not a value of stages")
    opt("measure --subspace with an operator", ["measure", "gemm", "--subspace", "{tmp}/sub.yaml",
                                                "--runner", "standin", "--store", "{tmp}/new.db"],
        "--subspace names its own workload: give no operator with it", setup=subspace_file())
    opt("measure --subspace and --fix", MEASURE_SUB + ["--fix", "stages=2"],
        "--fix and --subspace: put the fixed knobs in the file", setup=subspace_file())
    opt("measure --subspace and --sample", MEASURE_SUB + ["--sample", "3"],
        "give --sample N (a uniform sample), or --all / --subspace FILE", setup=subspace_file())

    def fil(name, argv, expect, **kw):
        c.append(Case(name, argv, expect, group="file", **kw))

    # --- record stores and output locations
    fil("store is a folder", MEASURE[:-1] + ["{tmp}/sub"], "--store: {tmp}/sub is a folder",
        setup=lambda t: os.mkdir(os.path.join(t, "sub")))
    fil("store damaged mid-file", MEASURE[:-1] + ["{tmp}/s.db"], "is damaged (SQLite quick_check",
        setup=damaged_store)
    fil("store not SQLite", MEASURE[:-1] + ["{tmp}/s.db"], "is not a bocast record store",
        setup=garbage_store)
    fil("store of another workload", MEASURE[:-1] + ["{tmp}/s.db"], "holds records of workload",
        setup=lambda t: _store(t, workload={"op": "gemm", "shape": [128, 64, 64]}))
    fil("store of another program", MEASURE[:-1] + ["{tmp}/s.db"], "is not a bocast record store",
        setup=foreign_sqlite)
    fil("store in a read-only location", MEASURE[:-1] + [UNWRITABLE + "/s.db"], "--store: cannot")
    fil("--export in a read-only location", MEASURE + ["--export", UNWRITABLE + "/exp"],
        "--export: cannot")
    fil("tune: output under a file", TUNE_ARGV, "output: cannot create",
        setup=lambda t: (a_file(t), tune_cfg(output="{tmp}/file.txt/out")(t)))
    fil("tune: output in a read-only location", TUNE_ARGV, "output: cannot",
        setup=tune_cfg(output=UNWRITABLE + "/out"))
    fil("tune: records.db damaged", TUNE_ARGV, "is damaged (SQLite quick_check",
        setup=lambda t: (os.makedirs(os.path.join(t, "out")), damaged_store(t, "out/records.db"),
                         tune_cfg()(t)))
    fil("tune: output holds another configuration's run", TUNE_ARGV,
        "holds a run of another configuration", setup=other_tune_store)
    fil("compare: results in a read-only location", CMP_ARGV, "results: cannot",
        setup=compare_cfg(results=UNWRITABLE + "/r"))
    fil("compare: output holds another configuration's run", CMP_ARGV,
        "holds a run of another configuration", setup=other_run_store)
    # --- outputs that are inputs, or another output, or exist
    fil("compare: results are the dataset's prefix", CMP_ARGV,
        "results: {tmp}/ds.json is also the dataset, which it would overwrite",
        setup=dataset_and_compare(results="{tmp}/ds"))
    fil("compare: results are the configuration", ["compare", "{tmp}/c.json"],
        "results: {tmp}/c.json is also the configuration file",
        setup=lambda t: (compare_cfg(results="{tmp}/c")(t),
                         os.rename(os.path.join(t, "c.yaml"), os.path.join(t, "c.json"))))
    fil("measure --export over an existing dataset", MEASURE + ["--export", "{tmp}/exp"],
        "--export: {tmp}/exp.json exists; give --force to replace it",
        setup=an_existing_dataset)
    fil("measure --export onto its --store", MEASURE[:-1] + ["{tmp}/d.json", "--export",
                                                               "{tmp}/d", "--force"],
        "--export: {tmp}/d.json is also the --store, which it would overwrite")
    fil("measure --export onto its --subspace file",
        [a.replace("sub.yaml", "sub.json") for a in MEASURE_SUB] + ["--export", "{tmp}/sub",
                                                                     "--force"],
        "--export: {tmp}/sub.json is also the --subspace file",
        setup=lambda t: (subspace_file()(t), os.rename(os.path.join(t, "sub.yaml"),
                                                       os.path.join(t, "sub.json"))))
    fil("space --out and --out-builds one file", ["space", "gemm", "--sample", "3", "--out",
                                                  "{tmp}/x.jsonl", "--out-builds",
                                                  "{tmp}/x.jsonl", "--check-build"],
        "--out-builds: {tmp}/x.jsonl is also the --out; give each output its own path")
    fil("space --out over an existing file", ["space", "gemm", "--sample", "3", "--out",
                                              "{tmp}/file.txt"],
        "--out: {tmp}/file.txt exists; give --force to replace it", setup=a_file)
    fil("space --out onto its --subspace file, even with --force",
        ["space", "--subspace", "{tmp}/sub.yaml", "--sample", "3", "--out", "{tmp}/sub.yaml",
         "--force"], "--out: {tmp}/sub.yaml is also the --subspace file", setup=subspace_file())

    # --- refused stores, read only: nothing created beside them (no -wal, -shm)
    fil("export of a damaged store", ["export", "{tmp}/s.db", "--best", "--out", "{tmp}/out"],
        "is damaged (SQLite quick_check", setup=damaged_store)
    fil("export of another program's SQLite file", ["export", "{tmp}/s.db", "--best", "--out",
                                                    "{tmp}/out"],
        "is not a bocast record store", setup=foreign_sqlite)

    fil("report of a damaged store", ["report", "{tmp}/s.db"], "is damaged (SQLite quick_check",
        setup=damaged_store)
    fil("report of another program's SQLite file", ["report", "{tmp}/s.db"],
        "is not a bocast record store", setup=foreign_sqlite)
    fil("report --out over an existing file", ["report", "{tmp}/s.db", "--out", "{tmp}/file"],
        "out: {tmp}/file.md exists; give force=True (--force) to replace it",
        setup=lambda t: (_store(t), Path(t, "file.md").write_text("mine\n")))
    fil("report --out onto a store it reads, even with --force",
        ["report", "{tmp}/s.md", "--out", "{tmp}/s", "--force"],
        "out: {tmp}/s.md is also the record store, which it would overwrite",
        setup=lambda t: _store(t, "s.md"))

    fil("report of an empty store", ["report", "{tmp}/s.db"],
        "{tmp}/s.db holds no records: nothing to report", setup=lambda t: _store(t, rows=0))
    fil("report --within beyond the longest run", ["report", "{tmp}/s.db", "--within",
                                                   "10000000"],
        "within: 10000000 trials is more than the longest run's 120", setup=_store)
    fil("report --seeds repeated", ["report", "{tmp}/s.db", "--seeds", "0", "0"],
        "seeds: [0] given more than once", setup=_store)

    # --- the records library: a store no writer of bocast would write is not copied in
    number = "tflops: expected None or a number >= 0, got"
    for what, value, says in (("text", "'fast'", "could not convert string to float: 'fast'"),
                              ("negative", "-5.0", f"{number} -5.0"),
                              ("infinite", "9e999", f"{number} inf")):
        fil(f"records add of a store with {what} TFLOPS",
            ["records", "add", "{tmp}/s.db", "--records", "{tmp}/lib"],
            f"records add: {{tmp}}/s.db: row 3 cannot be read ({says})", setup=tflops_store(value))

    # --- remeasure: its outputs, its picks file, the machine
    remeasure = ["remeasure", "{tmp}/s.db", "--runner", "standin"]
    fil("remeasure --picks onto its store", remeasure + ["--picks", "{tmp}/s.db"],
        "--picks: {tmp}/s.db is also the record store, which it would overwrite", setup=_store)
    fil("remeasure --out onto its store", remeasure + ["--out", "{tmp}/s.db"],
        "--out: {tmp}/s.db is also the record store, which it would overwrite", setup=_store)
    fil("remeasure --out over an existing file", remeasure + ["--out", "{tmp}/file.txt"],
        "--out: {tmp}/file.txt exists; give --force to replace it",
        setup=lambda t: (_store(t), a_file(t)))
    fil("remeasure --out and --picks one file", remeasure + ["--out", "{tmp}/p.json",
                                                             "--picks", "{tmp}/p.json"],
        "--out: {tmp}/p.json is also the --picks", setup=_store)
    fil("remeasure of a picks file not JSON", ["remeasure", "{tmp}/p.json", "--runner", "standin"],
        "{tmp}/p.json: not a --picks file of bocast remeasure (JSONDecodeError",
        setup=picks_file("garbage\n"))
    fil("remeasure of a picks file of the wrong shape",
        ["remeasure", "{tmp}/p.json", "--runner", "standin"],
        "not a --picks file of bocast remeasure (kernels[0]: expected key (text), config",
        setup=picks_file('{"workload": {"op": "gemm"}, "kernels": [{"key": "a"}]}'))
    fil("remeasure of a picks file whose configuration is not one",
        ["remeasure", "{tmp}/p.json", "--runner", "standin"],
        "not a --picks file of bocast remeasure (kernels[0]:",
        setup=picks_file(json.dumps({"workload": SUB_WORKLOAD, "kernels": [
            {"key": "k", "config": {**SUB_FIX, "stages": 99}, "recorded_tflops": 1.0}]})))

    # --- keys given twice (YAML keeps the last without a word)
    fil("tune: budget given twice", TUNE_ARGV, "line 19, column 1: key 'budget' given twice "
        "(first at line 2)", setup=twice("budget", {"trials": 48}))
    fil("compare: seeds given twice", CMP_ARGV, "key 'seeds' given twice",
        setup=twice("seeds", 5, compare_cfg()))
    fil("--subspace file fixes a knob twice", MEASURE_SUB, "key 'stages' given twice",
        setup=lambda t: Path(t, "sub.yaml").write_text(
            "workload: {op: gemm, shape: [64, 64, 64]}\nfix: {stages: 2, stages: 3}\n"))
    fil("configuration file missing", ["tune", "{tmp}/none.yaml"], "none.yaml: no such file")
    fil("--subspace file missing", MEASURE_SUB, "--subspace: {tmp}/sub.yaml: no such file")
    fil("space --subspace file missing", ["space", "--subspace", "{tmp}/sub.yaml"],
        "--subspace: {tmp}/sub.yaml: no such file")
    fil("--subspace file not YAML", MEASURE_SUB, "--subspace: {tmp}/sub.yaml: not valid YAML",
        setup=lambda t: Path(t, "sub.yaml").write_text("fix: [unclosed\n"))
    fil("--subspace file without fix", MEASURE_SUB, "--subspace: sub.yaml: fix: missing",
        setup=subspace_file(fix=DROP))
    fil("--subspace file fixes an unknown knob", MEASURE_SUB,
        "--subspace: sub.yaml: fix: unknown knob 'stagez'",
        setup=subspace_file(fix={**SUB_FIX, "stagez": 2}))
    fil("--subspace file with a bare on (YAML boolean)", MEASURE_SUB, "quote it",
        setup=subspace_file(fix={**SUB_FIX, "async_copy": True}))
    fil("--subspace file of an unknown operator", MEASURE_SUB,
        "--subspace: sub.yaml: workload: unknown operator 'gemmm'",
        setup=subspace_file(workload={**SUB_WORKLOAD, "op": "gemmm"}))
    fil("--subspace file states another size", MEASURE_SUB,
        "the sub-space has 3 feasible configurations, the file says 5",
        setup=subspace_file(feasible=5))
    fil("--subspace feasible 'many'", MEASURE_SUB, "feasible: expected an integer, got 'many'",
        setup=subspace_file(feasible="many"))
    fil("store holds another sub-space's table", MEASURE_SUB[:-1] + ["{tmp}/s.db"],
        "holds the table of another sub-space", setup=other_subspace_store)
    fil("configuration not YAML", TUNE_ARGV, "not valid YAML",
        setup=lambda t: Path(t, "c.yaml").write_text("workload: [unclosed\n"))
    fil("configuration is a folder", ["tune", "{tmp}"], "is a folder, not a configuration file")
    # --- configurations past the limits of bocast.run.config (a run would hang, or crash)
    for section in ("rpc", "runner_options", "description"):
        fil(f"configuration's {section} a billion laughs", TUNE_ARGV,
            "column 6: more than 50,000 items once its aliases are expanded)",
            setup=tune_yaml(f"{section}:\n{_bomb()}"))
    fil("configuration nested 900 deep", TUNE_ARGV, "nested deeper than 32 levels",
        setup=tune_yaml("description: " + "[" * 900 + "]" * 900 + "\n"))
    fil("configuration of 100,000 keys (1.5 MB)", TUNE_ARGV,
        "bytes, more than the 65,536 a configuration file may have",
        setup=tune_yaml("description:\n" + "".join(f"  k{i}: {i}\n" for i in range(100_000))))
    fil("configuration is a FIFO", ["tune", "{tmp}/fifo"],
        "{tmp}/fifo: not a regular file (a pipe or a device?)",
        setup=lambda t: os.mkfifo(os.path.join(t, "fifo")))
    fil("an alias inside its own anchor", TUNE_ARGV, "an alias inside its own anchor",
        setup=tune_yaml("description: &d [1, *d]\n"))
    fil("configuration is a list", TUNE_ARGV, "expected a mapping of fields",
        setup=lambda t: _yaml(os.path.join(t, "c.yaml"), [1, 2]))

    # --- datasets
    fil("dataset missing", TUNE_ARGV, "ds.json not found", setup=tune_cfg(dataset="{tmp}/ds"))
    fil("dataset of another workload", TUNE_ARGV, "was recorded for workload",
        setup=dataset(edit_meta=lambda m: {**m, "workload": {**m["workload"],
                                                             "shape": [64, 64, 64]}}))
    fil("dataset .csv.xz not xz", TUNE_ARGV, "ds.csv.xz: cannot be read",
        setup=dataset(raw_bytes=lambda b: b"not xz at all" * 100))
    fil("dataset .csv.xz truncated", TUNE_ARGV, "ds.csv.xz: cannot be read",
        setup=dataset(raw_bytes=lambda b: b[: len(b) // 2]))
    fil("dataset missing a column", TUNE_ARGV, "missing column(s) ['tflops']",
        setup=dataset(edit_rows=lambda rows: _drop_column(rows, "tflops")))
    fil("dataset bad status at row 218", TUNE_ARGV,
        "ds.csv.xz row 218: status 'okay' is not one of",
        setup=dataset(edit_rows=lambda rows: _cell(rows, 218, "status", "okay")))
    fil("dataset tflops not a number", TUNE_ARGV, "row 7: tflops 'fast' is not a number",
        setup=dataset(edit_rows=lambda rows: _cell(rows, 7, "tflops", "fast")))
    fil("dataset ok row without tflops", TUNE_ARGV, "row 9: tflops: status ok needs tflops > 0",
        setup=dataset(edit_rows=lambda rows: _cell(rows, 9, "tflops", "")))
    fil("dataset knob value not an integer", TUNE_ARGV, "row 3: knob vec: 2.5 is not an integer",
        setup=dataset(edit_rows=lambda rows: _cell(rows, 3, "vec", "2.5")))
    fil("dataset knob value outside the space", TUNE_ARGV, "row 5: not a configuration",
        setup=dataset(edit_rows=lambda rows: _cell(rows, 5, "vec", "3")))
    fil("dataset row repeated", TUNE_ARGV, "row 500: the configuration of row 1 again",
        setup=dataset(edit_rows=lambda rows: rows[:-1] + [rows[1]]))
    fil("dataset rows cut at a line (recompressed)", TUNE_ARGV, "300 rows, but its .json says 500",
        setup=dataset(edit_rows=lambda rows: rows[:301]))
    fil("dataset ok row of 1e300 TFLOPS", TUNE_ARGV, "ds.csv.xz row 2: tflops: 1e+300 is "
        "impossible (above 10,000", setup=dataset(edit_rows=lambda rows: _cell(
            _cell(rows, 2, "status", "ok"), 2, "tflops", "1e300")))
    fil("dataset build_error row with TFLOPS", TUNE_ARGV, "row 4: tflops: status build_error is "
        "a failure and has no TFLOPS, got 10.0", setup=dataset(edit_rows=lambda rows: _cell(
            _cell(rows, 4, "status", "build_error"), 4, "tflops", "10")))
    fil("dataset negative latency", TUNE_ARGV, "row 6: latency_ms: expected None or a number > 0",
        setup=dataset(edit_rows=lambda rows: _cell(rows, 6, "latency_ms", "-0.5")))
    fil("dataset ok row of inf TFLOPS", TUNE_ARGV,
        "tflops: expected None or a number >= 0, got inf",
        setup=dataset(edit_rows=lambda rows: _cell(rows, _ok_row(rows), "tflops", "inf")))
    fil("dataset .json corrupt", TUNE_ARGV, "ds.json: not readable JSON",
        setup=dataset(edit_meta=lambda m: json.dumps(m)[:100]))
    fil("dataset .json without knob_columns", TUNE_ARGV, "knob_columns missing",
        setup=dataset(edit_meta=lambda m: {k: v for k, v in m.items() if k != "knob_columns"}))

    def cfg(name, setup, expect, argv=TUNE_ARGV, **kw):
        c.append(Case(name, argv, expect, setup=setup, group="config", **kw))

    # --- tune configurations
    cfg("tune: seed missing", tune_cfg(seed=DROP), "seed: missing")
    cfg("tune: seed 'zero'", tune_cfg(seed="zero"), "seed: expected an integer")
    cfg("tune: seed -1", tune_cfg(seed=-1), "seed: expected an integer between 0")
    cfg("tune: unknown field", tune_cfg(budgett={"trials": 3}), "unknown field(s) ['budgett']")
    cfg("tune: budget.trials 0", tune_cfg(budget={"trials": 0}), "budget.trials: expected")
    cfg("tune: budget.seconds 0", tune_cfg(budget={"trials": 8, "seconds": 0}),
        "budget.seconds: expected a number > 0")
    cfg("tune: batch_size 0", tune_cfg(batch_size=0), "batch_size: expected an integer between 1")
    cfg("tune: unknown strategy", tune_cfg(strategy={"name": "annealing"}),
        "strategy.name: unknown strategy 'annealing'")
    cfg("tune: pool_size 'big'", tune_cfg(strategy={"name": "bo", "pool_size": "big"}),
        "strategy.pool_size: expected an integer")
    cfg("tune: n_init -3", tune_cfg(strategy={"name": "bo", "n_init": -3}),
        "strategy.n_init: expected an integer between 1")
    cfg("tune: unknown strategy option", tune_cfg(strategy={"name": "bo", "learning_rate": 1}),
        "unknown option(s) ['learning_rate']")
    cfg("tune: runner fpga", tune_cfg(runner="fpga"),
        "runner: expected one of ['local', 'rpc', 'replay', 'standin']")
    cfg("tune: runner local on a machine without GPU", tune_cfg(runner="local"),
        "needs a CUDA GPU")
    cfg("tune: runner_options.workers -1", tune_cfg(runner_options={"workers": -1}),
        "runner_options.workers: expected")
    cfg("tune: runner_options.run_timeout 0", tune_cfg(runner_options={"run_timeout": 0}),
        "runner_options.run_timeout: expected a number > 0")
    cfg("tune: runner_options.reject_spills 3", tune_cfg(runner_options={"reject_spills": 3}),
        "runner_options.reject_spills: expected true or false, got 3")
    cfg("tune: runner_options.reject_spills 'yes'",
        tune_cfg(runner_options={"reject_spills": "yes"}),
        "runner_options.reject_spills: expected true or false, got 'yes'")
    cfg("tune: bo local_search -1", tune_cfg(strategy={"name": "bo", "local_search": -1}),
        "strategy.local_search: expected an integer between 0 and")
    cfg("tune: bo local_search 2.5", tune_cfg(strategy={"name": "bo", "local_search": 2.5}),
        "strategy.local_search: expected an integer between 0 and")
    cfg("tune: bo local_search_steps 0", tune_cfg(strategy={"name": "bo", "local_search_steps": 0}),
        "strategy.local_search_steps: expected an integer between 1 and")
    cfg("tune: bo features foo", tune_cfg(strategy={"name": "bo", "features": "foo"}),
        "strategy.features: expected one of ['knobs', 'derived'], got 'foo'")
    cfg("tune: cga features foo", tune_cfg(strategy={"name": "cga", "features": "foo"}),
        "strategy.features: expected one of ['knobs', 'derived'], got 'foo'")
    cfg("tune: strategy batch_size", tune_cfg(strategy={"name": "bo", "batch_size": 8}),
        "strategy: ['batch_size'] belong to comparisons, not to one run")
    cfg("tune: workload extent 2^31", tune_cfg(workload={**WORKLOAD, "shape": [2**31, 8, 8]}),
        "is not an integer between 0 and 2147483647")
    cfg("tune: workload not a mapping", tune_cfg(workload="gemm"), "workload: expected a mapping")
    cfg("tune: workload shape a string", tune_cfg(workload={"op": "gemm", "shape": "1,2,3"}),
        "shape: expected a list of integers")
    cfg("tune: replay without a dataset", tune_cfg(dataset=DROP), "the replay runner needs")
    cfg("tune: --tracker and --key on replay", tune_cfg(),
        "rpc (key, tracker): only for runner rpc; this run's runner is replay",
        argv=TUNE_ARGV + ["--tracker", "127.0.0.1:9", "--key", "h100"])
    cfg("tune: warm start from its own replay dataset",
        tune_cfg(strategy={"name": "bo", "warm_start": [os.path.join(DATA, DATASET)]}),
        f"strategy.warm_start: {os.path.join(DATA, DATASET)} is this run's own dataset: its "
        "answers would leak into the search")
    cfg("tune: fix of an unknown knob", tune_cfg(fix={"nope": 1}), "fix: unknown knob 'nope'")
    cfg("tune: fix of a value the knob lacks", tune_cfg(fix={"vec": 3}),
        "fix: vec: 3 is not a value of this knob")
    cfg("tune: fix of a sub-space the dataset lacks",
        tune_cfg(fix={"wmma": "16x16x16", "vec": 1, "a_pad": 0, "b_pad": 0, "c_pad": 0,
                      "out_vec": 2}), "fix: no feasible configuration of the workload inside it")
    cfg("tune CONFIG: --fix", tune_cfg(), "--fix: only with an operator",
        argv=TUNE_ARGV + ["--fix", "vec=8"])
    cfg("tune OP: --runner and --set runner", None, "--set runner: given already (--runner)",
        argv=["tune", "gemm", "--shape", "64,64,64", "--runner", "replay", "--set",
              "runner=standin", "--set", "output={tmp}/out"])
    cfg("tune OP: --trials and --set budget.trials", None,
        "--set budget.trials: given already (--trials)",
        argv=["tune", "gemm", "--shape", "64,64,64", "--trials", "8", "--set", "budget.trials=9",
              "--set", "output={tmp}/out"])
    cfg("tune OP: --set strategy.warm_start a billion laughs", None,
        "--set strategy.warm_start: more than 50,000 items once its aliases are expanded",
        argv=["tune", "gemm", "--set", "strategy.warm_start=" + _bomb(flow=True), "--set",
              "output={tmp}/out"])
    quick = ["tune", "gemm", "--shape", "64,64,64", "--runner", "standin", "--set",
             "output={tmp}/out"]
    cfg("tune OP: --records a file", a_file, "records: {tmp}/file.txt is a file, not the records "
        "library's folder", argv=quick + ["--records", "{tmp}/file.txt"])
    cfg("tune OP: --records empty", None, "records: an empty path", argv=quick + ["--records", ""])
    for flag in ("--store", "--dataset", "--warm-start"):
        key = flag[2:].replace("-", "_")
        cfg(f"tune OP: {flag} empty", None, f"{key}: empty; leave it out for its default",
            argv=quick + [flag, ""])
    cfg("tune OP: --dataset on the stand-in", None,
        "dataset: only for runner replay; this run's runner is standin",
        argv=quick + ["--dataset", os.path.join(DATA, DATASET)])
    cfg("tune OP: --warm-start a store that is not there", None,
        "strategy.warm_start: record store {tmp}/none.db not found",
        argv=quick + ["--warm-start", "{tmp}/none.db"])
    cfg("tune OP: --set output empty", None, "output: empty; leave it out for its default",
        argv=quick[:-2] + ["--set", "output="])
    cfg("tune OP: --set rpc on the stand-in", None,
        "rpc: only for runner rpc; this run's runner is standin",
        argv=quick + ["--set", "rpc={tracker: '127.0.0.1:9'}"])
    cfg("tune OP: --fix of a value the knob lacks", None, "--fix 'stages=9': not a value of "
        "stages", argv=quick + ["--fix", "stages=9"])
    cfg("tune OP: --fix and --set fix", None, "--fix and --set fix: give the sub-space one way",
        argv=quick + ["--fix", "stages=2", "--set", "fix={stages: 2}"])
    cfg("tune OP: --fix with many shapes", None, "--fix: one workload's sub-space",
        argv=["tune", "gemm", "--shape", "64,64,64", "--shape", "64,64,128", "--runner",
              "standin", "--fix", "stages=2", "--output", "{tmp}/out"])
    cfg("tune OP: --set shape", None, "--set shape: the operator and --shape name the workload",
        argv=["tune", "gemm", "--set", "shape=[1,2,3]", "--set", "output={tmp}/out"])

    # --- compare configurations
    cfg("compare: seeds [0, 0, 1]", compare_cfg(seeds=[0, 0, 1]), "repeats [0]", argv=CMP_ARGV)
    cfg("compare: seeds 0", compare_cfg(seeds=0), "seeds: expected a number of seeds",
        argv=CMP_ARGV)
    cfg("compare: workers -1", compare_cfg(workers=-1), "workers: expected an integer between 1",
        argv=CMP_ARGV)
    cfg("compare: no strategies", compare_cfg(strategies=[]), "strategies: expected a non-empty",
        argv=CMP_ARGV)
    cfg("compare: label with a slash", compare_cfg(strategies=[{"label": "a/b", "name": "ga"}]),
        "strategies[0].label: expected a string of letters", argv=CMP_ARGV)
    cfg("compare: labels repeated", compare_cfg(strategies=[{"name": "ga"}, {"name": "ga"}]),
        "labels must be distinct", argv=CMP_ARGV)
    cfg("compare: unknown baseline", compare_cfg(baseline="sa"), "baseline: 'sa' is not one of",
        argv=CMP_ARGV)
    cfg("compare: budgets beyond the budget", compare_cfg(budgets=[16, 64]),
        "budgets: expected distinct integers between 1 and budget.trials (32)", argv=CMP_ARGV)
    cfg("compare: metaschedule on replay",
        compare_cfg(strategies=[{"name": "ga"}, {"name": "metaschedule"}]),
        "metaschedule proposes its own schedules", argv=CMP_ARGV)
    cfg("compare: pool_size 'big'",
        compare_cfg(strategies=[{"label": "bo", "name": "bo", "pool_size": "big"}]),
        "strategies[0] (bo): pool_size: expected an integer", argv=CMP_ARGV)
    cfg("compare: strategy trials below the budget",
        compare_cfg(strategies=[{"name": "ga", "trials": 8}]),
        "strategies[0].trials: 8 is less than budget.trials", argv=CMP_ARGV)
    cfg("compare: strategy batch_size 0",
        compare_cfg(strategies=[{"label": "bo", "name": "bo", "batch_size": 0}]),
        "strategies[0].batch_size: expected an integer between 1 and 10000", argv=CMP_ARGV)
    cfg("compare: strategy batch_size 'eight'",
        compare_cfg(strategies=[{"label": "bo", "name": "bo", "batch_size": "eight"}]),
        "strategies[0].batch_size: expected an integer between 1 and 10000", argv=CMP_ARGV)
    cfg("compare: bo local_search -1",
        compare_cfg(strategies=[{"label": "bo", "name": "bo", "local_search": -1}]),
        "strategies[0] (bo): local_search: expected an integer between 0 and", argv=CMP_ARGV)
    cfg("compare: cga features foo",
        compare_cfg(strategies=[{"label": "cga", "name": "cga", "features": "foo"}]),
        "strategies[0] (cga): features: expected one of ['knobs', 'derived']", argv=CMP_ARGV)
    cfg("compare: runner_options.reject_spills 3", compare_cfg(runner_options={"reject_spills": 3}),
        "runner_options.reject_spills: expected true or false, got 3", argv=CMP_ARGV)
    cfg("compare: live on a machine without GPU", compare_cfg(runner="local", dataset=DROP),
        "needs a CUDA GPU", argv=CMP_ARGV)
    cfg("compare: --only on replay", compare_cfg(), "only live comparisons are split",
        argv=CMP_ARGV + ["--only", "ga"])

    # --- the machine
    serve = ["serve", "--key", "h100", "--worker", "standin"]
    opt("serve --port-end below --port", serve + ["--port", "9100", "--port-end", "9050"],
        "--port-end 9050: the range from --port 9100 (the end not included) holds no port")
    opt("serve tracker --port-end at --port", ["serve", "tracker", "--port", "9195",
                                              "--port-end", "9195"],
        "--port-end 9195: the range from --port 9195")
    opt("serve --token SECRET (not --token-file)", serve + ["--token", "SECRET"],
        "--token: a token is never given on the command line")
    opt("serve --tok SECRET (an abbreviation)", serve + ["--tok", "SECRET"],
        "unrecognized argument(s) --tok; their values are not repeated")
    c.append(Case("remeasure --runner local (the default) without a GPU",
                  ["remeasure", "{tmp}/s.db", "--out", "{tmp}/r.json"], "needs a CUDA GPU",
                  setup=_store, group="machine"))
    c.append(Case("measure --runner local (the default) without a GPU",
                  ["measure", "gemm", "--sample", "5", "--store", "{tmp}/new.db"],
                  "needs a CUDA GPU", group="machine"))
    return c


# ------------------------------------------------------------------------------ running


def _files(tmp: str) -> dict[str, str]:
    """Every file under ``tmp`` (relative path: the SHA-256 of its bytes) and every folder
    (relative path and "/": "")."""
    out = {}
    for folder, dirs, names in os.walk(tmp):
        for name in dirs:
            out[os.path.relpath(os.path.join(folder, name), tmp) + "/"] = ""
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.isfile(path):  # a FIFO: opening it would wait for a writer
                out[os.path.relpath(path, tmp)] = "not a regular file"
                continue
            with open(path, "rb") as f:
                out[os.path.relpath(path, tmp)] = hashlib.sha256(f.read()).hexdigest()
    return out


@dataclass
class Outcome:
    case: str
    group: str
    command: str
    code: int
    stdout: str
    stderr: str
    seconds: float
    intact: bool
    created: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems


def run_case(case: Case, *, in_process: bool = False) -> Outcome:
    """Run one case in a fresh folder; ``in_process`` calls ``bocast.cli.main`` (tests)."""
    tmp = tempfile.mkdtemp(prefix="bocast-bad-")
    try:
        if case.setup is not None:
            case.setup(tmp)
        before = _files(tmp)
        argv = case.command(tmp)
        t0 = time.perf_counter()
        if in_process:
            code, out, err = _in_process(argv)
        else:
            proc = subprocess.run([sys.executable, "-m", "bocast.cli", *argv], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "PYTHONPATH": ROOT})
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        seconds = time.perf_counter() - t0
        after = _files(tmp)
        intact = all(after.get(p) == d for p, d in before.items())
        created = sorted(set(after) - set(before))  # a store's -wal and -shm, a folder...
        lines = err.strip().splitlines()
        problems = []
        if code != case.code:
            problems.append(f"exit {code}, expected {case.code}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr")
        elif case.expect.replace("{tmp}", tmp) not in lines[0]:
            problems.append("message does not name the problem")
        if "Traceback" in err:
            problems.append("traceback")
        if out.strip():
            problems.append("output on stdout")
        if not intact:
            problems.append("a file it was given changed")
        if created:
            problems.append(f"created {created}")
        return Outcome(case.name, case.group, "bocast " + " ".join(
            a.replace(tmp, "$TMP") for a in argv), code, out, err.replace(tmp, "$TMP"),
            seconds, intact, created, problems)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _in_process(argv: list[str]) -> tuple[int, str, str]:
    from bocast import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()
