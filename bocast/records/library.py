"""The records library (issue 26): every measurement counts twice.

The library is the shipped datasets (package data, exhaustive tables included:
:func:`bocast.records.datasets.shipped_datasets`; read only) plus a folder of record stores, one per
tuned run: a live ``bocast tune`` (runner local or rpc), finished or interrupted, copies its
store there (:func:`add`; ``bocast records add`` does it by hand). The folder is, first that is
set: the ``records`` argument (the API's, ``--records``), ``$BOCAST_RECORDS``, a tune
configuration's ``records`` field, ``$XDG_CACHE_HOME/bocast/records``
(``~/.cache/bocast/records``).

Stand-in runs (synthetic timings) stay out unless asked: ``bocast tune --runner standin`` copies
its store only into a library the run names (``--records``, ``records=``, a configuration's
``records``), never into the default one, and ``bocast records add`` adds one by hand. Where
one is in the library anyway, warm starts and suggestions leave it out unless the run is itself
a stand-in run (:attr:`Entry.synthetic`; its TFLOPS say nothing of a GPU's).

A copy is named by its workload, GPU and the store's first row, so the same store added twice
is one file (replaced only when the store has grown: nothing is copied twice). A file there
that is not a sound bocast store (damaged, foreign) is skipped with one line, never fatal.

``warm_start: auto`` picks a run's sources from the library (:mod:`bocast.run.warm_sources`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bocast import interrupt
from bocast.errors import InputError
from bocast.records.datasets import (
    load_dataset,
    locate,
    shipped_datasets,
    shipped_folder,
    shipped_name,
)
from bocast.records.record import STANDIN_GPU
from bocast.records.store import Store, StoreError, _check_existing, _read_only
from bocast.space.operators.operator import canonical_workload

ENV = "BOCAST_RECORDS"
#: the folder holding the package (the repository, or site-packages): a source under it that is
#: not a shipped dataset is named relative to it. Found from the package's data folder, so it
#: does not depend on where in the package this module sits
ROOT = os.path.dirname(os.path.dirname(shipped_folder()))
#: meta of a library copy: the absolute path of the store it was copied from
ORIGIN = "library_origin"


class LibraryError(InputError):
    """A records library operation that cannot be done (the message says why)."""


def directory(records: str | os.PathLike | None = None, config: str | None = None) -> str:
    """The library's folder: ``records`` (argument), else ``$BOCAST_RECORDS``, else a
    configuration's ``records``, else ``$XDG_CACHE_HOME/bocast/records``."""
    if records is not None and not os.fspath(records):
        raise LibraryError("records: an empty path; leave it out for the default")
    if records:
        folder = os.path.abspath(os.fspath(records))
    elif os.environ.get(ENV):
        folder = os.path.abspath(os.environ[ENV])
    elif config:
        folder = os.path.abspath(config)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        folder = os.path.join(cache, "bocast", "records")
    if os.path.exists(folder) and not os.path.isdir(folder):  # else read as an empty library
        raise LibraryError(f"records: {folder} is a file, not the records library's folder")
    return folder


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
    arch: tuple[str, int] | None = None  # the GPU's (compute capability, SM count), where recorded
    extra: dict[str, Any] = field(default_factory=dict)
    #: a session of the store says its runner's timings are synthetic (Runner.described)
    declared_synthetic: bool = False

    @property
    def synthetic(self) -> bool:
        """Records of synthetic timings: the stand-in's (no GPU), directly or through rpc
        servers run as stand-ins, or of any runner whose class declares ``synthetic`` (a cost
        model's): warm starts and suggestions leave them out unless the run is itself the
        stand-in's (:func:`bocast.run.warm_sources.choose`)."""
        return self.gpu == STANDIN_GPU or self.declared_synthetic

    @property
    def name(self) -> str:
        return portable(self.path) if self.shipped else os.path.basename(self.path)

    def describe(self) -> dict[str, Any]:
        w = self.workload
        return {"name": self.name, "path": self.path, "op": w.get("op"),
                "shape": w.get("shape"), "space": w.get("space", "v1"), "gpu": self.gpu,
                "rows": self.rows, "ok": self.ok, "best_tflops": self.best,
                "shipped": self.shipped, "synthetic": self.synthetic}


# ------------------------------------------------------------------------------ reading


