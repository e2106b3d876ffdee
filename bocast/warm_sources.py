"""``warm_start: auto`` (:func:`resolve`): the sources a run starts from, picked from the records
library (:mod:`bocast.library`), and the options a warm run takes (:func:`warm_options`).

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

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bocast.errors import InputError
from bocast.library import Entry, _one_line, scan

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
