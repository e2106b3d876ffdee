"""The records library (issue 26): every measurement counts twice.

The library is the shipped datasets (``experiments/data`` beside the package, exhaustive
tables included; read only) plus a folder of record stores, one per tuned run: a live
``bocast tune`` (runner local, rpc or standin), finished or interrupted, copies its store there
(:func:`add`; ``bocast records add`` does it by hand). The folder is, first that is set: the
``records`` argument (the API's, ``--records``), ``$BOCAST_RECORDS``, a tune configuration's
``records`` field, ``$XDG_CACHE_HOME/bocast/records`` (``~/.cache/bocast/records``).

A copy is named by its workload, GPU and the store's first row, so the same store added twice
is one file (replaced only when the store has grown: nothing is copied twice). A file there
that is not a sound bocast store (damaged, foreign) is skipped with one line, never fatal.

``warm_start: auto`` (:func:`resolve`) picks the sources of a run from the library:

- **Compatible**: the records of the same schedule (:func:`bocast.bo.transfer.incompatibility`:
  the same operator, or another on the same Tensor Core matmul; the same space version unless
  the knobs map one to one; the same dtypes and layout) measured on the run's GPU model.
  Records of other GPU models are left out and the run says so; where the run's GPU is not
  known before it starts (rpc without ``gpu_model``), every GPU's records count, named.
- **Never the run's own**: not its dataset, not its own store (nor the library's copy of it);
  a replay run takes only shipped datasets of *other* workloads (so the answer never leaks
  into the search, and a replay result depends on the repository alone, never on a machine's
  library).
- **Ranked** by closeness of the workload: the same operator first, then the distance of the
  matmuls' extents (sum of |log2| ratios of batch, M, N, K), then more ok rows; one source
  per workload (the one with most ok rows), at most :data:`MAX_SOURCES`; a source none of
  whose rows fits the target's extents is passed over for the next.

A resumed run keeps the sources its store's identity names (:mod:`bocast.identity`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bocast.errors import InputError

ENV = "BOCAST_RECORDS"
#: at most this many sources for ``warm_start: auto``
MAX_SOURCES = 3
#: the shipped datasets: the repository's, beside the package
SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "experiments", "data")
#: the repository the shipped datasets belong to: sources under it are named relative to it
ROOT = os.path.dirname(os.path.dirname(SHIPPED))
#: meta of a library copy: the absolute path of the store it was copied from
ORIGIN = "library_origin"


class LibraryError(InputError):
    """A records library operation that cannot be done (the message says why)."""


def directory(records: str | os.PathLike | None = None, config: str | None = None) -> str:
    """The library's folder: ``records`` (argument), else ``$BOCAST_RECORDS``, else a
    configuration's ``records``, else ``$XDG_CACHE_HOME/bocast/records``."""
    if records:
        return os.path.abspath(os.fspath(records))
    if os.environ.get(ENV):
        return os.path.abspath(os.environ[ENV])
    if config:
        return os.path.abspath(config)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "bocast", "records")


@dataclass
class Entry:
    """One set of records in the library: a shipped dataset (prefix) or a store (``.db``)."""

    path: str
    workload: dict[str, Any]
    gpu: str | None
    rows: int
    ok: int | None = None  # counted when read (a dataset's rows file is read for it)
    best: float | None = None
    shipped: bool = False
    origin: str | None = None  # a library copy: the store it was copied from
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return portable(self.path) if self.shipped else os.path.basename(self.path)

    def describe(self) -> dict[str, Any]:
        w = self.workload
        return {"name": self.name, "path": self.path, "op": w.get("op"),
                "shape": w.get("shape"), "space": w.get("space", "v1"), "gpu": self.gpu,
                "rows": self.rows, "ok": self.ok, "best_tflops": self.best,
                "shipped": self.shipped}


# ------------------------------------------------------------------------------ reading


def _store_entry(path: str, *, stats: bool) -> Entry:
    """The entry of a store, after the checks every command makes (StoreError if unsound)."""
    from bocast.store import _check_existing, _read_only

    workload = _check_existing(path)
    conn = _read_only(path)
    try:
        rows, ok, best = conn.execute(
            "SELECT COUNT(*), SUM(status = 'ok'), MAX(tflops) FROM measurements").fetchone()
        meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
        sessions = [p for (p,) in conn.execute("SELECT provenance FROM sessions ORDER BY id")]
        placed = [m for (m,) in conn.execute(
            "SELECT measured_on FROM measurements WHERE measured_on IS NOT NULL LIMIT 1")]
    finally:
        conn.close()
    return Entry(path, workload, _store_gpu(sessions, placed), int(rows), int(ok or 0),
                 float(best) if best is not None else None,
                 origin=json.loads(meta[ORIGIN]) if ORIGIN in meta else None)


