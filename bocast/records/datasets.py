"""Datasets: a store's measurements as a compact table (``<prefix>.csv.xz``: knob columns,
status, timings, features) and its description (``<prefix>.json``: workload, provenance,
references, what each column holds), written from a store and read back; replay, the records
library and warm starts read them.

**Shipped datasets** are package data (``bocast/data/``, exhaustive tables under
``exhaustive/``; datasheet ``bocast/data/README.md``), found through :func:`shipped_folder`
alone, so a wheel's install has them as the repository does. A shipped dataset's *name* is its
prefix under that folder (``gemm_1024_1024_1024``, ``exhaustive/gemm_4096_4096_4096_v2``);
:func:`locate` takes it wherever a dataset's prefix is, and the spelling of before the datasets
were package data (``experiments/data/NAME``, relative or absolute) names the same dataset.
"""

from __future__ import annotations

import importlib.resources
import json
import lzma
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from bocast.files import atomic_write
from bocast.records.record import FEATURES, MEASURED, column_docs
from bocast.records.store import _COLUMNS, load
from bocast.space.knobs import Split

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


def shipped_folder() -> str:
    """The folder of the shipped datasets: the package's ``data`` (a wheel installs packages
    as plain files: the resource is a real folder, a pathlib.Path, that pandas and open()
    read)."""
    return os.path.abspath(str(importlib.resources.files("bocast").joinpath("data")))


def shipped_datasets() -> list[str]:
    """The prefixes of the shipped datasets: the uniform samples, then the exhaustive tables."""
    out = []
    for folder in (shipped_folder(), os.path.join(shipped_folder(), "exhaustive")):
        if os.path.isdir(folder):
            out += sorted(os.path.join(folder, f[:-5]) for f in os.listdir(folder)
                          if f.endswith(".json"))
    return out


#: where a shipped dataset's name starts in a path that names it: after the package's data
#: folder, or after experiments/data/, where the datasets lived before they were package data
#: (configurations, stores' identities and sessions still name them so)
_SHIPPED_PART = re.compile(r"(?:^|.*/)(?:experiments|bocast)/data/")


def shipped_name(prefix: str) -> str | None:
    """The name of the shipped dataset that ``prefix`` names (its name, its path in the
    package, or its old path ``experiments/data/NAME``); None if it names none."""
    text = _SHIPPED_PART.sub("", prefix.replace(os.sep, "/").removeprefix("./"), count=1)
    if not text or text.startswith("/") or ".." in text.split("/"):
        return None
    return text if os.path.isfile(os.path.join(shipped_folder(), text + ".json")) else None


def locate(prefix: str, root: str | None = None) -> str:
    """The prefix to open for a dataset named ``prefix`` (a relative one taken under ``root``,
    else the working directory): that path where a dataset is there, else the shipped dataset
    it names (:func:`shipped_name`), else the path as given (opening it says what is missing).
    Every reader of a user's dataset name goes through here."""
    path = prefix if root is None or os.path.isabs(prefix) else os.path.join(root, prefix)
    if any(os.path.exists(f) for f in dataset_files(path)):
        return path
    name = shipped_name(prefix)
    return os.path.join(shipped_folder(), name) if name else path


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
    """(DataFrame, meta) of a dataset written by :func:`export_dataset` (``prefix`` found as
    :func:`locate` finds it: a shipped dataset by its name)."""
    import pandas as pd

    prefix = locate(prefix)
    with open(prefix + ".json") as f:
        meta = json.load(f)
    return pd.read_csv(dataset_csv(prefix)), meta


def dataset_configs(df, knob_columns: Iterable[str], space) -> list[dict[str, Any]]:
    """Configurations of a dataset's rows, rebuilt from its knob columns. A value that is not
    one a knob can take as read (a fraction where an integer belongs, a missing column) raises
    ValueError naming the row (1 = the first under the header) and the knob."""
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
                elif k.name not in r and k.default is not None:
                    cfg[k.name] = k.default  # a knob the space gained after the dataset
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
