"""Append-only record store (SQLite in WAL mode), and its rows as a pandas DataFrame.

Why SQLite/WAL rather than JSONL: every row is one committed transaction, so a process killed
with SIGKILL leaves either the whole row or none of it (a JSONL line can be half-written); the
unique key on the configuration makes a second insert of the same configuration an error rather
than a silent duplicate; and pandas reads it in one call (:func:`load`).

A store belongs to one workload: opening it for another workload, or opening a file that is not
a bocast store or is damaged (SQLite's ``quick_check``), raises :class:`StoreError` and leaves
the file untouched: nothing is written to a store before these checks pass.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from bocast import interrupt
from bocast.errors import InputError
from bocast.records.record import (
    _TYPES,
    FEATURES,
    MEASURED,
    Record,
    RecordError,
    check_record,
    measured_values,
)
from bocast.records.status import Status
from bocast.space.operators.operator import canonical_workload

#: Changes only with an incompatible change of the tables. A new measured value is a new
#: nullable column: a store written before it gets the column when opened (its rows read None),
#: and older code reads a newer store by column name, ignoring what it does not know.
SCHEMA_VERSION = 1


class StoreError(InputError):
    """A record store that cannot be used for this run (corrupt, foreign, another workload)."""


#: one row per measured batch of a live run: what was read beside its kernels (JSON)
_BATCHES = ("CREATE TABLE batches (id INTEGER PRIMARY KEY AUTOINCREMENT, session INTEGER, "
            "created TEXT, info TEXT)")

#: the measurements table, from the record's fields (bocast.records.record)
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


class Store:
    """Records of one workload in one SQLite file. Rows are only ever inserted."""

    def __init__(self, path: str, workload: Mapping[str, Any], *, create: bool = True):
        self.path = path
        self.workload = dict(workload)
        self.readonly = self.closed = False
        had_file = os.path.exists(path)
        exists = had_file and os.path.getsize(path) > 0
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
                if not exists:  # e.g. a full disk: no stub that this command would then refuse
                    self._remove_stub(had_file)
                raise StoreError(f"cannot open record store {path} for writing ({e})") from None

    def _remove_stub(self, had_file: bool) -> None:
        """Undo a failed creation (issue 42: a full disk left SQLite's 4 KB header, which the
        same command then refused): the file removed (emptied if it was there), -wal/-shm too."""
        if getattr(self, "_conn", None) is not None:
            self._conn.close()
        for extra in ("-wal", "-shm", ""):
            with contextlib.suppress(OSError):
                if extra or not had_file:
                    os.remove(self.path + extra)
                else:
                    os.truncate(self.path, 0)

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
        """Give a store written before a column (or the batches table) existed that column
        (its rows read None) and that table."""
        have = {r[1] for r in self._conn.execute("PRAGMA table_info(measurements)")}
        for name, kind in _COLUMNS.items():
            if name not in have:
                self._conn.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
        self._conn.execute(_BATCHES.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))

    def _create(self) -> None:
        with self._conn:
            self._conn.execute("BEGIN")
            self._conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
            self._conn.execute("CREATE TABLE measurements ("
                               + ", ".join(f"{n} {t}" for n, t in _COLUMNS.items()) + ")")
            self._conn.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                               "started TEXT, provenance TEXT)")
            self._conn.execute(_BATCHES)
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

    def add_batch(self, session: int | None, info: Mapping[str, Any]) -> None:
        """One measured batch's readings (:class:`bocast.measure.engine.Measurer`: the
        reference re-timed after it, the GPU's clock, power and temperature), in order."""
        self._writable()
        with interrupt.held(), self._lock, self._conn:
            self._conn.execute("INSERT INTO batches (session, created, info) VALUES (?, ?, ?)",
                               (session, _now(), json.dumps(info, sort_keys=True)))

    def batches(self) -> list[dict[str, Any]]:
        """Every batch's readings in order, ``{"id", "session", "created", **info}``; none
        for a store written before batches were recorded."""
        try:
            rows = self._conn.execute("SELECT id, session, created, info FROM batches "
                                      "ORDER BY id").fetchall()
        except sqlite3.OperationalError:  # no such table: a store from before, read-only
            return []
        return [{"id": i, "session": s, "created": c, **json.loads(info)}
                for i, s, c, info in rows]

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
                    record = Record(
                        key=r["key"], config=json.loads(r["config"]), status=Status(r["status"]),
                        **measured_values(r), stage=r["stage"], source=r["source"],
                        error=r["error"] or "",
                        measured_on=(json.loads(r["measured_on"]) if r.get("measured_on")
                                     else None))
                    # a row edited or written by another program (TFLOPS negative, infinite)
                    # would reach a model or a ranking: refused as the writer refuses it
                    check_record(record)
                    out.append((r["id"], r["session"], record))
                except (TypeError, ValueError, RecordError) as e:
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
        "created": _now(),
    }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


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