def _store_gpu(sessions: Iterable[str], placed: Iterable[str]) -> str | None:
    """The GPU model a store's records were measured on (its sessions' device, else an rpc
    record's server); None when it never said (a study's store)."""
    for text in [*sessions, *placed]:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            info = json.loads(text)
            gpu = (info.get("device") or {}).get("gpu") or info.get("gpu") or info.get("model")
            if gpu:
                return str(gpu)
    return None


def _dataset_entry(prefix: str, *, stats: bool) -> Entry:
    with open(prefix + ".json") as f:
        meta = json.load(f)
    if not isinstance(meta, dict) or not isinstance(meta.get("workload"), dict):
        raise ValueError("no workload in its .json")
    entry = Entry(prefix, meta["workload"], (meta.get("device") or {}).get("gpu"),
                  int(meta.get("rows") or 0), shipped=True)
    if stats:
        from bocast.datasets import load_dataset

        df, _ = load_dataset(prefix)
        ok = df[df["status"] == "ok"]
        entry.ok, entry.best = len(ok), float(ok["tflops"].max()) if len(ok) else None
    return entry


def shipped_datasets() -> list[str]:
    """The prefixes of the shipped datasets (none where the package has no repository)."""
    out = []
    for folder in (SHIPPED, os.path.join(SHIPPED, "exhaustive")):
        if os.path.isdir(folder):
            out += sorted(os.path.join(folder, f[:-5]) for f in os.listdir(folder)
                          if f.endswith(".json"))
    return out


def scan(records: str | None = None, *, shipped: bool = True, stores: bool = True,
         stats: bool = False) -> tuple[list[Entry], list[str]]:
    """(every entry of the library, one line per file skipped). ``records``: the folder
    (:func:`directory`'s result); ``shipped``, ``stores``: which part of it;
    ``stats``: count a dataset's ok rows and best (reads it)."""
    from bocast.store import StoreError

    entries, skipped = [], []
    for prefix in shipped_datasets() if shipped else []:
        try:
            entries.append(_dataset_entry(prefix, stats=stats))
        except (OSError, ValueError, KeyError) as e:
            skipped.append(f"records library: skipped {prefix}: not a readable dataset ({e})")
    folder = records or directory()
    names = sorted(os.listdir(folder)) if stores and os.path.isdir(folder) else []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(".") or name.endswith(("-wal", "-shm", "-journal")) \
                or not os.path.isfile(path):
            continue
        if not name.endswith(".db"):
            skipped.append(f"records library: skipped {path}: not a record store (.db)")
            continue
        try:
            entries.append(_store_entry(path, stats=stats))
        except (StoreError, sqlite3.DatabaseError, ValueError) as e:
            skipped.append(f"records library: skipped {path}: {_one_line(e)}")
    return entries, skipped


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


# ------------------------------------------------------------------------ adding, removing


def _copy_name(path: str) -> str:
    """The library's name for a store's copy: its workload, GPU and first row, so the same
    store (grown or not) always has the same name."""
    from bocast.operator import canonical_workload
    from bocast.store import _read_only

    entry = _store_entry(path, stats=False)
    conn = _read_only(path)
    try:
        first = conn.execute("SELECT key, created FROM measurements ORDER BY id LIMIT 1").fetchone()
    finally:
        conn.close()
    w = canonical_workload(entry.workload)
    digest = hashlib.sha1(json.dumps([w, list(first or [])], sort_keys=True).encode())
    gpu = "".join(c if c.isalnum() else "-" for c in (entry.gpu or "unknown-gpu")).strip("-")
    shape = "x".join(str(x) for x in w.get("shape", []))
    return f"{w.get('op')}_{shape}_{w.get('space')}_{gpu}_{digest.hexdigest()[:10]}.db"


