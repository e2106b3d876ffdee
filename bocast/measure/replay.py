"""The replay runner: a recorded dataset served as a tabular benchmark.

Only the dataset's configurations can be measured (strategies draw from
:class:`~bocast.space.candidates.TableCandidates`); a measurement returns the recorded row, failures
with their recorded status; a simulated clock advances by the recorded build and run time. This
is the default runner on a machine without a GPU. :class:`ReplayRunner` answers whole records
(a :class:`~bocast.measure.runner.RecordRunner`); ``make_runner("replay", dataset=...)`` makes
it and :func:`bocast.measure.parts.make_measurer` its measurer.
"""

from __future__ import annotations

import json
from typing import Any

from bocast.errors import InputError
from bocast.measure.runner import RecordRunner
from bocast.records.datasets import (
    DATASET_COLUMNS,
    dataset_configs,
    dataset_csv,
    locate,
    shipped_datasets,
)
from bocast.records.library import portable
from bocast.records.record import OPTIONAL, Record, RecordError, check_record, measured_values
from bocast.records.status import Status
from bocast.space.candidates import TableCandidates
from bocast.space.knobs import Config
from bocast.space.operators.operator import Operator, canonical_workload
from bocast.space.space import Space

#: columns read as numbers (the others: status and stage, text)
NUMERIC = tuple(c for c in DATASET_COLUMNS if c not in ("status", "stage"))


class ReplayError(InputError):
    pass


class ReplayDataset:
    """A recorded dataset, checked whole when it is opened (a bad row would otherwise surface
    as a traceback at the trial that first reads it): files readable, its workload the
    operator's, the columns present, every value of the right type, every status known, every
    row a record that :func:`bocast.records.record.check_record` accepts (the check of every record
    written: an ``ok`` row's TFLOPS positive and possible, ...), every configuration
    structurally valid and unique. An
    error names the file and, for a value, the data row (1 = the first under the header).
    ``prefix`` is found as :func:`bocast.records.datasets.locate` finds it (a shipped dataset by its
    name); :attr:`prefix` is the path opened."""

    def __init__(self, prefix: str, op: Operator):
        prefix = locate(prefix)
        meta = _read_meta(prefix)
        check_workload(prefix, meta, op)
        df = _read_rows(prefix, meta)
        self.prefix, self.meta, self.op = prefix, meta, op
        self.configs = _configs(dataset_csv(prefix), df, meta["knob_columns"], op.space)
        self.rows = df.to_dict("records")
        self.index = {Space.key(c): i for i, c in enumerate(self.configs)}
        for i, c in enumerate(self.configs):  # each row as the record it replays
            try:
                check_record(self.record(c))
            except RecordError as e:
                raise ReplayError(f"dataset {dataset_csv(prefix)} row {i + 1}: {e}") from None
        ok = [r["tflops"] for r in self.rows if r["status"] == "ok"]  # each checked above
        self.best_tflops = max(ok) if ok else None
        self.reference = meta.get("reference")
        self._candidates: TableCandidates | None = None

    def candidates(self) -> TableCandidates:
        """The dataset's configurations as candidates: one shared object (its index takes a
        tenth of a second to build, and it holds no state of any strategy)."""
        if self._candidates is None:
            self._candidates = TableCandidates(self.op.space, self.configs, self.op.workload)
        return self._candidates

    def record(self, config: Config, source: str = "") -> Record:
        key = Space.key(config)
        i = self.index.get(key)
        if i is None:
            raise ReplayError(f"configuration {key} is not in dataset {self.prefix}")
        r = self.rows[i]
        return Record(
            key, _jsonable(config), Status(r["status"]), **measured_values(r),
            stage=r.get("stage") if isinstance(r.get("stage"), str) else None,
            error="replayed" if r["status"] != "ok" else "", source=source)


class ReplayRunner(RecordRunner):
    """A recorded dataset as a runner: a configuration's record is its row (build outcome,
    features and timing as recorded); the device and the reference are the dataset's."""

    name = "replay"

    def __init__(self, dataset: ReplayDataset):
        self.dataset = dataset

    def record(self, config: Config, source: str = "") -> Record:
        return self.dataset.record(config, source)

    def origin(self) -> dict[str, Any]:
        """The dataset replayed, as a run names a source (:func:`bocast.records.library.portable`: a
        shipped one by its name): ``bocast report`` reads its recorded reference there."""
        return {"dataset": portable(self.dataset.prefix)}

    def reference(self, op: Operator) -> dict[str, Any] | None:
        return self.dataset.reference

    def device(self) -> dict[str, Any]:
        return dict(self.dataset.meta.get("device") or {})


