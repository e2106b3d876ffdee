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
import gzip
import json
import os
import platform
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bocast import interrupt
from bocast.errors import InputError
from bocast.measure.status import Status
from bocast.operator import canonical_workload

SCHEMA_VERSION = 1

_COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT",
    "key TEXT NOT NULL UNIQUE",
    "config TEXT NOT NULL",
    "status TEXT NOT NULL",
    "latency_ms REAL",        # median over repeats
    "latency_min_ms REAL",
    "latency_q25_ms REAL",
    "latency_q75_ms REAL",
    "latency_max_ms REAL",
    "repeats INTEGER",
    "tflops REAL",
    "rel_error REAL",
    "build_s REAL",
    "run_s REAL",
    "registers REAL",
    "smem_bytes REAL",
    "dynamic_smem_bytes REAL",
    "spill_stores REAL",
    "spill_loads REAL",
    "stack_bytes REAL",
    "stage TEXT",
    "error TEXT",
    "source TEXT",            # who proposed it: strategy name, "sample", ...
    "session INTEGER",
    "created TEXT NOT NULL",
    "measured_on TEXT",       # JSON: host, port, GPU index and model (runner: rpc)
)


class StoreError(InputError):
    """A record store that cannot be used for this run (corrupt, foreign, another workload)."""


