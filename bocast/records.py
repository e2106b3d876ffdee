"""Append-only record store (SQLite in WAL mode), provenance, and compact datasets.

Why SQLite/WAL rather than JSONL: every row is one committed transaction, so a process killed
with SIGKILL leaves either the whole row or none of it (a JSONL line can be half-written); the
unique key on the configuration makes a second insert of the same configuration an error rather
than a silent duplicate; and pandas reads it in one call (:func:`load`).

A store belongs to one workload: opening it for another workload, or opening a file that is not
a bocast store or is damaged (SQLite's ``quick_check``), raises :class:`StoreError` and leaves
the file untouched: nothing is written to a store before these checks pass.
"""

from __future__ import annotations

import datetime as _dt
import json
import lzma
import math
import numbers
import os
import platform
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, get_args, get_type_hints

from bocast import interrupt
from bocast.errors import InputError
from bocast.measure.status import Status
from bocast.operator import canonical_workload

#: Changes only with an incompatible change of the tables. A new measured value is a new
#: nullable column: a store written before it gets the column when opened (its rows read None),
#: and older code reads a newer store by column name, ignoring what it does not know.
SCHEMA_VERSION = 1


class StoreError(InputError):
    """A record store that cannot be used for this run (corrupt, foreign, another workload)."""


class RecordError(InputError):
    """A record whose fields are not a measurement (the message names the field)."""


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


@contextmanager
def atomic_write(path: str, mode: str = "w", **kwargs):
    """Write ``path`` whole or not at all: into a temporary file beside it, renamed over it when
    the block ends without an error (an interrupt included). A reader never sees a half-written
    result, and a stopped command leaves the previous version in place."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        # mkstemp's 0600 would make every result private: keep the file's mode, or take the
        # one open() would give a new file (0666 less the umask)
        try:
            os.fchmod(fd, os.stat(path).st_mode & 0o777)
        except FileNotFoundError:
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        with interrupt.held():
            os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# ---------------------------------------------------------------------- the record schema
#
# A record's measured values are defined here once: the scalar fields made by _measured()
# (Measurement's, which a runner reports, and Record.build_s) and the static FEATURES of the
# binary. The store's columns, a runner's result, its copy into a record, the dataset CSV
# columns and replay's reading of a dataset all derive from them, so a new measured value is
# one line here (plus the code that measures it).


@dataclass(frozen=True)
class Column:
    """What a measured column holds. ``optional``: files written before the column existed
    lack it and read it as None; every column added after the first tracked datasets must be
    optional, so that those still load."""

    doc: str
    optional: bool = False


def _measured(doc: str, *, optional: bool = False) -> Any:
    return field(default=None, metadata={"column": Column(doc, optional)})


@dataclass(kw_only=True)
class Measurement:
    """What a runner measures of one kernel; None where it was not measured (a failed run
    keeps ``run_s`` and, for a wrong result, ``rel_error``)."""

    latency_ms: float | None = _measured("median per-launch time over the timed repeats (ms)")
    latency_min_ms: float | None = _measured("fastest timed repeat (ms)")
    latency_q25_ms: float | None = _measured("first quartile of the timed repeats (ms)")
    latency_q75_ms: float | None = _measured("third quartile of the timed repeats (ms)")
    latency_max_ms: float | None = _measured("slowest timed repeat (ms)")
    repeats: int | None = _measured("timed repeats")
    tflops: float | None = _measured("TFLOP/s of the operator's FLOPs at the median latency")
    rel_error: float | None = _measured("||out - ref|| / ||ref|| against the reference, float64")
    run_s: float | None = _measured("wall seconds the runner spent on the kernel")


#: Static features of a built kernel (``Record.features``), one float each.
FEATURES: dict[str, Column] = {
    "registers": Column("registers per thread (ptxas)"),
    "smem_bytes": Column("static shared memory per block, bytes (ptxas)"),
    "dynamic_smem_bytes": Column("dynamic shared memory per block, bytes (the lowered kernel)"),
    "spill_stores": Column("register spill stores, bytes (ptxas)"),
    "spill_loads": Column("register spill loads, bytes (ptxas)"),
    "stack_bytes": Column("stack frame, bytes (ptxas)"),
}


@dataclass
class Record(Measurement):
    """One finished measurement of one configuration: the runner's :class:`Measurement`
    (keyword arguments), the build's time and features, and where the record came from."""

    key: str
    config: dict[str, Any]
    status: Status
    build_s: float | None = _measured("wall seconds to build the kernel (lower, compile)")
    features: dict[str, float] = field(default_factory=dict)  # FEATURES of the binary
    stage: str | None = None                  # where it failed: lower, compile, run, ...
    error: str = ""
    source: str = ""                          # who proposed it: strategy name, "sample", ...
    measured_on: dict[str, Any] | None = None  # runner rpc: host, port, GPU index and model

    @property
    def ok(self) -> bool:
        """Built, ran and checked correct (the status alone)."""
        return self.status is Status.OK

    @property
    def succeeded(self) -> bool:
        """OK with a speed to rank it by: what every "best kernel" is chosen among."""
        return self.status is Status.OK and bool(self.tflops)