def add(store: str, records: str | None = None) -> tuple[str, str]:
    """Copy the store at ``store`` into the library: (the copy's path, what happened: "added",
    "updated" (it had grown) or "already there"). A LibraryError says why not (not a sound
    store, no records)."""
    from bocast import interrupt
    from bocast.store import StoreError, _read_only

    folder = records or directory()
    try:
        entry = _store_entry(store, stats=False)
    except (StoreError, sqlite3.DatabaseError) as e:
        raise LibraryError(f"records add: {_one_line(e)}") from None
    if not entry.rows:
        raise LibraryError(f"records add: {store} holds no records yet")
    if os.path.abspath(os.path.dirname(store)) == os.path.abspath(folder):
        return store, "already there"
    dest = os.path.join(folder, _copy_name(store))
    if os.path.exists(dest):
        with contextlib.suppress(StoreError, sqlite3.DatabaseError):
            if _store_entry(dest, stats=False).rows >= entry.rows:
                return dest, "already there"
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(dest)}.{os.getpid()}.tmp")
    try:
        src = _read_only(store)
        out = sqlite3.connect(tmp)
        try:
            src.backup(out)  # a consistent copy, a WAL's committed rows included
            out.execute("PRAGMA journal_mode=DELETE")  # one file
            with out:
                out.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                            (ORIGIN, json.dumps(os.path.abspath(store))))
        finally:
            out.close()
            src.close()
        existed = os.path.exists(dest)
        with interrupt.held():
            os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return dest, "updated" if existed else "added"