@contextmanager
def atomic_write(path: str, mode: str = "w", **kwargs):
    """Write ``path`` whole or not at all: into a temporary file beside it, renamed over it when
    the block ends without an error (an interrupt included). A reader never sees a half-written
    result, and a stopped command leaves the previous version in place."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
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


@dataclass
class Record:
    """One finished measurement of one configuration."""

    key: str
    config: dict[str, Any]
    status: Status
    latency_ms: float | None = None
    latency_min_ms: float | None = None
    latency_q25_ms: float | None = None
    latency_q75_ms: float | None = None
    latency_max_ms: float | None = None
    repeats: int | None = None
    tflops: float | None = None
    rel_error: float | None = None
    build_s: float | None = None
    run_s: float | None = None
    features: dict[str, float] = field(default_factory=dict)
    stage: str | None = None
    error: str = ""
    source: str = ""
    measured_on: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


_FEATURES = ("registers", "smem_bytes", "dynamic_smem_bytes", "spill_stores", "spill_loads",
             "stack_bytes")


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
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if not exists and not create:
            raise StoreError(f"record store {path} does not exist")
        if exists:
            self._check_existing(path)
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
                elif "measured_on" not in {r[1] for r in self._conn.execute(
                        "PRAGMA table_info(measurements)")}:  # stores written before the column
                    self._conn.execute("ALTER TABLE measurements ADD COLUMN measured_on TEXT")
            except (OSError, sqlite3.OperationalError) as e:
                raise StoreError(f"cannot open record store {path} for writing ({e})") from None

    def _check_existing(self, path: str) -> None:
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
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
        if _canon(canonical_workload(stored)) != _canon(canonical_workload(self.workload)):
            raise StoreError(f"{path} holds records of workload {stored}, not {self.workload}; "
                             "use another file")

    def _create(self) -> None:
        with self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute(f"CREATE TABLE measurements ({', '.join(_COLUMNS)})")
            self._conn.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                               "started TEXT, provenance TEXT)")
            self._conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("format", "bocast-records"), ("schema", str(SCHEMA_VERSION)),
                ("workload", _canon(self.workload))])

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- meta ----------------------------------------------------------------------------
    def set_meta(self, name: str, value: Any) -> None:
        with interrupt.held(), self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                               (name, json.dumps(value)))

    def get_meta(self, name: str, default: Any = None) -> Any:
        row = self._conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return json.loads(row[0]) if row else default

    def start_session(self, prov: Mapping[str, Any]) -> int:
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
        """Insert one finished measurement (its own transaction: durable once this returns)."""
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
        out = []
        try:
            cur = self._conn.execute("SELECT * FROM measurements ORDER BY id")
            names = [d[0] for d in cur.description]
            for values in cur:
                r = dict(zip(names, values))
                try:
                    out.append(Record(
                        key=r["key"], config=json.loads(r["config"]), status=Status(r["status"]),
                        **{k: r[k] for k in ("latency_ms", "latency_min_ms", "latency_q25_ms",
                                             "latency_q75_ms", "latency_max_ms", "repeats",
                                             "tflops", "rel_error", "build_s", "run_s", "stage",
                                             "source")},
                        error=r["error"] or "",
                        features={k: r[k] for k in _FEATURES if r[k] is not None},
                        measured_on=(json.loads(r["measured_on"]) if r.get("measured_on")
                                     else None)))
                except (TypeError, ValueError) as e:
                    raise StoreError(f"{self.path}: row {r.get('id')} cannot be read ({e})") \
                        from None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} cannot be read ({e})") from None
        return out


def _row(record: Record, session: int | None) -> dict[str, Any]:
    """The columns of a record as the store holds them."""
    return {
        "key": record.key, "config": json.dumps(record.config, sort_keys=True),
        "status": str(record.status),
        **{k: getattr(record, k) for k in (
            "latency_ms", "latency_min_ms", "latency_q25_ms", "latency_q75_ms",
            "latency_max_ms", "repeats", "tflops", "rel_error", "build_s", "run_s", "stage",
            "error", "source")},
        **{k: record.features.get(k) for k in _FEATURES},
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

    if not os.path.exists(path):
        raise StoreError(f"record store {path} does not exist")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        df = pd.read_sql("SELECT * FROM measurements ORDER BY id", conn)
    except Exception as e:  # noqa: BLE001
        raise StoreError(f"{path} is not a bocast record store ({e})") from None
    finally:
        conn.close()
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

DATASET_COLUMNS = ("status", "latency_ms", "latency_min_ms", "latency_q25_ms", "latency_q75_ms",
                   "latency_max_ms", "repeats", "tflops", "rel_error", "build_s", "run_s",
                   *_FEATURES, "stage")


def export_dataset(store_path: str, out_prefix: str, meta: Mapping[str, Any]) -> tuple[str, str]:
    """Write ``<prefix>.csv.gz`` (one row per measurement: knob columns, status, timings,
    features; errors dropped) and ``<prefix>.json`` (workload, provenance, references)."""
    df = load(store_path)
    knob_cols = [c for c in df.columns if c not in DATASET_COLUMNS and c not in (
        "id", "key", "error", "source", "session", "created", "measured_on")]
    df = df[knob_cols + list(DATASET_COLUMNS)]
    for col in df.columns:  # integer-valued knob columns stay integers (nullable for inactive)
        if col in knob_cols and df[col].dtype.kind == "f":
            df[col] = df[col].astype("Int64")
    csv_path, meta_path = out_prefix + ".csv.gz", out_prefix + ".json"
    with atomic_write(csv_path, "wb") as raw, gzip.open(raw, "wt", compresslevel=9) as f:
        df.to_csv(f, index=False, float_format="%.6g")
    with atomic_write(meta_path) as f:
        json.dump({"rows": len(df), "knob_columns": knob_cols, **meta}, f, indent=1, sort_keys=True)
    return csv_path, meta_path


def load_dataset(prefix: str):
    """(DataFrame, meta) of a dataset written by :func:`export_dataset`."""
    import pandas as pd

    with open(prefix + ".json") as f:
        meta = json.load(f)
    return pd.read_csv(prefix + ".csv.gz"), meta


def dataset_configs(df, knob_columns: Iterable[str], space) -> list[dict[str, Any]]:
    """Configurations of a dataset's rows, rebuilt from its knob columns. A value that is not
    one a knob can take as read (a fraction where an integer belongs, a missing column) raises
    ValueError naming the row (1 = the first under the header) and the knob."""
    from bocast.space import Split

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