def best_record(records: Iterable[Record]) -> Record | None:
    """The succeeded record of highest TFLOPS (the first of equals); None if none succeeded.
    The one definition of a run's best kernel."""
    return max((r for r in records if r.succeeded), key=lambda r: r.tflops or 0.0,
               default=None)


#: the fields a runner reports (RunResult's, copied into the record)
RUN_FIELDS = tuple(f.name for f in fields(Measurement))
#: every scalar measured field of a record, in column order
MEASURED = tuple(f.name for f in fields(Record) if "column" in f.metadata)
_TYPES = {name: get_args(hint)[0] for name, hint in get_type_hints(Record).items()
          if name in MEASURED}  # float or int, from "float | None"
#: columns that files written before them lack
OPTIONAL = frozenset([*(f.name for f in fields(Record) if "column" in f.metadata
                        and f.metadata["column"].optional),
                      *(n for n, c in FEATURES.items() if c.optional)])

_COLUMNS = {
    "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "key": "TEXT NOT NULL UNIQUE",
    "config": "TEXT NOT NULL",            # JSON
    "status": "TEXT NOT NULL",
    **{name: "INTEGER" if _TYPES[name] is int else "REAL" for name in MEASURED},
    **{name: "REAL" for name in FEATURES},
    "stage": "TEXT",
    "error": "TEXT",
    "source": "TEXT",
    "session": "INTEGER",
    "created": "TEXT NOT NULL",
    "measured_on": "TEXT",                # JSON
}


#: The most TFLOPS a record may claim: 10x the dense fp16 Tensor Core peak of the H100 SXM
#: (989 TFLOPS), the fastest GPU bocast targets. A real kernel stays below its GPU's peak; a
#: value far above it is a timing bug (a kernel that did no work, a latency in the wrong unit),
#: and one such row would become the best of every run or dataset holding it, and so the
#: target of every "95% of the best". The margin leaves room for a faster GPU before this one
#: constant has to change.
MAX_TFLOPS = 10_000.0


def check_record(record: Record) -> None:
    """Raise :class:`RecordError` naming the first field of ``record`` that no measurement can
    hold: every measured value None or a finite number of its type (not a bool), latencies
    above zero and no other value below it, TFLOPS above zero and at most :data:`MAX_TFLOPS`
    for status ok and absent for a failure, ``features`` a mapping of known names to such
    numbers, the text fields text. Every writer of a record calls it (:meth:`Store.append`, a
    replay dataset as it is opened), so a row that is written can always be read back."""
    from bocast.measure.status import Status

    if not isinstance(record.status, Status):
        raise RecordError(f"status: expected one of {[s.value for s in Status]}, "
                          f"got {record.status!r}")
    for name in MEASURED:
        _check_number(name, getattr(record, name), _TYPES[name])
    if not isinstance(record.features, Mapping):
        raise RecordError(f"features: expected a mapping of {sorted(FEATURES)} to numbers, got "
                          f"{record.features!r}")
    unknown = sorted(str(k) for k in set(record.features) - set(FEATURES))
    if unknown:
        raise RecordError(f"features: unknown name(s) {unknown}; known: {sorted(FEATURES)}")
    for name, value in record.features.items():
        _check_number(f"features.{name}", value, float)
    tflops = record.tflops
    if record.status is Status.OK:
        if tflops is None or tflops <= 0:
            raise RecordError(f"tflops: status ok needs tflops > 0, got {tflops!r}")
        if tflops > MAX_TFLOPS:
            raise RecordError(f"tflops: {tflops!r} is impossible (above {MAX_TFLOPS:,.0f}, 10x "
                              "the H100's fp16 peak): a timing bug, not a measurement")
    elif tflops is not None:
        raise RecordError(f"tflops: status {record.status.value} is a failure and has no "
                          f"TFLOPS, got {tflops!r}")
    for name in ("key", "error", "source"):
        if not isinstance(getattr(record, name), str):
            raise RecordError(f"{name}: expected a string, got {getattr(record, name)!r}")
    if record.stage is not None and not isinstance(record.stage, str):
        raise RecordError(f"stage: expected a string or None, got {record.stage!r}")
    for name in ("config", "measured_on"):
        value = getattr(record, name)
        if not (isinstance(value, Mapping) or (value is None and name == "measured_on")):
            raise RecordError(f"{name}: expected a mapping, got {value!r}")