def _store_entry(path: str, *, stats: bool) -> Entry:
    """The entry of a store, after the checks every command makes (StoreError if unsound)."""
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
    gpu, arch = _store_device(sessions, placed)
    return Entry(path, workload, gpu, int(rows), int(ok or 0),
                 float(best) if best is not None else None,
                 origin=json.loads(meta[ORIGIN]) if ORIGIN in meta else None, arch=arch,
                 declared_synthetic=any(_declares_synthetic(s) for s in sessions))


def _declares_synthetic(session: str) -> bool:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return bool((json.loads(session).get("device") or {}).get("synthetic"))
    return False


def _store_device(sessions: Iterable[str],
                  placed: Iterable[str]) -> tuple[str | None, tuple[str, int] | None]:
    """The GPU model a store's records were measured on (its sessions' device, else an rpc
    record's server) and its :func:`architecture`; None when it never said (a study's store)."""
    for text in [*sessions, *placed]:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            info = json.loads(text)
            device = info.get("device") or {}
            gpu = device.get("gpu") or info.get("gpu") or info.get("model")
            if gpu:
                return str(gpu), architecture(device or info)
    return None, None


def architecture(device: Any) -> tuple[str, int] | None:
    """A GPU's (compute capability, SM count) from a recorded device description (a dataset's
    ``device``, a session's), None where either is missing. Two models alike in both (an H100
    SXM and an H200) run the same kernels on the same SMs in the same waves; they differ in
    memory (:mod:`bocast.run.warm_sources` counts one's records for the other, and says so)."""
    if not isinstance(device, dict):
        return None
    cap, sms = device.get("capability"), device.get("sm_count")
    try:
        return (str(cap), int(sms)) if cap and sms else None
    except (TypeError, ValueError):
        return None


def _dataset_entry(prefix: str, *, stats: bool) -> Entry:
    with open(prefix + ".json") as f:
        meta = json.load(f)
    if not isinstance(meta, dict) or not isinstance(meta.get("workload"), dict):
        raise ValueError("no workload in its .json")
    entry = Entry(prefix, meta["workload"], (meta.get("device") or {}).get("gpu"),
                  int(meta.get("rows") or 0), shipped=True, arch=architecture(meta.get("device")))
    if stats:
        df, _ = load_dataset(prefix)
        ok = df[df["status"] == "ok"]
        entry.ok, entry.best = len(ok), float(ok["tflops"].max()) if len(ok) else None
    return entry


def scan(records: str | None = None, *, shipped: bool = True, stores: bool = True,
         stats: bool = False) -> tuple[list[Entry], list[str]]:
    """(every entry of the library, one line per file skipped). ``records``: the folder
    (:func:`directory`'s result); ``shipped``, ``stores``: which part of it;
    ``stats``: count a dataset's ok rows and best (reads it)."""
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
    folder = records or directory()
    try:
        # every row read and checked as a warm start reads it: a row no measurement can hold
        # (TFLOPS text, negative, infinite) is refused here, not copied into every later run
        with Store.open(store) as opened:
            opened.rows()
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
    _remove_stale_copies(folder)
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


def _remove_stale_copies(folder: str) -> None:
    """Delete the partial copies (``.NAME.PID.tmp``) that an :func:`add` killed by SIGKILL left
    (its ``finally`` never ran): hidden, never listed, each as large as its store. A copy whose
    process still runs (another add under way) is left alone."""
    for name in os.listdir(folder):
        m = re.fullmatch(r"\..+\.db\.(\d+)\.tmp", name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # alive (or a process of another user, PermissionError below)
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, name))


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


# ------------------------------------------------------------- how a run names a source


def portable(path: str) -> str:
    """A source as a run's identity and summary name it: a shipped dataset by its name
    (:func:`bocast.records.datasets.shipped_name`: the same in the repository and from a wheel),
    else relative to :data:`ROOT` when under it (a copy of the tree elsewhere resumes the run), else
    absolute."""
    a = os.path.abspath(locate(path))
    if a.startswith(shipped_folder() + os.sep):
        return shipped_name(a) or a
    return os.path.relpath(a, ROOT) if a.startswith(ROOT + os.sep) else a


def local(name: str) -> str:
    """The path of a source :func:`portable` named (or a name of before the datasets were
    package data: ``experiments/data/...``)."""
    return locate(name, ROOT)


def same_source(name: str) -> str:
    """A source's name as :func:`portable` gives it now, for a name a store recorded (which
    may be an older spelling of the same shipped dataset)."""
    return portable(local(name))
