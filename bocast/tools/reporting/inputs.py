"""``bocast report``'s inputs: the stores that paths name (:func:`find_stores`), each read
once, read only (:func:`read`: :meth:`bocast.records.store.Store.open`, the checks of every command)
into a :class:`Run`."""

from __future__ import annotations

import functools
import glob
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bocast.errors import InputError
from bocast.records.datasets import shipped_datasets
from bocast.records.library import local, portable
from bocast.records.store import Store
from bocast.run.comparison import STORE_NAME
from bocast.run.tuner import best_so_far

TUNE_STORE = "records.db"  # a tune run's store in its --output folder (bocast.api.prepare)
TUNE_FOLDER = "{label}_s{seed}"  # experiments/device/warm_default.sh, bocast tune's default


@dataclass(frozen=True)
class Run:
    """One store: its arm, seed, best-so-far curve (ok records), the vendor reference of its
    meta (``{"tflops", "what"}``, None where it has none) and the TFLOPS of its succeeded
    configurations by key."""

    label: str
    seed: int
    path: str
    curve: tuple[float, ...]
    reference: dict[str, Any] | None
    tflops: Mapping[str, float]
    workload: Mapping[str, Any]
    #: the run's figure where it ended with a re-timing (the store's ``retimed`` meta):
    #: ``{"tflops", "vs_reference", "reference_tflops", "what"}`` of its best kernel
    retimed: Mapping[str, Any] | None = None

    @property
    def trials(self) -> int:
        return len(self.curve)


def _regex(pattern: str) -> re.Pattern[str]:
    """A store name pattern (``{label}``, ``{seed}``) as a regular expression."""
    text = re.escape(pattern).replace(r"\{label\}", r"(?P<label>[^/]+?)")
    return re.compile(text.replace(r"\{seed\}", r"(?P<seed>\d+)"))


def _named(path: str, name: str, pattern: str) -> tuple[str, str | None, int | None]:
    m = _regex(pattern).fullmatch(name)
    if m is None:
        return path, None, None
    return path, m.group("label"), int(m.group("seed")) if "seed" in m.groupdict() else None


def _tune_folder(folder: str) -> tuple[str, str, int | None]:
    name = os.path.basename(os.path.normpath(os.path.abspath(folder)))
    path, label, seed = _named(os.path.join(folder, TUNE_STORE), name, TUNE_FOLDER)
    return path, label or name, seed


def find_stores(paths: Sequence[str], pattern: str | None = None
                ) -> list[tuple[str, str, int | None]]:
    """(store, arm label, seed where its path names it) of every store ``paths`` name (see
    the module); a path that names none raises InputError."""
    out: list[tuple[str, str, int | None]] = []
    found: list[tuple[str, str | None, int | None]]
    for top in paths:
        if not os.path.exists(top):
            raise InputError(f"{top} does not exist")
        if pattern is not None:
            if not os.path.isdir(top):
                raise InputError(f"{top}: pattern {pattern!r} reads a folder, not a file")
            hits = sorted(glob.glob(os.path.join(glob.escape(top), re.sub(
                r"\{(label|seed)\}", "*", pattern))))
            got = [_named(h, os.path.relpath(h, top).replace(os.sep, "/"), pattern)
                   for h in hits]
            found = [(p, lab, s) for p, lab, s in got if lab is not None]
        elif os.path.isfile(top):
            name = os.path.basename(top)
            found = [_tune_folder(os.path.dirname(top)) if name == TUNE_STORE
                     else _named(top, name, STORE_NAME)]
            found = [(p, lab or os.path.splitext(name)[0], s) for p, lab, s in found]
        elif os.path.isfile(os.path.join(top, TUNE_STORE)):
            found = [_tune_folder(top)]
        else:
            names = sorted(os.listdir(top))
            got = [_named(os.path.join(top, n), n, STORE_NAME) for n in names]
            found = [f for f in got if f[1] is not None]
            found += [_tune_folder(os.path.join(top, n)) for n in names
                      if os.path.isfile(os.path.join(top, n, TUNE_STORE))]
        if not found:
            raise InputError(f"{top}: no record store in it ("
                             + (f"none matches {pattern!r}" if pattern else
                                f"a comparison's {STORE_NAME}, or tune-run folders with "
                                f"{TUNE_STORE}; pattern names others") + ")")
        out += [(p, lab, s) for p, lab, s in found if lab is not None]
    return out


def read(path: str, label: str, seed: int | None) -> Run:
    """One store, read only; its seed where its path names none: the run identity's."""
    with Store.open(path) as store:
        records = store.records()
        reference = store.get_meta("reference")
        ident = store.get_meta("run") or {}
        workload = store.workload
        retimed = _retimed(store.get_meta("retimed"))
        replayed = [s["dataset"] for s in store.sessions() if isinstance(s.get("dataset"), str)]
    if seed is None:
        seed = ident["seed"] if isinstance(ident.get("seed"), int) else 0
    if not (isinstance(reference, dict) and reference.get("tflops")):
        reference = _recorded_reference(ident, replayed)
    return Run(label, seed, path, tuple(best_so_far(records)), reference,
               {r.key: float(r.tflops or 0.0) for r in records if r.succeeded}, workload,
               retimed)


def _retimed(meta: Any) -> dict[str, Any] | None:
    """The run's re-timed figure from its store's meta (what ``bocast tune`` printed), None
    where it has none (a replay, a run from before, re-timing off)."""
    try:
        best = meta["best"]
        return {"tflops": float(best["tflops"]["median"]),
                "vs_reference": float(best["vs_reference"]),
                "reference_tflops": float(meta["reference"]["tflops"]["median"]),
                "what": str(meta["reference"].get("what", ""))}
    except (TypeError, KeyError, ValueError):
        return None


def _recorded_reference(ident: Mapping[str, Any],
                        replayed: Sequence[str]) -> dict[str, Any] | None:
    """A replay store's reference: the timing its dataset recorded beside the kernels, marked
    ``recorded`` with the dataset's name (a replay times nothing), or None. The dataset is the
    one the store's sessions name (the replay runner's origin: the very table replayed, as
    ``bocast tune`` read its reference); only a store whose sessions name none falls back to
    the identity's file name, and then only where one shipped dataset has it (a uniform sample
    and an exhaustive table share names: ``gemm_1024_1024_1024_v2``)."""
    if ident.get("runner") != "replay":
        return None
    if replayed:
        prefix: str | None = local(replayed[-1])
    else:
        name = ident.get("dataset")
        same = [p for p in shipped_datasets() if os.path.basename(p) == name]
        prefix = same[0] if len(same) == 1 else None
    ref = _dataset_reference(prefix) if prefix else None
    return {**ref, "recorded": portable(prefix)} if ref and prefix else None


@functools.lru_cache(maxsize=64)
def _dataset_reference(prefix: str) -> dict[str, Any] | None:
    """The reference recorded in the dataset at ``prefix`` (None: none, or no such dataset),
    read once per process: every seed's store of a comparison names the same dataset."""
    try:
        with open(prefix + ".json", encoding="utf-8") as f:
            ref = json.load(f).get("reference")
    except (OSError, ValueError):
        return None
    return ref if isinstance(ref, dict) and ref.get("tflops") else None