_MAX_INT = 2**63 - 1  # SQLite's INTEGER


def _check_number(name: str, value: Any, kind: type) -> None:
    if value is None:
        return
    # a latency of zero is as impossible as a negative one; a time, count or error can be 0
    lowest = "> 0" if name.startswith("latency") else ">= 0"
    what = "an integer" if kind is int else "a number"
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
            or (kind is int and not (float(value).is_integer() and value <= _MAX_INT))
            or (value <= 0 if lowest == "> 0" else value < 0)):
        raise RecordError(f"{name}: expected None or {what} {lowest}, got {value!r}")


def column_docs() -> dict[str, str]:
    """What each measured column holds (a dataset's .json carries it)."""
    return {**{f.name: f.metadata["column"].doc for f in fields(Record) if "column" in f.metadata},
            **{name: c.doc for name, c in FEATURES.items()}}


def measured_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """The measured fields and ``features`` of a :class:`Record` from a row of the store or a
    dataset (a missing column, None or NaN: not measured)."""
    out: dict[str, Any] = {k: _value(row.get(k), _TYPES[k]) for k in MEASURED}
    out["features"] = {k: v for k in FEATURES if (v := _value(row.get(k), float)) is not None}
    return out


def _value(v: Any, kind: type) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):  # an empty cell of a dataset
        return None
    return int(v) if kind is int else float(v)