def remove(name: str, records: str | None = None) -> str:
    """Delete a store of the library (by file name or path); shipped datasets stay."""
    folder = records or directory()
    path = name if os.path.dirname(name) else os.path.join(folder, name)
    if os.path.abspath(os.path.dirname(path)) != os.path.abspath(folder):
        raise LibraryError(f"records remove: {name} is not a store of the records library "
                           f"{folder} (shipped datasets are not removed)")
    if not (os.path.isfile(path) and path.endswith(".db")):
        raise LibraryError(f"records remove: no store {os.path.basename(path)} in {folder}")
    for p in (path, path + "-wal", path + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    return path


# ------------------------------------------------------------------- warm_start: auto


def portable(path: str) -> str:
    """A source as a run's identity and summary name it: relative to the repository when in
    it (a copy of the tree elsewhere resumes the run), else absolute."""
    a = os.path.abspath(path)
    return os.path.relpath(a, ROOT) if a.startswith(ROOT + os.sep) else a


def local(name: str) -> str:
    """The path of a source :func:`portable` named."""
    return name if os.path.isabs(name) else os.path.join(ROOT, name)


@dataclass
class Choice:
    """The sources ``warm_start: auto`` chose, and the lines a run prints about them."""

    sources: list[str]
    notes: list[str]


def _extents(op) -> tuple[float, ...]:
    mm = op.matmul
    return tuple(math.log2(max(int(x), 1)) for x in (mm.batch or 1, mm.M, mm.N, mm.K))


def choose(target_op, *, gpu: str | None, records: str | None = None,
           exclude: Sequence[str] = (), other_workloads: bool = False,
           shipped_only: bool = False, limit: int = MAX_SOURCES) -> Choice:
    """The sources of ``warm_start: auto`` for ``target_op`` (see the module docstring).
    ``gpu``: the run's GPU model (None: not known); ``exclude``: paths never used (the run's
    dataset, its store); ``other_workloads``: only records of other workloads (replay);
    ``shipped_only``: only shipped datasets (replay)."""
    from bocast.bo.transfer import WarmStartError, incompatibility, load_sources
    from bocast.operator import WorkloadError, canonical_workload, from_workload

    entries, notes = scan(records, stores=not shipped_only)
    never = {os.path.abspath(p) for p in exclude}
    want = canonical_workload(target_op.workload)
    other_gpu: dict[str, int] = {}
    ranked = []
    for e in entries:
        if os.path.abspath(e.path) in never or (e.origin and os.path.abspath(e.origin) in never):
            continue
        w = canonical_workload(e.workload)
        if (other_workloads and w == want) or (e.ok is not None and e.ok == 0):
            continue
        problem, _ = incompatibility(e.workload, target_op)
        if problem:
            continue
        if gpu is not None and e.gpu != gpu:
            other_gpu[e.gpu or "GPU not recorded"] = other_gpu.get(e.gpu or "GPU not recorded",
                                                                    0) + 1
            continue
        try:
            src = from_workload(e.workload)
            dist = sum(abs(a - b) for a, b in zip(_extents(src), _extents(target_op)))
        except (WorkloadError, AttributeError):
            continue
        ranked.append(((w.get("op") != want.get("op"), round(dist, 6),
                        -(e.ok if e.ok is not None else e.rows), e.name), e))
    ranked.sort(key=lambda t: t[0])
    chosen: list[Entry] = []
    seen: set[str] = set()
    for _, e in ranked:
        key = json.dumps(canonical_workload(e.workload), sort_keys=True)
        if len(chosen) >= limit or key in seen:
            continue
        try:  # rows that fit the target's extents (and a store still sound when read)
            load_sources([e.path], target_op)
        except (WarmStartError, InputError) as err:
            notes.append(f"warm start: passed over {e.name}: {_one_line(err)}")
            continue
        seen.add(key)
        chosen.append(e)
    if other_gpu:
        what = ", ".join(f"{n} of {g}" for g, n in sorted(other_gpu.items()))
        notes.append(f"warm start: records of other GPU models left out ({what}); this run's "
                     f"GPU: {gpu}")
    if gpu is None and chosen:
        gpus = sorted({e.gpu or "GPU not recorded" for e in chosen})
        notes.append(f"warm start: this run's GPU is not known before it starts; the sources "
                     f"were measured on {', '.join(gpus)}")
    if chosen:
        notes.append("warm start (auto) from " + "; ".join(
            f"{e.name} ({_brief(e.workload)}, {e.gpu or 'GPU not recorded'})" for e in chosen))
    else:
        notes.append("warm start (auto): no records of the same schedule"
                     + (f" on {gpu}" if gpu else "") + " in the library: a cold start")
    return Choice([e.path for e in chosen], notes)


def _brief(w: dict[str, Any]) -> str:
    return f"{w.get('op')} {'x'.join(map(str, w.get('shape', [])))} {w.get('space', 'v1')}"


def resolve(option: Any, target_op, *, runner: str, gpu: str | None,
            dataset: str | None = None, store: str | None = None,
            records: str | None = None) -> Choice:
    """The sources of a run's ``warm_start`` option: ``auto`` chosen by :func:`choose` (replay:
    shipped datasets of other workloads only), ``none`` none, a list as it is."""
    from bocast.bo.transfer import AUTO

    if option != AUTO:
        paths = option if isinstance(option, list) else []
        return Choice(list(paths), [f"warm start from {', '.join(paths)}"] if paths else [])
    replay = runner == "replay"
    exclude = [p for p in (dataset, store) if p]
    return choose(target_op, gpu=gpu, records=records, exclude=exclude,
                  other_workloads=replay, shipped_only=replay)


def warm_options(strategy: str, options: dict[str, Any], sources: Sequence[str]) -> dict[str, Any]:
    """``options`` of a run whose ``warm_start: auto`` chose ``sources``: with the sources, and,
    where there are any, the strategy's :attr:`~bocast.strategies.base.Strategy.warm_defaults`
    for the options the run left unset, unless it gave one they yield to (a cold run, or an
    explicit list, keeps the plain defaults: explicit warm starts reproduce as they always
    did)."""
    from bocast.strategies import strategy_class

    cls = strategy_class(strategy)
    given = any(k in options for k in cls.warm_defaults_yield_to)
    extra = cls.warm_defaults if sources and not given else {}
    return {**{k: v for k, v in extra.items() if k not in options}, **options,
            "warm_start": list(sources)}


def run_gpu(runner: str, *, dataset=None, rpc: dict | None = None) -> str | None:
    """The GPU model a run will measure on, as its records will name it, known before it
    starts: replay, its dataset's; standin, the stand-in's; local, the local GPU's (nvidia-smi);
    rpc, ``gpu_model`` where set; else None."""
    if runner == "replay":
        return (getattr(dataset, "meta", None) or {}).get("device", {}).get("gpu")
    if runner == "standin":
        from bocast.measure.standin import run_task

        return str(run_task({"kind": "device"})["gpu"])
    if runner == "rpc":
        model = (rpc or {}).get("gpu_model")
        return model if model and model != "any" else None
    import subprocess

    index = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader",
                              "-i", index], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() or None if lines else None
