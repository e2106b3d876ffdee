"""The replay runner: a recorded dataset served as a tabular benchmark.

Only the dataset's configurations can be measured (strategies draw from
:class:`~bocast.candidates.TableCandidates`); a measurement returns the recorded row, failures
with their recorded status; a simulated clock advances by the recorded build and run time. This
is the default runner on a machine without a GPU.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from bocast.candidates import TableCandidates
from bocast.measure.status import Status
from bocast.operator import Operator, canonical_workload
from bocast.records import Record, dataset_configs, load_dataset
from bocast.space import Config, Space


class ReplayError(ValueError):
    pass


class ReplayDataset:
    def __init__(self, prefix: str, op: Operator):
        try:
            df, meta = load_dataset(prefix)
        except FileNotFoundError as e:
            raise ReplayError(f"dataset {prefix}: {e.filename} not found") from None
        if _canon(canonical_workload(meta.get("workload") or {})) != _canon(
                canonical_workload(op.workload)):
            raise ReplayError(f"dataset {prefix} was recorded for workload {meta.get('workload')}, "
                              f"not {op.workload}")
        self.prefix, self.meta, self.op = prefix, meta, op
        self.configs = dataset_configs(df, meta["knob_columns"], op.space)
        self.rows = df.to_dict("records")
        self.index = {Space.key(c): i for i, c in enumerate(self.configs)}
        ok = [r["tflops"] for r in self.rows if r["status"] == "ok" and _num(r["tflops"])]
        self.best_tflops = max(ok) if ok else None
        self.reference = meta.get("reference")

    def candidates(self) -> TableCandidates:
        return TableCandidates(self.op.space, self.configs)

    def record(self, config: Config, source: str = "") -> Record:
        key = Space.key(config)
        i = self.index.get(key)
        if i is None:
            raise ReplayError(f"configuration {key} is not in dataset {self.prefix}")
        r = self.rows[i]
        return Record(
            key, _jsonable(config), Status(r["status"]),
            **{k: _num(r.get(k)) for k in ("latency_ms", "latency_min_ms", "latency_q25_ms",
                                           "latency_q75_ms", "latency_max_ms", "tflops",
                                           "rel_error", "build_s", "run_s")},
            repeats=int(r["repeats"]) if _num(r.get("repeats")) is not None else None,
            features={k: float(r[k]) for k in ("registers", "smem_bytes", "dynamic_smem_bytes",
                                               "spill_stores", "spill_loads", "stack_bytes")
                      if _num(r.get(k)) is not None},
            stage=r.get("stage") if isinstance(r.get("stage"), str) else None,
            error="replayed" if r["status"] != "ok" else "", source=source)


class ReplayMeasurer:
    """Measures by lookup; same ``measure`` signature as the live engine's Measurer."""

    name = "replay"

    def __init__(self, dataset: ReplayDataset, store=None):
        self.dataset, self.store = dataset, store
        self.clock_s = 0.0
        self.session = store.start_session({"runner": "replay", "dataset": dataset.prefix}) \
            if store is not None else None

    def prepare(self, configs: Sequence[Config], *, source: str = "", on_record=None):
        """The engine's two-phase interface (:func:`bocast.tuner.run_interleaved`); a lookup
        has nothing to build, so all the work happens in :meth:`run`."""
        return list(configs), source, on_record

    def run(self, batch) -> list[Record]:
        configs, source, on_record = batch
        return self.measure(configs, source=source, on_record=on_record)

    def measure(self, configs: Sequence[Config], *, source: str = "", on_record=None) -> list[Record]:
        out = []
        for c in configs:
            rec = self.dataset.record(c, source)
            self.clock_s += (rec.build_s or 0.0) + (rec.run_s or 0.0)
            if self.store is not None:
                self.store.append(rec, self.session)
            out.append(rec)
            if on_record is not None:
                on_record(rec)
        return out


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _jsonable(config: Config) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}


def _canon(obj: Any) -> str:
    import json

    return json.dumps(obj, sort_keys=True)