def git_sha(path: str | None = None) -> str:
    """Commit of the code that ran: ``$BOCAST_GIT_SHA`` when set (the GPU machine receives a copy
    of the tree without .git), else ``git rev-parse HEAD`` (+ "-dirty"), else "unknown"."""
    if os.environ.get("BOCAST_GIT_SHA"):
        return os.environ["BOCAST_GIT_SHA"]
    here = path or os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0 or not head.stdout.strip():
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("bocast", "apache-tvm", "apache-tvm-ffi", "torch", "botorch", "gpytorch",
                 "numpy", "scikit-learn"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            try:  # the GPU machine carries TVM as a bundle on PYTHONPATH, not as a distribution
                mod = __import__({"apache-tvm": "tvm", "apache-tvm-ffi": "tvm_ffi"}.get(name, name))
                out[name] = getattr(mod, "__version__", "present")
            except Exception:  # noqa: BLE001
                out[name] = "absent"
    return out


def provenance(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Git SHA, package versions, host and date; runners add GPU, driver and clocks."""
    return {
        "git_sha": git_sha(),
        "versions": package_versions(),
        "host": platform.node(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **(dict(extra) if extra else {}),
    }


class Store:
    """Records of one workload in one SQLite file. Rows are only ever inserted."""

    def __init__(self, path: str, workload: Mapping[str, Any], *, create: bool = True):
        self.path = path
        self.workload = dict(workload)
        self.readonly = self.closed = False
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if not exists and not create:
            raise StoreError(f"record store {path} does not exist")
        if exists:
            _check_workload(path, _check_existing(path), self.workload)
        self._lock = threading.RLock()
        with interrupt.held():  # a new store is created whole (tables and meta) or not at all
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                # one connection shared by the measuring threads; writes serialised by the lock
                self._conn = sqlite3.connect(path, timeout=30, isolation_level=None,
                                             check_same_thread=False)
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=FULL")
                if not exists:
                    self._create()
                else:
                    self._add_new_columns()
            except (OSError, sqlite3.OperationalError) as e:
                raise StoreError(f"cannot open record store {path} for writing ({e})") from None

    @classmethod
    def open(cls, path: str, workload: Mapping[str, Any] | None = None) -> Store:
        """An existing store, read-only: of ``workload`` (else StoreError, as for writing),
        or with None of whatever workload it holds (``store.workload``), for reading the records
        of runs one did not start. The same checks as for writing; nothing is written to the
        file or created beside it (a column it lacks reads None); writing raises StoreError."""
        if not (os.path.exists(path) and os.path.getsize(path) > 0):
            raise StoreError(f"record store {path} does not exist")
        self = cls.__new__(cls)
        stored = _check_existing(path)
        if workload is not None:
            _check_workload(path, stored, workload)
        self.path, self.workload, self.readonly = path, stored, True
        self._lock = threading.RLock()
        self._conn = _read_only(path)
        self.closed = False
        return self

    def _add_new_columns(self) -> None:
        """Give a store written before a column existed that column (its rows read None)."""
        have = {r[1] for r in self._conn.execute("PRAGMA table_info(measurements)")}
        for name, kind in _COLUMNS.items():
            if name not in have:
                self._conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")

    def _create(self) -> None:
        with self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute("CREATE TABLE measurements ("
                               + ", ".join(f"{n} {t}" for n, t in _COLUMNS.items()) + ")")
            self._conn.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                               "started TEXT, provenance TEXT)")
            self._conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("format", "bocast-records"), ("schema", str(SCHEMA_VERSION)),
                ("workload", _canon(self.workload))])

    def close(self) -> None:
        self._conn.close()
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- meta ----------------------------------------------------------------------------
    def _writable(self) -> None:
        if self.closed:  # sqlite3 would raise ProgrammingError, which names no file
            raise StoreError(f"{self.path} was closed; open it again to write to it")
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only (Store.open)")

    def set_meta(self, name: str, value: Any) -> None:
        self._writable()
        with interrupt.held(), self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                               (name, json.dumps(value)))

    def get_meta(self, name: str, default: Any = None) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return json.loads(row[0]) if row else default

    def start_session(self, prov: Mapping[str, Any]) -> int:
        self._writable()
        with interrupt.held(), self._lock, self._conn:
            cur = self._conn.execute("INSERT INTO sessions (started, provenance) VALUES (?, ?)",
                                     (prov.get("date", ""), json.dumps(prov, sort_keys=True)))
        assert cur.lastrowid is not None  # set by the INSERT
        return cur.lastrowid

    def sessions(self) -> list[dict[str, Any]]:
        return [{"id": i, "started": s, **json.loads(p)} for i, s, p in
                self._conn.execute("SELECT id, started, provenance FROM sessions ORDER BY id")]

    # --- rows ----------------------------------------------------------------------------
    def keys(self) -> set[str]:
        with self._lock:
            return {k for (k,) in self._conn.execute("SELECT key FROM measurements")}

    def __contains__(self, key: str) -> bool:
        return self._conn.execute("SELECT 1 FROM measurements WHERE key = ?", (key,)).fetchone() \
            is not None

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    def append(self, record: Record, session: int | None = None) -> None:
        """Insert one finished measurement (its own transaction: durable once this returns);
        a record :func:`check_record` refuses raises RecordError and writes nothing."""
        self._writable()
        check_record(record)
        row = _row(record, session)
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        try:
            # held: an interrupt lets the row finish; the transaction makes it whole or absent
            with interrupt.held(), self._lock, self._conn:
                self._conn.execute(f"INSERT INTO measurements ({names}) VALUES ({marks})",
                                   tuple(row.values()))
        except sqlite3.IntegrityError:
            raise StoreError(f"configuration {record.key} is already in {self.path}") from None
        except sqlite3.OperationalError as e:  # disk full, file gone read-only, ...
            raise StoreError(f"cannot write to {self.path}: {e}") from None

    def records(self) -> list[Record]:
        return [r for _, _, r in self.rows()]

    def rows(self) -> list[tuple[int, int | None, Record]]:
        """(row id, session id, record) of every row, in insertion order."""
        if self.closed:
            raise StoreError(f"{self.path} was closed; open it again to read it")
        out = []
        try:
            cur = self._conn.execute("SELECT * FROM measurements ORDER BY id")
            names = [d[0] for d in cur.description]
            for values in cur:
                r = dict(zip(names, values))
                try:
                    out.append((r["id"], r["session"], Record(
                        key=r["key"], config=json.loads(r["config"]), status=Status(r["status"]),
                        **measured_values(r), stage=r["stage"], source=r["source"],
                        error=r["error"] or "",
                        measured_on=(json.loads(r["measured_on"]) if r.get("measured_on")
                                     else None))))
                except (TypeError, ValueError) as e:
                    raise StoreError(f"{self.path}: row {r.get('id')} cannot be read ({e})") \
                        from None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} cannot be read ({e})") from None
        return out


def _read_only(path: str) -> sqlite3.Connection:
    """A connection that only reads ``path`` and creates nothing beside it. A WAL-mode store
    opened even read-only gets ``-wal`` and ``-shm`` files that only a writer removes, so a
    store that nothing is writing (no ``-wal`` beside it: the last writer to close folds it
    into the file and deletes it) is opened ``immutable``, which reads the file alone. A store
    with a ``-wal`` has a writer now (or had one that was killed): its rows may still be in that
    file, so it is opened as a reader of the WAL, whose files exist already."""
    if os.path.isdir(path):
        raise StoreError(f"record store {path} is a folder, not a file")
    if not os.path.isfile(path):
        raise StoreError(f"record store {path} does not exist")
    wal = os.path.exists(path + "-wal")
    return sqlite3.connect(f"file:{_uri_path(path)}?{'mode=ro' if wal else 'immutable=1'}",
                           uri=True, check_same_thread=False)


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


def _check_existing(path: str) -> dict[str, Any]:
    """The workload of an existing store, once it passed every check (StoreError if not)."""
    try:
        conn = _read_only(path)
        try:
            rows = dict(conn.execute("SELECT name, value FROM meta").fetchall())
            tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE "
                                                 "type = 'table'")}
            # a page damaged mid-file passes the reads above; quick_check reads every page
            problems = [m for (m,) in conn.execute("PRAGMA quick_check(5)")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} is not a bocast record store ({e}); refusing to touch it") \
            from None
    if rows.get("format") != "bocast-records":
        raise StoreError(f"{path} is not a bocast record store; refusing to touch it")
    if problems != ["ok"]:
        found = " ".join(" ".join(problems).split())[:300]
        raise StoreError(f"{path} is damaged (SQLite quick_check: {found}); refusing to "
                         "write to it: move it away (sqlite3's .recover may save its rows)")
    if not {"measurements", "sessions"} <= tables:
        raise StoreError(f"{path} lacks the measurements or sessions table; refusing to "
                         "touch it")
    if str(rows.get("schema")) != str(SCHEMA_VERSION):
        raise StoreError(f"{path} has schema {rows.get('schema')}, this bocast reads "
                         f"{SCHEMA_VERSION}")
    try:
        stored = json.loads(rows["workload"])
    except (KeyError, TypeError, ValueError):
        raise StoreError(f"{path} has no readable workload; refusing to touch it") from None
    if not isinstance(stored, dict):
        raise StoreError(f"{path} has no readable workload; refusing to touch it")
    return stored


def _check_workload(path: str, stored: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
    if _canon(canonical_workload(stored)) != _canon(canonical_workload(workload)):
        raise StoreError(f"{path} holds records of workload {dict(stored)}, not "
                         f"{dict(workload)}; use another file")


def _row(record: Record, session: int | None) -> dict[str, Any]:
    """The columns of a record as the store holds them."""
    return {
        "key": record.key, "config": json.dumps(record.config, sort_keys=True),
        "status": str(record.status),
        **{k: getattr(record, k) for k in MEASURED},
        **{k: record.features.get(k) for k in FEATURES},
        "stage": record.stage, "error": record.error, "source": record.source,
        "session": session,
        "measured_on": json.dumps(record.measured_on, sort_keys=True)
        if record.measured_on else None,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
    }


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def load(path: str):
    """All measurements of a store as a pandas DataFrame, one column per knob (split knobs as
    ``name_0 .. name_k``), plus status, latency statistics, TFLOPS and static features."""
    import pandas as pd

    if not (os.path.exists(path) and os.path.getsize(path) > 0):
        raise StoreError(f"record store {path} does not exist")
    _check_existing(path)  # the checks every command makes: a malformed store is refused
    conn = _read_only(path)
    try:
        df = pd.read_sql("SELECT * FROM measurements ORDER BY id", conn)
    except Exception as e:  # noqa: BLE001
        raise StoreError(f"{path} is not a bocast record store ({e})") from None
    finally:
        conn.close()
    for name in _COLUMNS:  # a store written before a column (opened read-only here)
        if name not in df.columns:
            df[name] = None
    return _expand_configs(df)


def frame(records: Iterable[Record]):
    """Records not (or not yet) in a store, as the DataFrame :func:`load` gives for a store."""
    import pandas as pd

    rows = [{"id": i + 1, **_row(r, None)} for i, r in enumerate(records)]
    columns = ["id", *_row(Record("", {}, Status.OK), None)]
    return _expand_configs(pd.DataFrame(rows, columns=columns))


def _expand_configs(df):
    import pandas as pd

    cfg = pd.json_normalize([json.loads(c) for c in df["config"]])
    for col in list(cfg.columns):
        if cfg[col].map(lambda v: isinstance(v, list)).any():
            parts = cfg[col].apply(lambda v: v if isinstance(v, list) else [None])
            width = max(len(p) for p in parts)
            for i in range(width):
                cfg[f"{col}_{i}"] = parts.map(lambda p, i=i: p[i] if i < len(p) else None)
            cfg = cfg.drop(columns=[col])
    return pd.concat([cfg, df.drop(columns=["config"])], axis=1)


# ------------------------------------------------------------------------------ datasets

#: a dataset's columns after the knob columns (the store's, less the provenance ones)
DATASET_COLUMNS = ("status", *MEASURED, *FEATURES, "stage")
# a dataset's rows file: xz (a quarter smaller than gzip: the datasets travel with the repo to
# the GPU machine, under a size limit); a .csv.gz of an older dataset is still read
DATASET_SUFFIXES = (".csv.xz", ".csv.gz")


def dataset_csv(prefix: str) -> str:
    """The rows file of dataset ``prefix`` that exists (the .csv.xz name if none does)."""
    for suffix in DATASET_SUFFIXES:
        if os.path.exists(prefix + suffix):
            return prefix + suffix
    return prefix + DATASET_SUFFIXES[0]


def dataset_files(prefix: str) -> list[str]:
    """Every file that is, or would be, part of dataset ``prefix`` (its .json and each rows
    file name read): what a command must not write over when it reads the dataset, nor
    replace without being told to when it writes one."""
    return [prefix + ".json", *(prefix + suffix for suffix in DATASET_SUFFIXES)]


def export_dataset(store_path: str, out_prefix: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    """Write ``<prefix>.csv.xz`` (one row per measurement: knob columns, status, timings,
    features; errors dropped) and ``<prefix>.json`` (workload, provenance, references)."""
    df = load(store_path)
    knob_cols = [c for c in df.columns if c not in _COLUMNS]
    df = df[knob_cols + list(DATASET_COLUMNS)]
    for col in df.columns:  # integer-valued knob columns stay integers (nullable for inactive)
        if col in knob_cols and df[col].dtype.kind == "f":
            df[col] = df[col].astype("Int64")
    csv_path, meta_path = out_prefix + DATASET_SUFFIXES[0], out_prefix + ".json"
    with atomic_write(csv_path, "wb") as raw, \
            lzma.open(raw, "wt", preset=9 | lzma.PRESET_EXTREME) as f:
        df.to_csv(f, index=False, float_format="%.6g")
    with atomic_write(meta_path) as f:
        json.dump({"rows": len(df), "knob_columns": knob_cols, "columns": column_docs(), **meta},
                  f, indent=1, sort_keys=True)
    return csv_path, meta_path


def load_dataset(prefix: str):
    """(DataFrame, meta) of a dataset written by :func:`export_dataset`."""
    import pandas as pd

    with open(prefix + ".json") as f:
        meta = json.load(f)
    return pd.read_csv(dataset_csv(prefix)), meta


def dataset_configs(df, knob_columns: Iterable[str], space) -> list[dict[str, Any]]:
    """Configurations of a dataset's rows, rebuilt from its knob columns. A value that is not
    one a knob can take as read (a fraction where an integer belongs, a missing column) raises
    ValueError naming the row (1 = the first under the header) and the knob."""
    from bocast.knobs import Split

    out = []
    cols = list(knob_columns)
    for i, row in enumerate(df[cols].itertuples(index=False)):
        r = dict(zip(cols, row))
        cfg: dict[str, Any] = {}
        for k in space.knobs:
            try:
                if isinstance(k, Split):
                    parts = [r[f"{k.name}_{j}"] for j in range(k.parts)]
                    cfg[k.name] = None if any(_isna(p) for p in parts) else \
                        tuple(_int(p) for p in parts)
                else:
                    v = r[k.name]
                    cfg[k.name] = None if _isna(v) else (
                        _int(v) if isinstance(k.choices[0], int) else v)
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"row {i + 1}: knob {k.name}: "
                                 f"{e if not isinstance(e, KeyError) else 'column missing'}") \
                    from None
        out.append(cfg)
    return out


def _int(v: Any) -> int:
    f = float(v)
    if not f.is_integer():
        raise ValueError(f"{v!r} is not an integer")
    return int(f)


def _isna(v: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False