def check_workload(prefix: str, meta: dict[str, Any], op: Operator) -> None:
    """A ReplayError unless the dataset of ``prefix`` (its .json: ``meta``) is of ``op``'s
    workload."""
    if _canon(canonical_workload(meta["workload"])) != _canon(canonical_workload(op.workload)):
        raise ReplayError(f"dataset {prefix} was recorded for workload {meta.get('workload')}, "
                          f"not {op.workload}")


def _read_meta(prefix: str) -> dict[str, Any]:
    path = prefix + ".json"
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise ReplayError(f"dataset {prefix}: {path} not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReplayError(f"dataset {path}: not readable JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ReplayError(f"dataset {path}: expected a JSON object")
    if not isinstance(meta.get("workload"), dict):
        raise ReplayError(f"dataset {path}: workload missing or not an object")
    cols = meta.get("knob_columns")
    if not (isinstance(cols, list) and cols and all(isinstance(c, str) for c in cols)):
        raise ReplayError(f"dataset {path}: knob_columns missing or not a list of names")
    return meta


def _read_rows(prefix: str, meta: dict[str, Any]):
    import gzip
    import lzma
    import zlib

    import pandas as pd

    path = dataset_csv(prefix)
    try:
        df = pd.read_csv(path, dtype={c: str for c in ("status", "stage")})
    except FileNotFoundError:
        raise ReplayError(f"dataset {prefix}: {path} not found") from None
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError, UnicodeDecodeError,
            pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ReplayError(f"dataset {path}: cannot be read ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]})") from None
    missing = [c for c in (*meta["knob_columns"], *DATASET_COLUMNS)
               if c not in df.columns and c not in OPTIONAL]
    if missing:
        raise ReplayError(f"dataset {path}: missing column(s) {missing}")
    for c in DATASET_COLUMNS:  # a column newer than the dataset: not measured
        if c not in df.columns:
            df[c] = float("nan")
    if not len(df):
        raise ReplayError(f"dataset {path}: no rows")
    if isinstance(meta.get("rows"), int) and meta["rows"] != len(df):
        raise ReplayError(f"dataset {path}: {len(df)} rows, but its .json says {meta['rows']} "
                          "(truncated or mixed up)")
    for col in NUMERIC:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df[col].notna() & values.isna()
        _first_bad(path, bad, lambda i, c=col: f"{c} {df[c].iloc[i]!r} is not a number")
        df[col] = values
    statuses = {s.value for s in Status}
    bad = ~df["status"].isin(statuses)
    _first_bad(path, bad, lambda i: f"status {df['status'].iloc[i]!r} is not one of "
                                     f"{sorted(statuses)}")
    return df


def _first_bad(path: str, bad, message) -> None:
    import numpy as np

    rows = np.flatnonzero(np.asarray(bad))
    if len(rows):
        more = f" (and {len(rows) - 1} more rows)" if len(rows) > 1 else ""
        raise ReplayError(f"dataset {path} row {rows[0] + 1}: {message(int(rows[0]))}{more}")


def _configs(path: str, df, knob_columns, space) -> list[Config]:
    """Every row's configuration, each structurally valid for ``space`` and none twice."""
    try:
        configs = dataset_configs(df, knob_columns, space)
    except ValueError as e:
        raise ReplayError(f"dataset {path} {e}") from None
    seen: dict[str, int] = {}
    for i, c in enumerate(configs):
        problems = space.structural_violations(c)
        if problems:
            raise ReplayError(f"dataset {path} row {i + 1}: not a configuration of the "
                              f"workload's schedule space ({', '.join(problems)})")
        j = seen.setdefault(Space.key(c), i)
        if j != i:
            raise ReplayError(f"dataset {path} row {i + 1}: the configuration of row {j + 1} "
                              "again (a dataset holds each configuration once)")
    return configs


def _jsonable(config: Config) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


def shipped_dataset_for(workload: dict, *, space_auto: bool) -> tuple[str, str]:
    """(the shipped dataset that replays ``workload``, the space it was recorded in): the one
    of the most rows. Replay can only answer what was measured, so where the space was left to
    ``auto`` and no shipped dataset holds auto's choice (v3 now takes operators whose shipped
    tables are v2's), the same workload recorded in another space is taken. An InputError
    when none is shipped."""
    fits = []
    for prefix in shipped_datasets():
        with open(prefix + ".json") as f:
            meta = json.load(f)
        recorded = canonical_workload(meta.get("workload", {}))
        same = recorded == canonical_workload(workload)
        other_space = space_auto and {**recorded, "space": None} == {**workload, "space": None}
        if same or other_space:
            fits.append((not same, -int(meta.get("rows") or 0), prefix, recorded["space"]))
    if not fits:
        raise InputError(f"runner replay: no shipped dataset of {workload.get('op')} "
                         f"{workload.get('shape')} (space {workload.get('space')}); give "
                         "dataset (--dataset)")
    _, _, prefix, space = min(fits)
    return prefix, space
