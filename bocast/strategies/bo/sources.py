"""Warm-start sources (issue 11, "transfer"): reading a source's records and carrying them into
the target's space. The source model built on them is :mod:`bocast.strategies.bo.transfer`'s.

A *source* is a recorded dataset (prefix) or a record store of the target's operator, space,
dtype and layout on another (or the same) shape, or of another operator that runs the same
Tensor Core matmul schedule (:func:`same_schedule`: a convolution is an implicit GEMM, a bmm a
batched one, and space v2 gives each the GEMM's knobs); :func:`incompatibility` is the one
check of explicit and ``auto`` sources.

**Translation.** A source configuration is carried into the target's space by keeping every
knob and, in each split, every level but the outermost; the outermost (thread blocks, or k
tiles) is recomputed for the target's extent. A 128 x 128 block tile of 4 warps stays that
tile; only the grid changes. Rows whose inner levels do not divide the target's extent are
dropped. Feasibility in the target is not required: the model only needs the encoding. A choice
knob the source's operator lacks (bmm's ``batch_bind`` under GEMM records) takes its first
value (a column no source varies is left out of the source model, so the value says nothing);
knobs only the source has are dropped.

**Rescaling.** Where both spaces derive a wave efficiency (v3) and both workloads are
compute-bound, a row's TFLOPS is carried over as what it should reach at the target's shape:
times the ratio of its tile slots doing real work there and at the source
(:func:`_wave_efficiencies`). Everything downstream (the best rows that start a run, the source
model, ``bocast suggest``'s predictions) reads the rescaled value.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bocast.errors import InputError
from bocast.measure.replay import ReplayDataset, ReplayError, _read_meta
from bocast.records.datasets import dataset_csv, locate
from bocast.records.public import Store, StoreError
from bocast.space.operators.operator import WorkloadError, canonical_workload, from_workload
from bocast.space.space import Config, Space, Split


class WarmStartError(InputError):
    """A warm-start source that cannot be used."""


@dataclass
class Source:
    """One source's successful rows, translated: configurations in the target's space, and the
    log TFLOPS each is expected to reach at the target's shape (measured, rescaled by
    :func:`_wave_efficiencies`)."""

    path: str
    workload: dict[str, Any]
    configs: list[Config]
    log_tflops: np.ndarray
    dropped: int  # ok rows whose splits do not fit the target's extents


def _workload(path: str) -> dict[str, Any]:
    """The workload a dataset (prefix) or a record store (``.db``) was recorded for."""
    import sqlite3

    if not path.endswith(".db"):
        try:
            return _read_meta(path)["workload"]
        except ReplayError as e:
            raise WarmStartError(f"warm_start: {e}") from None
    if not os.path.isfile(path):
        raise WarmStartError(f"warm_start: record store {path} not found")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
        finally:
            conn.close()
        if meta.get("format") != "bocast-records":
            raise ValueError("no bocast format mark")
        return json.loads(meta["workload"])
    except (sqlite3.DatabaseError, KeyError, ValueError) as e:
        raise WarmStartError(f"warm_start: {path} is not a readable bocast record store "
                             f"({e})") from None


#: a dataset's ok rows per (its files' paths, modification times and sizes, the source
#: operator's workload): a process that resolves ``warm_start: auto`` for many targets (an
#: ablation's or a comparison's configuration: every table or arm ranks the same shipped
#: datasets) reads and checks each dataset once. A record store is read each time (a live
#: store grows). The rows are shared: read them, never change them.
_DATASET_ROWS: dict[tuple, list[tuple[Config, float]]] = {}
_DATASET_ROWS_MAX = 32


def cached(cache: dict, key: Any, make: Callable[[], Any], limit: int) -> Any:
    """``cache[key]``, made by ``make()`` the first time; the oldest entries go to keep at most
    ``limit`` (this module's and bocast.strategies.bo.transfer's per-process caches)."""
    if key not in cache:
        value = make()
        while len(cache) >= limit:
            cache.pop(next(iter(cache)))
        cache[key] = value
    return cache[key]


def _dataset_key(path: str, op) -> tuple:
    files = [os.path.abspath(f) for f in (path + ".json", dataset_csv(path))]
    return (*((f, os.path.getmtime(f), os.path.getsize(f)) if os.path.exists(f) else (f,)
              for f in files), json.dumps(op.workload, sort_keys=True))


def _ok_rows(path: str, op) -> list[tuple[Config, float]]:
    """(configuration of ``op``'s space, TFLOPS) of every ok row, checked as replay checks a
    dataset (a store: as a store is opened)."""
    try:
        if not path.endswith(".db"):
            return cached(_DATASET_ROWS, _dataset_key(path, op), lambda: _dataset_ok_rows(
                ReplayDataset(path, op)), _DATASET_ROWS_MAX)
        with Store.open(path, op.workload) as store:  # only read: nothing created
            return [(op.space.from_json(r.config), float(r.tflops)) for r in store.records()
                    if r.succeeded]
    except (ReplayError, StoreError) as e:
        raise WarmStartError(f"warm_start: {e}") from None


def _dataset_ok_rows(ds: ReplayDataset) -> list[tuple[Config, float]]:
    return [(c, float(r["tflops"])) for c, r in zip(ds.configs, ds.rows) if r["status"] == "ok"]


def translate(config: Config, target: Space) -> Config | None:
    """``config`` of a source's space carried into ``target``: splits keep their inner levels
    and take the outermost from the target's extent, a choice knob the source lacks takes its
    first value, knobs ``target`` lacks are dropped (None when the inner levels do not divide
    the extent, or the result is not a structural configuration of ``target``). A knob with a
    default (one added after the source was recorded: conv2d v3's ``a_load``, which the pixel
    tile's knobs depend on) takes its default, as :meth:`Space.complete` reads old records."""
    config = dict(target.complete(config))
    if any(n not in config for n in target.conditioning):
        return None
    cond = {n: config[n] for n in target.conditioning}
    out = {}
    for k in target.knobs:
        v = config.get(k.name)
        if k.name not in config:
            if isinstance(k, Split):
                return None
            out[k.name] = k.domain(cond)[0] if k.is_active(cond) else None
        elif isinstance(k, Split) and v is not None:
            inner = math.prod(v[1:])
            extent = k.extent_for(cond)
            if extent % inner:
                return None
            out[k.name] = (extent // inner, *v[1:])
        else:
            out[k.name] = v
    return None if target.structural_violations(out) else out


def _fill_feasible(configs: list[Config], names: Sequence[str], target: Space) -> list[Config]:
    """``configs`` (translated) where the knobs ``names`` the source lacks, at their first value
    (:func:`translate`), make a configuration infeasible for ``target``: the first combination
    of their values, in domain order, that is feasible (the row unchanged if none is). A GEMM
    row carried into conv2d's v3 space needs a pixel tile (tile_w, tile_h) whose BM / (tile_w
    tile_h) images fit the batch; the first, 1 x 1, never does for BM 64 on 16 images, and so
    no GEMM source row could start a conv2d run."""
    if not names or not configs:
        return configs
    bad = [i for i, v in enumerate(target.validate_many(configs)) if v]
    out = list(configs)
    for i in bad:
        cond = {n: configs[i][n] for n in target.conditioning}
        domains = [target.knob(n).domain(cond) if target.knob(n).is_active(cond) else [None]
                   for n in names]
        trial = [{**configs[i], **dict(zip(names, combo))}
                 for combo in itertools.islice(itertools.product(*domains), 4096)]
        ok = np.flatnonzero(target.feasible_mask(target.columns(trial)))
        if len(ok):
            out[i] = trial[int(ok[0])]
    return out


def load_sources(paths: Sequence[str], target_op) -> list[Source]:
    """Every source read, checked against the target and translated; a
    :class:`WarmStartError` names the first that cannot be used. A dataset is found as
    :func:`bocast.records.datasets.locate` finds it (a shipped dataset by its name)."""
    located = [locate(p) for p in paths]
    return [_source(path, target_op) if path.endswith(".db")  # a live store grows: read it
            else cached(_SOURCES, (_dataset_key(path, target_op), path),
                        functools.partial(_source, path, target_op), _DATASET_ROWS_MAX)
            for path in located]


#: a dataset translated for a target, per (its files' stamps, the target's workload): a run's
#: automatic choice checks each candidate source (warm_sources), then its model reads the ones
#: chosen; each is translated once. Shared like :data:`_DATASET_ROWS`: never changed.
_SOURCES: dict[tuple, Source] = {}


def _source(path: str, target_op) -> Source:
    workload = _workload(path)
    got = canonical_workload(workload)
    problem, src_op = incompatibility(workload, target_op)
    if problem:
        raise WarmStartError(f"warm_start: {path} holds records of {problem}")
    try:
        src_op = src_op or from_workload(workload)
    except WorkloadError as e:
        raise WarmStartError(f"warm_start: {path}: {e}") from None
    rows = _ok_rows(path, src_op)
    if not rows:
        raise WarmStartError(f"warm_start: {path} has no successful (ok) rows")
    kept, configs, ys = [], [], []
    for c, tflops in rows:
        t = translate(c, target_op.space)
        if t is not None:
            kept.append(c)
            configs.append(t)
            ys.append(math.log(tflops))
    lacks = [k.name for k in target_op.space.knobs
             if not isinstance(k, Split) and k.name not in rows[0][0]]
    configs = _fill_feasible(configs, lacks, target_op.space)
    if not configs:
        raise WarmStartError(f"warm_start: {path}: none of its {len(rows)} ok rows fits the "
                             f"target's shape {list(target_op.workload['shape'])}")
    ys_arr, dropped = np.array(ys), len(rows) - len(configs)
    waves = _wave_efficiencies(kept, src_op, configs, target_op)
    if waves is not None:  # rescaled to the target's shape, and the rows' wave twins
        at_source, at_target = waves
        ys_arr = ys_arr + (np.log(at_target) - np.log(at_source))
        configs, ys_arr = _wave_twins(configs, ys_arr, at_target, target_op.space)
    return Source(path, got, configs, ys_arr, dropped)


#: knobs that change only how a persistent walk's tiles fill the SMs (``_hopper_tail``: the last
#: round's tiles cut into k slices), whose effect :func:`_wave_twins` carries into a source that
#: never varied them, from the wave efficiency as the rescaling does for the shape
WAVE_KNOBS = ("tail_split",)


def _wave_twins(configs: list[Config], ys: np.ndarray, waves: np.ndarray,
                space: Space) -> tuple[list[Config], np.ndarray]:
    """``configs`` and ``ys`` plus, for each row at the first value of a :data:`WAVE_KNOBS`
    knob that every row holds there (a table measured before the knob, or at one value of
    it), its twins at the knob's other values that the target's constraints admit, each
    expected at the row's value times the ratio of the twin's wave efficiency to the row's
    (both at the target, in ``space``; ``waves``: the rows'). Why: with no source row off
    tail_split 1, a warm run's first batch
    and source model cannot tell its values apart, and the twenty-first session's default
    tunes (H200) never ran the 128 x 192 kernels whose split last round re-timed 1.027-1.056
    of cuBLAS. Measured against that model (results/tail_split_h200), the gain is about half
    the predicted one (2048x28672x8192, tail 4: +2.7% measured, +4.1% predicted) and a loss at
    K = 1024 (-2 to -7%): twins start a run's search, the run's own trials decide. Called
    where the rows are rescaled (:func:`_wave_efficiencies`)."""
    knobs = {k.name: k for k in space.knobs if not isinstance(k, Split)}
    out, out_ys = list(configs), [ys]
    base = np.log(waves)
    for name in (n for n in WAVE_KNOBS if n in knobs):
        values = knobs[name].choices
        if any(c.get(name, values[0]) != values[0] for c in configs):
            continue  # the source varied it: its rows say what it does
        for v in values[1:]:
            twins = [{**c, name: v} for c in configs]
            cols = space.columns(twins)
            ok = np.flatnonzero(space.feasible_mask(cols))
            out += [twins[i] for i in ok]
            out_ys.append(ys[ok] + np.log(cols["wave_efficiency"][ok]) - base[ok])
    return out, np.concatenate(out_ys)


def _wave_efficiencies(configs: list[Config], source_op, translated: list[Config],
                       target_op) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's wave efficiency at the source and (``translated``) at the target, where both
    spaces derive it (space v3: ``wave_efficiency``, one CTA per SM) and both workloads are
    compute-bound (:data:`COMPUTE_BOUND`), else None; a row's TFLOPS is rescaled by their
    ratio (:func:`_source`). The same tile runs at the same speed per
    wave on the same SMs, so what changes with the shape is how many of its tile slots do real
    work: live on the H200, conv2d 16x28x28x128's cold best were 128 x 128 tiles (98 tiles:
    0.74), which rank low in the 14 x 14 table (50 tiles for 132 SMs), whose best 64 x 128
    tiles (0.74 there and at 28 x 28) filled the first batch. On the three exhaustive GEMM v3
    tables (the same 2,576 kernels at three shapes), between 1024^3 and the other two the log
    change of a kernel's TFLOPS follows this log ratio (correlation 0.90-0.91), and the order
    carried over (Spearman 0.17-0.19 against the target's) becomes 0.84-0.87. A memory-bound
    workload's time is its traffic, which idle SMs do not change: rescaled, bmm 32x1024x1024x128
    (57 flops a byte) started from 128 x 256 tiles of the GEMM 1024^3 table (4x: 32 tiles
    there) and its first batch reached 0.91 of cold's best@200 on each of 3 seeds, 0.98-1.00
    carried as measured (experiments/results/warm_default_live_h200.md)."""
    if not configs or min(source_op.arithmetic_intensity,
                          target_op.arithmetic_intensity) < COMPUTE_BOUND:
        return None
    space, target = source_op.space, target_op.space
    if not all("wave_efficiency" in sp.columns(c[:1]) for sp, c in
               ((space, configs), (target, translated))):
        return None
    return (space.columns(configs)["wave_efficiency"],
            target.columns(translated)["wave_efficiency"])


#: flops per byte (:attr:`bocast.space.operators.operator.Operator.arithmetic_intensity`) above
#: which a workload counts as compute-bound for :func:`_wave_efficiencies`: half the H100's
#: ridge point (989 dense fp16 TFLOPS over 3.35 TB/s is 295; the H200's, 4.8 TB/s, 206).
#: Measured cases lie far either side: the GEMM and conv2d workloads of the tables and live
#: checks 256-1,024, the bmms 28 and 57.
COMPUTE_BOUND = 150.0


def incompatibility(workload: Mapping[str, Any], target_op) -> tuple[str | None, Any]:
    """(why records of ``workload`` cannot be a source for ``target_op``, or None; the
    source's operator where it had to be built). A source is the same operator on another
    shape, another operator on the same matmul schedule (:func:`same_schedule`), or the same
    operator in another space whose knobs map one to one (:func:`same_knobs`): records of one
    space never seed another otherwise. The one check of explicit and ``auto`` sources."""
    got, want = canonical_workload(workload), canonical_workload(target_op.workload)
    differs = sorted(k for k in set(got) | set(want)
                     if k != "shape" and got.get(k) != want.get(k))
    if not differs:
        return None, None
    src_op = None
    if got.get("op") != want.get("op") and got.get("space") == want.get("space"):
        with contextlib.suppress(WorkloadError):  # it may still run the same schedule
            src_op = from_workload(workload)
        if src_op is not None and same_schedule(src_op, target_op):
            return None, src_op
    elif differs == ["space"]:
        with contextlib.suppress(WorkloadError):
            src_op = from_workload(workload)
        if src_op is not None and same_knobs(src_op.space, target_op.space):
            return None, src_op
    return (f"{_describe(got)}, not of the target's {_describe(want)} ({', '.join(differs)} "
            "differ); a source must be the same operator on another shape, or another "
            "operator on the same Tensor Core matmul (space, dtypes, operand layout)"), None


def same_knobs(a: Space, b: Space) -> bool:
    """Whether two spaces' knobs map one to one: the same names, kinds and choices (then a
    configuration of one is a configuration of the other)."""
    def knobs(s: Space) -> list:
        return [(k.name, type(k).__name__, getattr(k, "choices", None),
                 getattr(k, "parts", None)) for k in s.knobs]
    return knobs(a) == knobs(b)


def same_schedule(a, b) -> bool:
    """Whether operators ``a`` and ``b`` run the same Tensor Core matmul schedule: both are
    matmuls of one space (the same split knobs) with the same dtypes and operand layout, so a
    block tile of one is a block tile of the other."""
    ma, mb = getattr(a, "matmul", None), getattr(b, "matmul", None)
    if ma is None or mb is None:
        return False
    splits = {k.name for k in b.space.knobs if isinstance(k, Split)}
    return ((ma.space, ma.in_dtype, ma.acc_dtype, ma.trans_b)
            == (mb.space, mb.in_dtype, mb.acc_dtype, mb.trans_b)
            and a.workload.get("dtype") == b.workload.get("dtype")
            and a.workload.get("fuse") == b.workload.get("fuse")
            and splits <= {k.name for k in a.space.knobs})


def _describe(w: Mapping[str, Any]) -> str:
    rest = ", ".join(f"{k} {w[k]}" for k in sorted(w) if k not in ("op", "shape"))
    return f"{w.get('op')} ({rest})"
