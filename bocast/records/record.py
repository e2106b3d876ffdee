"""One record: the measured fields of a kernel, defined once (:class:`Measurement`, :class:`Record`,
:data:`FEATURES`), the check every writer of a record makes (:func:`check_record`), and the one
definition of a run's best kernel (:func:`best_record`). The store (:mod:`bocast.records.store`) and
the datasets (:mod:`bocast.records.datasets`) derive their columns from here."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_args, get_type_hints

from bocast.errors import InputError
from bocast.records.status import Status


class RecordError(InputError):
    """A record whose fields are not a measurement (the message names the field)."""


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
    # the GPU's state right after the timed repeats (NVML): a figure timed at a clock well
    # below the run's others is flagged (issue 40); rows from before have none
    sm_clock_mhz: float | None = _measured("SM clock after the timed repeats (MHz, NVML)",
                                           optional=True)
    power_w: float | None = _measured("board power after the timed repeats (W, NVML)",
                                      optional=True)
    temperature_c: float | None = _measured("GPU temperature after the timed repeats (C, NVML)",
                                            optional=True)
    # the kernel's CUDA-graph replays alternating with the reference's in one task (runner
    # option paired): a ratio of readings a millisecond apart, free of the clock's drift over a
    # run (1380-1860 MHz in one tune on an H200), which the TFLOPS carry; rows from before, and
    # kernels timed alone, have none
    vs_reference: float | None = _measured(
        "the reference's time over the kernel's: the median over pairs of replays timed "
        "alternating with the reference (above 1: faster than it)", optional=True)


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


def speed(records: Iterable[Record]) -> Callable[[Record], float]:
    """What a run ranks its kernels by, as a key of one record: the ratio to the reference
    timed beside it (``vs_reference``) where every succeeded record of ``records`` has one,
    else TFLOPS. The ratio's scale is not TFLOPS', and the strategies use it only for order
    and relative size (log y, fitness over the best), so a run never mixes the two: a run with
    one kernel timed alone (a store from before, a runner that times alone) ranks by TFLOPS."""
    if ranks_by_ratio(records):
        return lambda r: r.vs_reference or 0.0
    return lambda r: r.tflops or 0.0


def ranks_by_ratio(records: Iterable[Record]) -> bool:
    """Whether :func:`speed` of ``records`` is the paired ratio: every succeeded one has it."""
    return all(r.vs_reference for r in records if r.succeeded)


def best_record(records: Iterable[Record]) -> Record | None:
    """The succeeded record of highest :func:`speed` (the first of equals); None if none
    succeeded. The one definition of a run's best kernel."""
    records = list(records)
    return max((r for r in records if r.succeeded), key=speed(records), default=None)


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


#: The most TFLOPS a record may claim: 10x the dense fp16 Tensor Core peak of the H100 SXM
#: (989 TFLOPS), the fastest GPU bocast targets. A real kernel stays below its GPU's peak; a
#: value far above it is a timing bug (a kernel that did no work, a latency in the wrong unit),
#: and one such row would become the best of every run or dataset holding it, and so the
#: target of every "95% of the best". The margin leaves room for a faster GPU before this one
#: constant has to change.
MAX_TFLOPS = 10_000.0

#: the GPU model the stand-in's records name (synthetic timings, :mod:`bocast.measure.standin`):
#: the records library knows synthetic records by it. Defined with the record's fields, so that
#: the library reads it without importing a runner.
STANDIN_GPU = "stand-in (no GPU; synthetic timings)"


def check_record(record: Record) -> None:
    """Raise :class:`RecordError` naming the first field of ``record`` that no measurement can
    hold: every measured value None or a finite number of its type (not a bool), latencies
    above zero and no other value below it, TFLOPS above zero and at most :data:`MAX_TFLOPS`
    for status ok and absent for a failure, ``features`` a mapping of known names to such
    numbers, the text fields text. Every writer of a record calls it
    (:meth:`bocast.records.store.Store.append`, a replay dataset as it is opened), so a row that is
    written can always be read back."""
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
