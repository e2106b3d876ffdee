"""``warm_start: auto`` (:func:`resolve`): the sources a run starts from, picked from the records
library (:mod:`bocast.records.library`), and the options a warm run takes (:func:`warm_options`).

- **Compatible**: the records of the same schedule
  (:func:`bocast.strategies.bo.transfer.incompatibility`: the same operator, or another on the same
  Tensor Core matmul; the same space version unless the knobs map one to one; the same dtypes and
  layout) measured on the run's GPU model. Records of another model of the same architecture
  (compute capability and SM count: an H100 SXM's and an H200's; their kernels rank alike,
  experiments/results/warm_default_live_h200.md) count as the model's own, after them at the same
  distance, and the run names them; records of other GPU models are left out and the run says so.
  Where the run's GPU is not known before it starts (rpc without ``gpu_model``), every GPU's records
  count, named.
- **Never synthetic** records (a stand-in run's store,
  :attr:`bocast.records.library.Entry.synthetic`) but for a stand-in run: their TFLOPS say nothing
  of a GPU's.
- **Never the run's own**: not its dataset, not its own store (nor the library's copy of it);
  a replay run takes only shipped datasets of *other* workloads (so the answer never leaks
  into the search, and a replay result depends on the repository alone, never on a machine's
  library).
- **Ranked** by closeness of the workload: the same operator first, then the distance of the
  matmuls' extents (sum of |log2| ratios of batch, M, N, K), then more ok rows; one source
  per workload (the one with most ok rows), at most :data:`MAX_SOURCES`; a source none of
  whose rows fits the target's extents is passed over for the next.

A resumed run keeps the sources its store's identity names (:mod:`bocast.run.identity`).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bocast.errors import InputError
from bocast.measure.kinds import runner_class
from bocast.measure.standin import StandinRunner, run_task
from bocast.records import library
from bocast.records.datasets import locate
from bocast.records.library import Entry, _one_line, _store_entry, architecture, scan
from bocast.records.store import Store
from bocast.schema import ConfigError
from bocast.space.operators.operator import WorkloadError, canonical_workload, from_workload
from bocast.strategies import strategy_class
from bocast.strategies.bo.transfer import AUTO, WarmStartError, incompatibility, load_sources

#: at most this many sources for ``warm_start: auto``
MAX_SOURCES = 3


@dataclass
class Choice:
    """The sources ``warm_start: auto`` chose, and the lines a run prints about them."""

    sources: list[str]
    notes: list[str]


def _extents(op) -> tuple[float, ...]:
    mm = op.matmul
    return tuple(math.log2(max(int(x), 1)) for x in (mm.batch or 1, mm.M, mm.N, mm.K))


def choose(target_op, *, gpu: str | None, arch: tuple[str, int] | None = None,
           records: str | None = None, exclude: Sequence[str] = (),
           other_workloads: bool = False, shipped_only: bool = False,
           limit: int = MAX_SOURCES, also: Sequence[str] = ()) -> Choice:
    """The sources of ``warm_start: auto`` for ``target_op`` (see the module docstring).
    ``gpu``: the run's GPU model (None: not known); ``arch``: its (compute capability, SM
    count) (:func:`bocast.records.library.architecture`; None: not known): other models' records of
    the same architecture count too; ``exclude``: paths never used (the run's
    dataset, its store); ``other_workloads``: only records of other workloads (replay);
    ``shipped_only``: only shipped datasets (replay); ``also``: stores that are candidates
    beside the library whatever their GPU (the finished workloads of the same run of many,
    :mod:`bocast.many`: measured by the run's own runner), ranked with the rest."""
    entries, notes = scan(records, stores=not shipped_only)
    never = {os.path.abspath(locate(p)) for p in exclude}  # a shipped dataset by its name too
    want = canonical_workload(target_op.workload)
    own: list[Entry] = []
    others: list[Entry] = []  # records of another GPU model
    synthetic = 0
    for e in entries:
        if os.path.abspath(e.path) in never or (e.origin and os.path.abspath(e.origin) in never):
            continue
        if e.synthetic and e.gpu != gpu:  # the stand-in's only for a stand-in run
            synthetic += 1
            continue
        w = canonical_workload(e.workload)
        if (other_workloads and w == want) or (e.ok is not None and e.ok == 0):
            continue
        problem, _ = incompatibility(e.workload, target_op)
        if problem:
            continue
        (own if gpu is None or e.gpu == gpu else others).append(e)
    for path in also:  # the run's own (its library copies left out above): any GPU's
        e = _store_entry(path, stats=False)
        if e.ok and not incompatibility(e.workload, target_op)[0]:
            own.append(e)
    alike = [e for e in others if arch is not None and e.arch == arch]
    chosen = _pick(own + alike, target_op, want, limit, notes, gpu=gpu)
    other_gpu: dict[str, int] = {}
    for e in others:  # what the GPU model kept out (not what closer workloads did)
        if not (arch is not None and e.arch == arch):
            name = e.gpu or "GPU not recorded"
            other_gpu[name] = other_gpu.get(name, 0) + 1
    stand_in = [e for e in chosen if gpu is not None and e.gpu != gpu]
    if stand_in and arch is not None:
        models = ", ".join(sorted({str(e.gpu) for e in stand_in}))
        notes.append(f"warm start: {len(stand_in)} of the {len(chosen)} sources measured on "
                     f"{models}, the same architecture as this run's {gpu} (compute capability "
                     f"{arch[0]}, {arch[1]} SMs: the same kernels in the same waves; memory "
                     f"differs). --warm-start none for a cold start")
    if synthetic:
        notes.append(f"warm start: {synthetic} stand-in store(s) of the library left out "
                     "(synthetic timings)")
    if other_gpu:
        what = ", ".join(f"{n} of {g}" for g, n in sorted(other_gpu.items()))
        notes.append(f"warm start: records of other GPU models left out ({what}); this run's "
                     f"GPU: {gpu}")
    if gpu is None and chosen:
        gpus = sorted({e.gpu or "GPU not recorded" for e in chosen})
        notes.append(f"warm start: this run's GPU is not known before it starts; the sources "
                     f"were measured on {', '.join(gpus)}")
    if chosen:
        mine = {os.path.abspath(p) for p in also}  # a run's store named by its folder
        notes.append("warm start (auto) from " + "; ".join(
            (f"this run's {os.path.basename(os.path.dirname(os.path.abspath(e.path)))}"
             if os.path.abspath(e.path) in mine else e.name)
            + f" ({_brief(e.workload)}, {e.gpu or 'GPU not recorded'})" for e in chosen))
    else:
        notes.append("warm start (auto): no records of the same schedule"
                     + (f" on {gpu}" if gpu else "") + " in the library: a cold start")
    return Choice([e.path for e in chosen], notes)


def _pick(entries: Sequence[Entry], target_op, want: dict[str, Any], limit: int,
          notes: list[str], *, gpu: str | None) -> list[Entry]:
    """At most ``limit`` of ``entries``, closest workload first (the run's GPU model before
    another at the same distance), one per workload, each with rows that fit the target's
    extents (those without are passed over, with a note)."""
    ranked = []
    for e in entries:
        try:
            src = from_workload(e.workload)
            dist = sum(abs(a - b) for a, b in zip(_extents(src), _extents(target_op)))
        except (WorkloadError, AttributeError):
            continue
        ranked.append(((canonical_workload(e.workload).get("op") != want.get("op"),
                        round(dist, 6), gpu is not None and e.gpu != gpu,
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
    return chosen


def _brief(w: dict[str, Any]) -> str:
    return f"{w.get('op')} {'x'.join(map(str, w.get('shape', [])))} {w.get('space', 'v1')}"


def resolve(option: Any, target_op, *, runner: str, gpu: str | None,
            arch: tuple[str, int] | None = None, dataset: str | None = None,
            store: str | None = None, records: str | None = None,
            also: Sequence[str] = (), never: Sequence[str] = ()) -> Choice:
    """The sources of a run's ``warm_start`` option: ``auto`` chosen by :func:`choose` (replay:
    shipped datasets of other workloads only, and ``also``), ``none`` none, a list as it is.
    ``also``, ``never``: stores that may serve whatever the GPU, and stores (with their library
    copies) that never do (:func:`choose`)."""
    if option != AUTO:
        paths = option if isinstance(option, list) else []
        return Choice(list(paths), [f"warm start from {', '.join(paths)}"] if paths else [])
    replay = not runner_class(runner).live  # it reads recorded timings
    exclude = [p for p in (dataset, store, *never, *also) if p]
    return choose(target_op, gpu=gpu, arch=arch, records=records, exclude=exclude,
                  other_workloads=replay, shipped_only=replay, also=also)


def warm_options(strategy: str, options: dict[str, Any], sources: Sequence[str]) -> dict[str, Any]:
    """``options`` of a run whose ``warm_start: auto`` chose ``sources``: with the sources, and,
    where there are any, the strategy's :attr:`~bocast.strategies.base.Strategy.warm_defaults`
    for the options the run left unset, unless it gave one they yield to (a cold run, or an
    explicit list, keeps the plain defaults: explicit warm starts reproduce as they always
    did)."""
    cls = strategy_class(strategy)
    given = any(k in options for k in cls.warm_defaults_yield_to)
    extra = cls.warm_defaults if sources and not given else {}
    return {**{k: v for k, v in extra.items() if k not in options}, **options,
            "warm_start": list(sources)}


def run_architecture(runner: str, *, dataset=None) -> tuple[str, int] | None:
    """The (compute capability, SM count) of the GPU a run will measure on, known before it
    starts (:func:`bocast.records.library.architecture`): a runner that answers records (replay),
    its dataset's; one that times on this machine's GPU (local), that GPU's (asked in a child
    process: this one never initialises CUDA); else None (rpc, the stand-in)."""
    cls = runner_class(runner)
    if cls.answers_records:
        return architecture((getattr(dataset, "meta", None) or {}).get("device"))
    if not cls.needs_gpu:
        return None
    return _local_architecture()


@functools.cache
def _local_architecture() -> tuple[str, int] | None:
    """The local GPU's (compute capability, SM count), probed once a process (a tune run's
    workload and its warm start both ask)."""
    import subprocess
    import sys

    # the CUDA driver's attributes 75/76 (compute capability major/minor), 16 (SM count)
    probe = ("import ctypes as c;d=c.CDLL('libcuda.so.1');d.cuInit(0);h=c.c_int();"
             "d.cuDeviceGet(c.byref(h),0);v=[]\nfor a in (75,76,16):\n x=c.c_int();"
             "d.cuDeviceGetAttribute(c.byref(x),a,h);v.append(x.value)\nprint(*v)")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=30)
        major, minor, sms = (int(x) for x in out.stdout.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return (f"{major}.{minor}", sms) if sms > 0 else None


def run_gpu(runner: str, *, dataset=None, rpc: dict | None = None) -> str | None:
    """The GPU model a run will measure on, as its records will name it, known before it
    starts: replay (a runner that answers records), its dataset's; the stand-in's; rpc (an ``rpc``
    section), ``gpu_model`` where set; local (a runner that needs this machine's GPU), the
    local GPU's (nvidia-smi); else None (a runner of one's own: its GPU is not known before it
    starts)."""
    cls = runner_class(runner)
    if cls.answers_records:
        return (getattr(dataset, "meta", None) or {}).get("device", {}).get("gpu")
    if issubclass(cls, StandinRunner):
        return str(run_task({"kind": "device"})["gpu"])
    if rpc:
        model = rpc.get("gpu_model")
        return model if model and model != "any" else None
    if not cls.needs_gpu:
        return None
    import subprocess

    index = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader",
                              "-i", index], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() or None if lines else None


def for_run(cfg, op, dataset, store_path: str, folder: str, *, probe: bool = True,
            also: Sequence[str] = (), never: Sequence[str] = ()):
    """A tune run's warm-start sources (:class:`Choice`; ``cfg`` its TuneConfig) when its
    strategy has the option and it is ``auto``; None otherwise (a list or ``none``: used as
    given). A resumed run keeps the sources its store's identity names. ``probe`` False: the
    run's GPU is not known before it starts (a runner object's), so sources of any GPU may
    serve. ``also``, ``never``: as :func:`resolve` takes them (a workload of a run of many)."""
    given = cfg.strategy_options.get("warm_start", AUTO)
    if "warm_start" not in strategy_class(cfg.strategy).options.names or given != AUTO:
        return None
    if os.path.isfile(store_path) and os.path.getsize(store_path) > 0:
        with Store.open(store_path, op.workload) as store:
            held = (store.get_meta("run") or {}).get("resolved", {}).get("warm_start")
        if isinstance(held, list):
            paths = [library.local(p) for p in held]
            # a run carried to another machine (or whose library was cleared) lost a source
            # store: say so here, where the cause is known, not as a bare "not found" later
            gone = [n for n, p in zip(held, paths) if p.endswith(".db") and not os.path.isfile(p)]
            if gone:
                raise WarmStartError(
                    f"warm_start: this run began warm-started from {', '.join(gone)}, which is "
                    f"not here (a store of the records library of the machine it began on?); a "
                    f"resumed run needs the sources it began with: copy them back to that path, "
                    f"or tune into a new --output")
            return Choice(paths, [
                "warm start: as this run began, from " + (", ".join(held) or "nothing (cold)")])
    return resolve(AUTO, op, runner=cfg.runner, dataset=cfg.dataset, store=store_path,
                   records=folder, also=also, never=never,
                   gpu=run_gpu(cfg.runner, dataset=dataset, rpc=cfg.rpc) if probe else None,
                   arch=run_architecture(cfg.runner, dataset=dataset) if probe else None)


def identity_options(given: dict[str, Any], used: dict[str, Any]) -> dict[str, Any]:
    """The options a run's identity names: those given, and those ``warm_start: auto`` set
    (:func:`bocast.run.warm_sources.warm_options`); the sources are named apart (``warm_start``)."""
    return {**given, **{k: v for k, v in used.items() if k not in given and k != "warm_start"}}


def not_own(cfg, store_path: str) -> None:
    """A warm start listing the run's own dataset or store is refused (what auto never picks
    either), before the dataset is read (issue 42: 3 s, pandas, for a check of paths);
    ``cfg``: its TuneConfig."""
    given = cfg.strategy_options.get("warm_start")
    own = {os.path.realpath(p): what for what, p in (("dataset", cfg.dataset),
                                                      ("store", store_path)) if p}
    for p in given if isinstance(given, list) else []:
        if isinstance(p, str) and os.path.realpath(p) in own:
            raise ConfigError(f"strategy.warm_start: {p} is this run's own "
                              f"{own[os.path.realpath(p)]}: its answers would leak into the "
                              "search")
